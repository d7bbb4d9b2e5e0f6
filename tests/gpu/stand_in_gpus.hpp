// Stand-in GPUs: a CUDA module's C table (backend/cuda_module.h) linked into a test program, for
// tb::useCudaModule. Its "GPUs" are CPU backends behind the module side of the C boundary
// (backend_export), and its NCCL makes the collectives on host memory, the ranks' threads meeting
// as NCCL's ranks do: all-reduce, reduce to a root, broadcast from a root, sum or mean, fp32 or
// bf16 (each partial sum rounded, as NCCL's ring does), and sends and receives between two ranks.
// So the C boundary, the registry's use of a module, and the NCCL communicator's logic across
// several ranks (pipeline stages' links included) run on a machine with no GPU. Its collectives
// wait for a rank that stays away until the group is aborted, as NCCL's do.
#pragma once
#include "backend/cuda_module.h"

namespace tbtest {

// The table for `gpus` stand-in GPUs (1 .. 8), each backend one CPU thread.
const TbCudaModule& standInGpuModule(int gpus);
// The algorithm store the registry handed the last backend it made (TbCudaOptions::algorithms).
const TbAlgorithmStore* standInAlgorithmStore();
// Collectives the stand-in NCCL has made so far (all-reduce, reduce, broadcast), over all ranks,
// and point-to-point sends.
struct StandInNcclCounts {
    long allReduce = 0, reduce = 0, broadcast = 0, send = 0;
};
StandInNcclCounts standInNcclCounts();
// The next all-reduce, reduce or broadcast of `rank` (in any group) fails at once, and the rank
// stays away from the collective (as one whose NCCL call returned an error).
void failStandInCollective(int rank);
// From now on `rank`'s communicator (in any group) reports an asynchronous error, as NCCL's does
// when a peer or link is lost while the GPU waits; -1 ends it.
void standInAsyncError(int rank);

}  // namespace tbtest
