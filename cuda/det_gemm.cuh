// The batch-invariant GEMM: Backend::Linear (every projection and the LM
// head) of the CUDA backend's deterministic mode (cuda_backend.h), for every
// M, decode and prefill alike.
//
//   y[m, n] = bf16(acc(m, n) + bias[n])   (bias added in fp32, one rounding)
//   acc(m, n): c = 0; for k0 = 0, 16, 32, ... < K (in that order):
//                c = mma(x[m, k0 .. k0 + 15], w[n, k0 .. k0 + 15], c)
// with the bf16 mma.m16n8k16 and fp32 accumulation of cuda/mma.cuh (k past K
// reads zeros). Every output element is that one chain along K, whatever M is
// and wherever row m sits in its tile: no split of K, no tile shape or
// algorithm that depends on M. So row m of y is a function of row m of x and
// of w alone, the same bits in a step of 1 token or of 4,096. (Assumed here
// as by every batch-invariant GEMM on tensor cores: an mma's element (i, j)
// depends on row i of A, column j of B and C(i, j) only; the emulated mma of
// cuda/mma.cuh computes exactly that.)
//
// Why not cuBLAS (the fast set's GEMM above 8 rows): cuBLAS picks its kernel,
// tile and split-K per (M, N, K), so a row's rounding changes with the batch;
// cuBLASLt with one algorithm pinned per weight shape would fix that on a GPU,
// but the emulated suite (cuda-emu) could not run it, and the invariance is
// what that suite has to prove. The small-batch GEMV is not used either: its
// per-element order (SIMT FMAs, warps splitting K) differs from this one's, so
// a switch between the two at some M would change a row's bits.
//
// Tiling (performance only; the arithmetic above does not depend on it): a
// block of 4 warps owns 64 rows × 32 columns, each warp 8 columns of all 64
// rows (its B fragment read once per k-step for 4 m16 tiles; m16 tiles wholly
// past M are skipped); K in stages of 64 through shared memory, the next
// stage's 16-byte loads in flight during this one's mma. Decode (M ≤ 64)
// reads each weight byte once; the grid has ceil(N / 32) × ceil(M / 64)
// blocks. Unmeasured on a GPU: bench/gpu/gpu_bench.cc's `gemm` section times
// it beside cuBLAS and the GEMV.
#pragma once

#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

namespace tpserve::cuda {

// y = x · wᵀ (+ bias) as above.
//   x: [M, K] bf16   w: [N, K] bf16   bias: [N] bf16 or null   y: [M, N] bf16 (not aliasing x)
// Any M, N, K ≥ 1 within int32 (K a multiple of 8 with 16-byte aligned x and w
// takes 16-byte loads; other shapes load element by element, the same
// arithmetic); no workspace, no host synchronisation: CUDA graphs capture it.
// cudaErrorInvalidValue for sizes out of range or null operands.
cudaError_t LaunchDetGemm(const __nv_bfloat16* x, const __nv_bfloat16* w, const __nv_bfloat16* bias, int64_t M,
                          int64_t N, int64_t K, __nv_bfloat16* y, cudaStream_t stream);

}  // namespace tpserve::cuda
