// The module's side of the C boundary (cuda_module.h): any tb::Backend behind the C table, each
// exception caught at the boundary and returned as TB_ERROR with its message. Compiled into the
// modules (the CUDA backend, and the tests' stand-in GPUs), never into programs.
#pragma once
#include <exception>
#include <memory>

#include "backend/backend.hpp"
#include "backend/cuda_module.h"
#include "backend/module_handles.hpp"

namespace tb {

// The operations of every TbBackend made by exportBackend.
const TbBackendInterface& exportedBackendInterface();
// A TbBackend over `backend`, destroyed through the table's destroy.
TbBackend* exportBackend(std::shared_ptr<Backend> backend);

void writeError(TbError* err, const char* text);
// f(), with any exception as TB_ERROR and its message in err.
template <class F>
int guarded(TbError* err, F&& f) {
    try {
        f();
        return TB_OK;
    } catch (const std::exception& e) {
        writeError(err, e.what());
    } catch (...) {
        writeError(err, "unknown failure");
    }
    return TB_ERROR;
}

}  // namespace tb
