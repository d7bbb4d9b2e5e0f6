// joinProcessGroup for builds without MPI: a run started by mpirun among several processes is
// refused (each would train alone and write the same outputs), a single process runs as usual.
#include <string>

#include "comm/process_group.hpp"
#include "util/error.hpp"

namespace tb {

std::unique_ptr<ProcessGroup> joinProcessGroup() {
    if (const int n = launchedProcesses(); n > 1)
        throw Error("mpirun started " + std::to_string(n) + " processes, but this towerbench-run was built without MPI "
                    "(install libopenmpi-dev and build again)");
    return nullptr;
}

}  // namespace tb
