// The emulated cuBLAS: the calls the CUDA backend makes (cuda/cuda_backend.cc),
// with cublasGemmEx as a plain host GEMM: bf16 or f32 operands, fp32
// accumulation (CUBLAS_COMPUTE_32F), column-major like cuBLAS. Not the
// tensor cores' summation order or rounding.
#include <cublas_v2.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "model/dtype.h"

namespace {

struct Handle {
  cudaStream_t stream = nullptr;
};

float Load(const void* base, cudaDataType type, int64_t i) {
  if (type == CUDA_R_32F) return static_cast<const float*>(base)[i];
  return tpserve::Bf16ToFloat(static_cast<const uint16_t*>(base)[i]);
}

void Store(void* base, cudaDataType type, int64_t i, float v) {
  if (type == CUDA_R_32F) {
    static_cast<float*>(base)[i] = v;
  } else {
    static_cast<uint16_t*>(base)[i] = tpserve::FloatToBf16(v);
  }
}

bool Supported(cudaDataType t) { return t == CUDA_R_32F || t == CUDA_R_16BF; }

}  // namespace

extern "C" {

cublasStatus_t cublasCreate_v2(cublasHandle_t* handle) {
  *handle = reinterpret_cast<cublasHandle_t>(new Handle);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasDestroy_v2(cublasHandle_t handle) {
  delete reinterpret_cast<Handle*>(handle);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, cudaStream_t stream) {
  reinterpret_cast<Handle*>(handle)->stream = stream;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetWorkspace_v2(cublasHandle_t, void*, size_t) { return CUBLAS_STATUS_SUCCESS; }

const char* cublasGetStatusString(cublasStatus_t status) {
  return status == CUBLAS_STATUS_SUCCESS ? "CUBLAS_STATUS_SUCCESS (emulated)" : "cuBLAS error (emulated)";
}

// C[m, n] = alpha · op(A)[m, k] · op(B)[k, n] + beta · C, column-major.
cublasStatus_t cublasGemmEx(cublasHandle_t, cublasOperation_t transa, cublasOperation_t transb, int m, int n, int k,
                            const void* alpha, const void* A, cudaDataType Atype, int lda, const void* B,
                            cudaDataType Btype, int ldb, const void* beta, void* C, cudaDataType Ctype, int ldc,
                            cublasComputeType_t compute, cublasGemmAlgo_t) {
  if (compute != CUBLAS_COMPUTE_32F || !Supported(Atype) || !Supported(Btype) || !Supported(Ctype)) {
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  float a_scale, b_scale;
  std::memcpy(&a_scale, alpha, sizeof(float));
  std::memcpy(&b_scale, beta, sizeof(float));
  std::vector<float> a_row(static_cast<size_t>(k)), b_col(static_cast<size_t>(k));
  for (int i = 0; i < m; ++i) {
    for (int p = 0; p < k; ++p) {  // op(A)[i, p]
      a_row[static_cast<size_t>(p)] = transa == CUBLAS_OP_N ? Load(A, Atype, int64_t{p} * lda + i)
                                                            : Load(A, Atype, int64_t{i} * lda + p);
    }
    for (int j = 0; j < n; ++j) {
      float acc = 0.f;
      for (int p = 0; p < k; ++p) {
        const float b = transb == CUBLAS_OP_N ? Load(B, Btype, int64_t{j} * ldb + p) : Load(B, Btype, int64_t{p} * ldb + j);
        acc += a_row[static_cast<size_t>(p)] * b;
      }
      const int64_t c = int64_t{j} * ldc + i;
      Store(C, Ctype, c, a_scale * acc + (b_scale != 0.f ? b_scale * Load(C, Ctype, c) : 0.f));
    }
  }
  return CUBLAS_STATUS_SUCCESS;
}

}  // extern "C"
