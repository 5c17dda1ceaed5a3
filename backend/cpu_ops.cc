#include "backend/cpu_ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace tpserve {
namespace {

constexpr int kLanes = 8;

// Σ x[i]² with independent partial sums in double (vectorisable, and accurate
// enough to be an oracle for any D the models use).
double SumSquares(const float* x, int64_t n) {
  double acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int l = 0; l < kLanes; ++l) {
      const double v = x[i + l];
      acc[l] += v * v;
    }
  }
  for (; i < n; ++i) acc[0] += static_cast<double>(x[i]) * x[i];
  double s = 0;
  for (double a : acc) s += a;
  return s;
}

float InverseRms(const float* x, int64_t n, float eps) {
  return static_cast<float>(1.0 / std::sqrt(SumSquares(x, n) / static_cast<double>(n) + eps));
}

// x = x * inv * w over one row of n.
void ScaleRow(const float* x, float inv, const float* w, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] * inv * w[i];
}

// Rotate-half RoPE of one head in place: (a, b) = (x[i], x[i + half]) ->
// (a·cos − b·sin, b·cos + a·sin).
void RopeHead(float* x, const float* cos, const float* sin, int64_t half) {
  for (int64_t i = 0; i < half; ++i) {
    const float a = x[i], b = x[i + half];
    x[i] = a * cos[i] - b * sin[i];
    x[i + half] = b * cos[i] + a * sin[i];
  }
}

}  // namespace

void CpuEmbedding(const int32_t* ids, int64_t T, const float* table, int64_t Vs, int64_t D,
                  int64_t vocab_start, float* out) {
  for (int64_t t = 0; t < T; ++t) {
    const int64_t row = static_cast<int64_t>(ids[t]) - vocab_start;
    float* o = out + t * D;
    if (row >= 0 && row < Vs) {
      std::memcpy(o, table + row * D, static_cast<size_t>(D) * sizeof(float));
    } else {
      std::fill(o, o + D, 0.f);
    }
  }
}

void CpuRmsNorm(const float* x, const float* w, float eps, int64_t M, int64_t D, float* out) {
  for (int64_t m = 0; m < M; ++m) {
    const float* xr = x + m * D;
    ScaleRow(xr, InverseRms(xr, D, eps), w, D, out + m * D);
  }
}

void CpuAddRmsNorm(float* x, float* residual, const float* w, float eps, int64_t M, int64_t D) {
  for (int64_t m = 0; m < M; ++m) {
    float* xr = x + m * D;
    float* rr = residual + m * D;
    for (int64_t i = 0; i < D; ++i) rr[i] += xr[i];
    ScaleRow(rr, InverseRms(rr, D, eps), w, D, xr);
  }
}

void CpuQkNormRope(float* qkv, int64_t T, const int32_t* positions, const AttentionShape& shape,
                   const float* q_norm, const float* k_norm, float eps, const float* rope) {
  const int64_t hd = shape.head_dim, half = hd / 2;
  const int64_t width = shape.qkv_width();
  for (int64_t t = 0; t < T; ++t) {
    const float* cos = rope + static_cast<int64_t>(positions[t]) * hd;
    const float* sin = cos + half;
    float* row = qkv + t * width;
    // q heads then k heads; v (the last Hkv heads) is left alone.
    for (int64_t h = 0; h < shape.num_heads + shape.num_kv_heads; ++h) {
      float* x = row + h * hd;
      const float* norm = h < shape.num_heads ? q_norm : k_norm;
      if (norm) ScaleRow(x, InverseRms(x, hd, eps), norm, hd, x);
      RopeHead(x, cos, sin, half);
    }
  }
}

void CpuSiluMul(const float* gate_up, int64_t M, int64_t F, float* out) {
  for (int64_t m = 0; m < M; ++m) {
    const float* g = gate_up + m * 2 * F;
    const float* u = g + F;
    float* o = out + m * F;
    for (int64_t i = 0; i < F; ++i) o[i] = g[i] / (1.f + std::exp(-g[i])) * u[i];
  }
}

void CpuGatherRows(const float* x, int64_t D, const int32_t* rows, int64_t S, float* out) {
  for (int64_t s = 0; s < S; ++s) {
    std::memcpy(out + s * D, x + static_cast<int64_t>(rows[s]) * D,
                static_cast<size_t>(D) * sizeof(float));
  }
}

}  // namespace tpserve
