// joinProcessGroup for builds without MPI: a run started by mpirun among several processes is
// refused (each would train alone and write the same outputs), a single process runs as usual.
#include <cstdlib>

#include "comm/process_group.hpp"
#include "util/error.hpp"

namespace tb {

std::unique_ptr<ProcessGroup> joinProcessGroup() {
    for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"}) {
        const char* v = std::getenv(name);
        if (v && std::atoi(v) > 1)
            throw Error(std::string("mpirun started ") + v + " processes, but this towerbench-run was built without MPI "
                        "(install libopenmpi-dev and build again)");
    }
    return nullptr;
}

}  // namespace tb
