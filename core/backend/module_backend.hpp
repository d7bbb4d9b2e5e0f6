// The program's side of the C boundary (cuda_module.h): a loaded module's C table as the Backend
// interface, every TB_ERROR a tb::Error with the module's message; and the check of a module's ABI.
#pragma once
#include <memory>
#include <string>

#include "backend/backend.hpp"
#include "backend/cuda_module.h"
#include "backend/module_handles.hpp"

namespace tb {

// The backend `handle` that module `m` made for GPU `index`, owned from here on.
std::shared_ptr<Backend> wrapModuleBackend(const TbCudaModule& m, TbBackend* handle, int index);

// Why module `m` (loaded from `path`) cannot be used by this program: its TbCudaAbi differs from
// the one this program was built with (another cuda_module.h, or another compiler's layout). Empty
// where they agree.
std::string moduleAbiProblem(const TbCudaModule& m, const std::string& path);

// Throws tb::Error with err's message where rc is not TB_OK.
void checkModuleCall(int rc, const TbError& err);

}  // namespace tb
