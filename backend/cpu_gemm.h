// GEMM for the CPU backend: y = x · wᵀ (+ bias), all fp32, row-major, contiguous.
//
// The weight layout is the checkpoint's [out_features, in_features], so both x
// and w are read along K. CpuGemm uses OpenBLAS when the build found it
// (TPSERVE_BLAS=AUTO|ON) and the plain blocked loop below otherwise; the loop is
// exported so that tests check it even in builds that have OpenBLAS.
#pragma once

#include <cstdint>

namespace tpserve {

// y[M, N] = x[M, K] · w[N, K]ᵀ + bias[N] (bias may be nullptr). y must not alias x or w.
void CpuGemm(const float* x, const float* w, const float* bias, float* y, int64_t M, int64_t N,
             int64_t K);

// The plain C++ path (cache-blocked dot products), used when OpenBLAS is absent
// and in batch-invariant mode. Batch-invariant: row m of y is bitwise the same
// whatever M is and wherever the row sits in x, because every element is
// summed over the same K blocks in the same order. OpenBLAS is not (its sgemm
// rounds a row differently with M, and sgemv differs from both), so a sampled
// token at a near-tie can change with the batch a sequence shares.
void CpuGemmFallback(const float* x, const float* w, const float* bias, float* y, int64_t M,
                     int64_t N, int64_t K);

// Threads that the BLAS GEMM may use (process-wide: OpenBLAS has one pool).
// The fallback is single-threaded.
void CpuGemmSetNumThreads(int num_threads);

// "openblas" or "fallback": which path CpuGemm takes in this build.
const char* CpuGemmImplementation();

}  // namespace tpserve
