#include "io/output_path.hpp"

#include <unistd.h>

#include <filesystem>

#include "util/error.hpp"

namespace tb {

namespace fs = std::filesystem;

void checkOutputFile(const std::string& path, const std::string& flag, const std::vector<std::string>& inputFiles,
                     const std::vector<std::string>& inputDirs) {
    std::error_code ec;
    const fs::path out = fs::absolute(path, ec);
    if (path.empty() || ec) throw Error(flag + ": '" + path + "' is not a file name");
    const bool exists = fs::exists(out, ec);
    if (exists && fs::is_directory(out, ec)) throw Error(flag + ": " + path + " is a folder, not a file");
    for (const std::string& in : inputFiles)
        if (exists && !in.empty() && fs::equivalent(out, in, ec))
            throw Error(flag + ": " + path + " is also an input of this run (" + in + "); writing would destroy it");
    // The folder the file would be in, compared with each input folder (and their parents: a
    // file under a data folder's subfolder is inside it too).
    const fs::path parent = out.parent_path();
    if (!fs::is_directory(parent, ec)) throw Error(flag + ": the folder " + parent.string() + " does not exist");
    for (const std::string& dir : inputDirs) {
        if (dir.empty() || !fs::is_directory(dir, ec)) continue;
        for (fs::path p = parent; !p.empty(); p = p.parent_path()) {
            if (fs::equivalent(p, dir, ec))
                throw Error(flag + ": " + path + " lies in " + dir + ", which this run reads or keeps its own files in");
            if (p == p.root_path()) break;
        }
    }
    if (exists ? ::access(out.c_str(), W_OK) != 0 : ::access(parent.c_str(), W_OK | X_OK) != 0)
        throw Error(flag + ": " + path + " cannot be written (" + (exists ? "the file" : "its folder") +
                    " is read-only to this user)");
}

}  // namespace tb
