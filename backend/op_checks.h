// Operand checks shared by the backends' ops. A mismatch is a programming
// error (backend.h, "Conventions"): the process ends naming the backend, the
// op, the operand and its shape, e.g.
//   CpuBackend::Linear: w is [5, 8], expected [5, 7]
#pragma once

#include <cstdint>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "backend/tensor.h"

namespace tpserve {

// What one backend's ops take: its name in messages, its device and its
// compute dtype.
struct OperandKind {
  const char* backend;  // "CpuBackend", "CudaBackend"
  Device device;
  DType dtype;
};

// Ends the process with "<backend>::<op>: <what>" (base/check.h).
[[noreturn]] void OpFailed(const char* backend, const char* op, std::string_view what);

// OpFailed with absl::StrCat(what...) unless `ok`.
template <typename... Parts>
void CheckOp(const OperandKind& kind, bool ok, const char* op, const Parts&... what) {
  if (!ok) [[unlikely]]
    OpFailed(kind.backend, op, absl::StrCat(what...));
}

// t is a kind.dtype tensor on kind.device with data (or with no elements).
void CheckOperand(const OperandKind& kind, const char* op, const char* name, const Tensor& t);
// ... viewed as [rows, cols] (any trailing dims fold into cols).
void CheckRows(const OperandKind& kind, const char* op, const char* name, const Tensor& t,
               int64_t rows, int64_t cols);
// ... with n elements.
void CheckVector(const OperandKind& kind, const char* op, const char* name, const Tensor& t,
                 int64_t n);
// Linear's operands: x [M, K], w [N, K], bias [N] or nullptr, y [M, N], with y
// aliasing neither x nor w.
void CheckLinear(const OperandKind& kind, const Tensor& x, const Tensor& w, const Tensor* bias,
                 const Tensor& y);

}  // namespace tpserve
