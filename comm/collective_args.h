// Argument checks shared by the Communicator implementations: every one
// rejects the same bad calls with the same INVALID_ARGUMENT messages.
#pragma once

#include "absl/status/status.h"
#include "backend/tensor.h"

namespace tpserve::comm_internal {

// t is kF32 or kBF16 and has data unless it is empty.
absl::Status CheckTensor(const Tensor& t, const char* op, const char* name);

// out has the dtype and device of in, out.dim(0) == world_size and
// out.numel() == world_size * in.numel() (e.g. [world, ...in's shape]).
absl::Status CheckGathered(const Tensor& in, const Tensor& out, int world_size, const char* op);

// 0 <= root < world_size.
absl::Status CheckRoot(int root, int world_size, const char* op);

}  // namespace tpserve::comm_internal
