#include "backend/op_checks.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "base/check.h"

namespace tpserve {
namespace {

const char* DeviceName(Device device) { return device == Device::kCpu ? "cpu" : "cuda"; }

}  // namespace

void OpFailed(const char* backend, const char* op, std::string_view what) {
  TPSERVE_FATAL(backend, "::", op, ": ", std::string(what));
}

void CheckOperand(const OperandKind& kind, const char* op, const char* name, const Tensor& t) {
  if (t.device == kind.device && t.dtype == kind.dtype && (t.data || t.numel() == 0)) return;
  OpFailed(
      kind.backend, op,
      absl::StrCat(name, " ", t.ShapeString(), " must be a ", std::string(DTypeName(kind.dtype)),
                   " ", DeviceName(kind.device), " tensor with data (dtype ",
                   std::string(DTypeName(t.dtype)), ", device ", DeviceName(t.device), ")"));
}

void CheckRows(const OperandKind& kind, const char* op, const char* name, const Tensor& t,
               int64_t rows, int64_t cols) {
  CheckOperand(kind, op, name, t);
  if (t.ndim >= 1 && t.dim(0) == rows && t.row_width() * rows == t.numel() &&
      (rows == 0 || t.row_width() == cols)) {
    return;
  }
  OpFailed(kind.backend, op,
           absl::StrCat(name, " is ", t.ShapeString(), ", expected [", rows, ", ", cols, "]"));
}

void CheckVector(const OperandKind& kind, const char* op, const char* name, const Tensor& t,
                 int64_t n) {
  CheckOperand(kind, op, name, t);
  if (t.numel() == n) return;
  OpFailed(kind.backend, op, absl::StrCat(name, " is ", t.ShapeString(), ", expected [", n, "]"));
}

void CheckLinear(const OperandKind& kind, const Tensor& x, const Tensor& w, const Tensor* bias,
                 const Tensor& y) {
  const int64_t M = x.dim(0), K = x.row_width(), N = w.dim(0);
  CheckRows(kind, "Linear", "x", x, M, K);
  CheckRows(kind, "Linear", "w", w, N, K);
  CheckRows(kind, "Linear", "y", y, M, N);
  if (bias) CheckVector(kind, "Linear", "bias", *bias, N);
  if (y.data == x.data || y.data == w.data)
    OpFailed(kind.backend, "Linear", "y must not alias x or w");
}

}  // namespace tpserve
