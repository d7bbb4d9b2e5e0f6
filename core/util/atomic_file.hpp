// AtomicFile: a file that appears whole or not at all. It is written to a temporary name beside
// its destination, flushed to the disk (fsync), renamed over the destination, and the folder is
// flushed too, so a crash or kill -9 at any instant leaves either the previous file or the new
// one, never a torn one. Without commit() (an error, an exception) the temporary is removed.
#pragma once
#include <cstddef>
#include <string>

namespace tb {

class AtomicFile {
public:
    explicit AtomicFile(std::string path);  // throws tb::Error when the temporary cannot be made
    ~AtomicFile();
    AtomicFile(const AtomicFile&) = delete;
    AtomicFile& operator=(const AtomicFile&) = delete;
    void write(const void* data, size_t bytes);
    void commit();  // fsync, rename, fsync the folder; throws tb::Error naming the file on failure
    const std::string& path() const { return path_; }

private:
    std::string path_, temp_;
    int fd_ = -1;
};

// One call for small files (configs, summaries): the whole text, atomically.
void writeFileAtomically(const std::string& path, const std::string& text);
// fsync of a folder, so a rename or a new file in it survives a crash.
void syncFolder(const std::string& folder);

}  // namespace tb
