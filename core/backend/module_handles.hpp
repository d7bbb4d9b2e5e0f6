// Streams, events and graphs cross the C boundary (cuda_module.h) as the same pointers, opaque on
// both sides: the program's Stream is the module's TbStream*, and so on. These casts are the one
// place that says so, for the module's side (backend_export) and the program's (module_backend).
#pragma once
#include "backend/backend.hpp"
#include "backend/cuda_module.h"

namespace tb {

inline Stream streamOf(TbStream* s) { return reinterpret_cast<Stream>(s); }
inline Event eventOf(TbEvent* e) { return reinterpret_cast<Event>(e); }
inline Graph graphOf(TbGraph* g) { return reinterpret_cast<Graph>(g); }

inline TbStream* handleOf(Stream s) { return reinterpret_cast<TbStream*>(s); }
inline TbEvent* handleOf(Event e) { return reinterpret_cast<TbEvent*>(e); }
inline TbGraph* handleOf(Graph g) { return reinterpret_cast<TbGraph*>(g); }

}  // namespace tb
