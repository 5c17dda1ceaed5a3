#include "comm/collective_args.h"

#include "absl/strings/str_cat.h"

namespace tpserve::comm_internal {

absl::Status CheckTensor(const Tensor& t, const char* op, const char* name) {
  if (t.dtype != DType::kF32 && t.dtype != DType::kBF16) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": tensor '", name, "' has dtype ",
                                                   std::string(DTypeName(t.dtype)),
                                                   "; communicators support F32 and BF16 only"));
  }
  if (t.numel() > 0 && t.data == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": tensor '", name, "' ", t.ShapeString(), " has no data pointer"));
  }
  return absl::OkStatus();
}

absl::Status CheckGathered(const Tensor& in, const Tensor& out, int world_size, const char* op) {
  if (absl::Status s = CheckTensor(in, op, "in"); !s.ok()) return s;
  if (absl::Status s = CheckTensor(out, op, "out"); !s.ok()) return s;
  if (out.dtype != in.dtype || out.device != in.device) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": 'out' must have the dtype and device of 'in' (in ", std::string(DTypeName(in.dtype)), ", out ",
        std::string(DTypeName(out.dtype)), ")"));
  }
  if (out.ndim == 0 || out.dim(0) != world_size || out.numel() != world_size * in.numel()) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": 'out' is ", out.ShapeString(), " but must be [", world_size, ", ...] with ",
        world_size, " x ", in.numel(), " elements ('in' is ", in.ShapeString(), ")"));
  }
  return absl::OkStatus();
}

absl::Status CheckRoot(int root, int world_size, const char* op) {
  if (root < 0 || root >= world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": root ", root, " is not a rank of a world of size ", world_size));
  }
  return absl::OkStatus();
}

}  // namespace tpserve::comm_internal
