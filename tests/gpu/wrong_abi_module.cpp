// A CUDA module whose table was built from another cuda_module.h (its header hash differs): the
// registry must refuse it, in one sentence naming it, when TB_CUDA_MODULE points here.
#include <cstring>

#include "backend/cuda_module.h"
#include "cuda_module_abi.h"

extern "C" __attribute__((visibility("default"))) const TbCudaModule* tb_cuda_module() {
    static const TbCudaModule m = [] {
        const TbCudaAbi abi = TB_CUDA_ABI;
        TbCudaModule t{};
        t.abi = abi;
        std::memcpy(t.abi.headerSha256, "00000000", 8);
        return t;
    }();
    return &m;
}
