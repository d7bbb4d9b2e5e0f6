// The communicators behind makeCommunicator (communicator.hpp); one file each.
#pragma once
#include <memory>
#include <vector>

#include "comm/communicator.hpp"

namespace tb {

std::unique_ptr<Communicator> makeSharedMemoryCommunicator(std::vector<RankEndpoint> ranks, HolderEndpoint holder,
                                                           size_t maxCount);
std::unique_ptr<Communicator> makeCopyCommunicator(std::vector<RankEndpoint> ranks, HolderEndpoint holder,
                                                   size_t maxCount);
// `processes`: one NCCL group over every process's towers (replicas only), or null.
std::unique_ptr<Communicator> makeNcclCommunicator(std::vector<RankEndpoint> ranks, HolderEndpoint holder,
                                                   size_t maxCount, ProcessGroup* processes);

}  // namespace tb
