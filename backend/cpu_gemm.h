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

// The plain C++ path (cache-blocked dot products), used when OpenBLAS is absent.
void CpuGemmFallback(const float* x, const float* w, const float* bias, float* y, int64_t M,
                     int64_t N, int64_t K);

// Threads that the BLAS GEMM may use (process-wide: OpenBLAS has one pool).
// The fallback is single-threaded.
void CpuGemmSetNumThreads(int num_threads);

// "openblas" or "fallback": which path CpuGemm takes in this build.
const char* CpuGemmImplementation();

}  // namespace tpserve
