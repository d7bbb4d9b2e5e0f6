// Output files checked before a run starts: the folder must exist and take writes, and the file
// must be none of the run's inputs (--metrics naming the model file, a data file or the config
// would empty it as the run opens it).
#pragma once
#include <string>
#include <vector>

namespace tb {

// Throws tb::Error naming `flag` when `path` is the same file as one of `inputFiles`, lies in
// one of `inputDirs` (a data folder, a run folder that keeps its own files), or cannot be
// written (its folder missing or read-only, an existing file read-only, a folder by that name).
// Creates and changes nothing.
void checkOutputFile(const std::string& path, const std::string& flag, const std::vector<std::string>& inputFiles,
                     const std::vector<std::string>& inputDirs);

}  // namespace tb
