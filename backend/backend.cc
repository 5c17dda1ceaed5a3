#include "backend/backend.h"

#include <utility>

#include "base/check.h"

namespace tpserve {

Buffer Backend::Allocate(DType dtype, std::span<const int64_t> shape) {
  absl::StatusOr<Buffer> buffer = TryAllocate(dtype, shape);
  TPSERVE_CHECK(buffer.ok(), buffer.status().message());
  return *std::move(buffer);
}

}  // namespace tpserve
