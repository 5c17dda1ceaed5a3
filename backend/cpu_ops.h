// The CPU backend's row-wise operations on raw fp32 arrays (everything but GEMM
// and attention). CpuBackend checks the shapes and the step, then calls these;
// they are plain loops over contiguous rows.
#pragma once

#include <cstdint>

#include "backend/backend.h"

namespace tpserve {

// out[t] = table[ids[t] - vocab_start] for ids in [vocab_start, vocab_start + Vs), else zeros.
void CpuEmbedding(const int32_t* ids /*[T]*/, int64_t T, const float* table /*[Vs, D]*/,
                  int64_t Vs, int64_t D, int64_t vocab_start, float* out /*[T, D]*/);

// out = x / sqrt(mean(x²) + eps) * w per row; out may equal x.
void CpuRmsNorm(const float* x /*[M, D]*/, const float* w /*[D]*/, float eps, int64_t M, int64_t D,
                float* out /*[M, D]*/);

// residual += x; x = RmsNorm(residual) * w.
void CpuAddRmsNorm(float* x /*[M, D] in/out*/, float* residual /*[M, D] in/out*/,
                   const float* w /*[D]*/, float eps, int64_t M, int64_t D);

// In place on the q and k heads of each token: optional per-head RMSNorm, then
// rotate-half RoPE at positions[t] from rope rows [cos(hd/2) | sin(hd/2)].
void CpuQkNormRope(float* qkv /*[T, (Hq + 2 Hkv) · hd]*/, int64_t T,
                   const int32_t* positions /*[T]*/, const AttentionShape& shape,
                   const float* q_norm /*[hd] or nullptr*/, const float* k_norm /*[hd] or nullptr*/,
                   float eps, const float* rope /*[max_position, hd]*/);

// out = silu(gate) * up with gate_up rows [gate(F) | up(F)].
void CpuSiluMul(const float* gate_up /*[M, 2F]*/, int64_t M, int64_t F, float* out /*[M, F]*/);

// out[s] = x[rows[s]].
void CpuGatherRows(const float* x /*[T, D]*/, int64_t D, const int32_t* rows /*[S]*/, int64_t S,
                   float* out /*[S, D]*/);

}  // namespace tpserve
