// FailCublas: the report behind CUBLAS_CHECK (cuda/check.h).
#include <cublas_v2.h>

#include <cstdio>
#include <cstdlib>

#include "cuda/check.h"

namespace tpserve::cuda {

void FailCublas(const char* stmt, const char* file, int line, int status) {
  int device = -1;
  cudaGetDevice(&device);  // best effort: the device is part of the report
  std::fprintf(stderr, "cuBLAS error on device %d: %s (%d)\n  in %s\n  at %s:%d\n", device,
               cublasGetStatusString(static_cast<cublasStatus_t>(status)), status, stmt, file, line);
  std::abort();
}

}  // namespace tpserve::cuda
