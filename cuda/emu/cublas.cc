// The emulated cuBLAS: the calls the CUDA backend makes (cuda/cuda_backend.cc),
// with cublasGemmEx as a plain host GEMM: bf16 or f32 operands, fp32
// accumulation (CUBLAS_COMPUTE_32F), column-major like cuBLAS. Not the
// tensor cores' summation order or rounding. A GEMM is work on the handle's
// stream (cuda/emu/capture.h): run at once, or recorded while that stream
// captures a graph, with alpha and beta read at the call (host pointer mode).
#include <cublas_v2.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "cuda/emu/capture.h"
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

}  // extern "C"

namespace {

struct Gemm {
  cublasOperation_t transa, transb;
  int m, n, k;
  float alpha, beta;
  const void* A;
  cudaDataType Atype;
  int lda;
  const void* B;
  cudaDataType Btype;
  int ldb;
  void* C;
  cudaDataType Ctype;
  int ldc;
};

// C[m, n] = alpha · op(A)[m, k] · op(B)[k, n] + beta · C, column-major.
void Run(const Gemm& g) {
  std::vector<float> a_row(static_cast<size_t>(g.k));
  for (int i = 0; i < g.m; ++i) {
    for (int p = 0; p < g.k; ++p) {  // op(A)[i, p]
      a_row[static_cast<size_t>(p)] = g.transa == CUBLAS_OP_N ? Load(g.A, g.Atype, int64_t{p} * g.lda + i)
                                                              : Load(g.A, g.Atype, int64_t{i} * g.lda + p);
    }
    for (int j = 0; j < g.n; ++j) {
      float acc = 0.f;
      for (int p = 0; p < g.k; ++p) {
        const float b = g.transb == CUBLAS_OP_N ? Load(g.B, g.Btype, int64_t{j} * g.ldb + p)
                                                : Load(g.B, g.Btype, int64_t{p} * g.ldb + j);
        acc += a_row[static_cast<size_t>(p)] * b;
      }
      const int64_t c = int64_t{j} * g.ldc + i;
      Store(g.C, g.Ctype, c, g.alpha * acc + (g.beta != 0.f ? g.beta * Load(g.C, g.Ctype, c) : 0.f));
    }
  }
}

}  // namespace

extern "C" {

cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
                            int k, const void* alpha, const void* A, cudaDataType Atype, int lda, const void* B,
                            cudaDataType Btype, int ldb, const void* beta, void* C, cudaDataType Ctype, int ldc,
                            cublasComputeType_t compute, cublasGemmAlgo_t) {
  if (compute != CUBLAS_COMPUTE_32F || !Supported(Atype) || !Supported(Btype) || !Supported(Ctype)) {
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  Gemm g{transa, transb, m, n, k, 0.f, 0.f, A, Atype, lda, B, Btype, ldb, C, Ctype, ldc};
  std::memcpy(&g.alpha, alpha, sizeof(float));
  std::memcpy(&g.beta, beta, sizeof(float));
  const cudaError_t err = tpserve::cuda::emu::Enqueue(reinterpret_cast<Handle*>(handle)->stream, [g] {
    Run(g);
    return cudaSuccess;
  });
  return err == cudaSuccess ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_EXECUTION_FAILED;
}

}  // extern "C"
