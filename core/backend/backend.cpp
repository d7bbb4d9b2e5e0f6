#include "backend/backend.hpp"

namespace tb {

Tensor Backend::empty(const Shape& shape) {
    float* p = static_cast<float*>(allocate(size_t(shape.numel()) * sizeof(float)));
    return Tensor(p, shape, device(), [owner = shared_from_this()](float* q) { owner->deallocate(q); });
}

}  // namespace tb
