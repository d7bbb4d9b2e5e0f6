#include "util/atomic_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "util/error.hpp"

namespace tb {

namespace {
std::string reason() { return std::strerror(errno); }
}  // namespace

void syncFolder(const std::string& folder) {
    const int fd = ::open(folder.empty() ? "." : folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) throw Error(folder + ": cannot open the folder to flush it (" + reason() + ")");
    const int rc = ::fsync(fd);
    const std::string why = rc != 0 ? reason() : std::string();
    ::close(fd);
    if (rc != 0) throw Error(folder + ": cannot flush the folder to disk (" + why + ")");
}

AtomicFile::AtomicFile(std::string path) : path_(std::move(path)) {
    // The temporary is in the destination's folder (rename is atomic only within one file
    // system) and named by process, so two writers never share one.
    temp_ = path_ + ".tmp." + std::to_string(::getpid());
    fd_ = ::open(temp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0) throw Error(path_ + ": cannot create " + temp_ + " (" + reason() + ")");
}

AtomicFile::~AtomicFile() {
    if (fd_ >= 0) {
        ::close(fd_);
        ::unlink(temp_.c_str());
    }
}

void AtomicFile::write(const void* data, size_t bytes) {
    const char* p = static_cast<const char*>(data);
    while (bytes > 0) {
        const ssize_t n = ::write(fd_, p, bytes);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) throw Error(path_ + ": write failed (" + (n < 0 ? reason() : std::string("no progress")) + ")");
        p += n;
        bytes -= size_t(n);
    }
}

void AtomicFile::commit() {
    if (::fsync(fd_) != 0) throw Error(path_ + ": cannot flush to disk (" + reason() + ")");
    if (::close(fd_) != 0) {
        const std::string why = reason();  // before unlink() sets errno again
        fd_ = -1;
        ::unlink(temp_.c_str());
        throw Error(path_ + ": closing failed (" + why + ")");
    }
    fd_ = -1;
    if (::rename(temp_.c_str(), path_.c_str()) != 0) {
        const std::string why = reason();
        ::unlink(temp_.c_str());
        throw Error(path_ + ": cannot replace it (" + why + ")");
    }
    syncFolder(std::filesystem::path(path_).parent_path().string());
}

void writeFileAtomically(const std::string& path, const std::string& text) {
    AtomicFile f(path);
    f.write(text.data(), text.size());
    f.commit();
}

}  // namespace tb
