// FailCublas: the report behind CUBLAS_CHECK (cuda/check.h).
#include <cublas_v2.h>

#include "absl/strings/str_cat.h"
#include "base/check.h"
#include "cuda/check.h"

namespace tpserve::cuda {

void FailCublas(const char* stmt, const char* file, int line, int status) {
  int device = -1;
  cudaGetDevice(&device);  // best effort: the device is part of the report
  base::CheckFailed(file, line, stmt,
                    absl::StrCat("cuBLAS error on device ", device, ": ",
                                 cublasGetStatusString(static_cast<cublasStatus_t>(status)), " (",
                                 status, ")"));
}

}  // namespace tpserve::cuda
