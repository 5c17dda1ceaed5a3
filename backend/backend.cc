#include "backend/backend.h"

#include <utility>

#include "base/check.h"

namespace tpserve {

Buffer Backend::Allocate(DType dtype, std::span<const int64_t> shape) {
  absl::StatusOr<Buffer> buffer = TryAllocate(dtype, shape);
  TPSERVE_CHECK(buffer.ok(), buffer.status().message());
  return *std::move(buffer);
}

void Backend::LinearAddResidual(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor y, Tensor residual) {
  (void)x, (void)w, (void)bias, (void)y, (void)residual;
  TPSERVE_CHECK(false, name(), " does not implement LinearAddResidual: the model calls it only when the backend's "
                "FusesLayerOps says so");
}

}  // namespace tpserve
