// Helpers for the CUDA-against-CPU tests: seeded bf16-exact random inputs given
// to both backends, poisoned GPU outputs, relative L2 error, random steps.
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/step_batch.h"
#include "cuda/check.h"
#include "model/dtype.h"
#include "tests/testing/seed.h"

namespace tpserve::cuda_test {

// The test's seed (tests/testing/seed.h: TPSERVE_TEST_SEED replays a failure).
using testing_util::TestSeed;

// n values ~ N(0, scale²), rounded to bf16 so both backends see the same numbers.
inline std::vector<float> RandomBf16(std::mt19937& rng, int64_t n, float scale = 1.f) {
  std::normal_distribution<float> dist(0.f, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = Bf16ToFloat(FloatToBf16(dist(rng)));
  return v;
}

// A buffer of `shape` on `b` in `dtype` (default: its compute dtype) holding `values`.
inline Buffer Upload(Backend& b, const std::vector<float>& values, std::initializer_list<int64_t> shape,
                     std::optional<DType> dtype = std::nullopt) {
  Buffer buf = b.Allocate(dtype.value_or(b.compute_dtype()), shape);
  EXPECT_EQ(buf.tensor().numel(), static_cast<int64_t>(values.size()));
  b.CopyFromHost(values.data(), DType::kF32, buf.tensor());
  return buf;
}

// An output buffer; on the GPU filled with 0xff bytes (bf16 NaN) first, so an
// element the op forgets to write shows up as NaN.
inline Buffer Output(Backend& b, std::initializer_list<int64_t> shape) {
  Buffer buf = b.Allocate(b.compute_dtype(), shape);
  if (buf.tensor().device == Device::kCuda && buf.tensor().nbytes() > 0) {
    b.Synchronize();
    CUDA_CHECK(cudaMemset(buf.tensor().data, 0xff, buf.tensor().nbytes()));
  }
  return buf;
}

inline std::vector<float> Download(Backend& b, const Tensor& t) {
  std::vector<float> v(static_cast<size_t>(t.numel()));
  b.CopyToHostF32(t, v.data());
  return v;
}

// ||a − b||₂ / ||b||₂ (b the reference); 0 when both are zero.
inline double RelL2(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    const double d = double{a[i]} - b[i];
    num += d * d;
    den += double{b[i]} * b[i];
  }
  if (den == 0) return num == 0 ? 0 : INFINITY;
  return std::sqrt(num / den);
}

// GPU result against the CPU oracle: same size, no NaN, relative L2 within tol.
inline void ExpectClose(const std::vector<float>& gpu, const std::vector<float>& cpu, double tol,
                        const std::string& what) {
  ASSERT_EQ(gpu.size(), cpu.size()) << what;
  const auto nan = std::find_if(gpu.begin(), gpu.end(), [](float x) { return std::isnan(x); });
  ASSERT_EQ(nan, gpu.end()) << what << ": NaN at " << (nan - gpu.begin()) << " (unwritten or overflow)";
  EXPECT_LE(RelL2(gpu, cpu), tol) << what;
}

// ---- Tolerances derived from the arithmetic ----
// A comparison of two computations of the same value holds each element to the
// sum of the two computations' error bounds against the exact value, bounds
// that follow from how many roundings each makes and of what (style.md:
// "A tolerance is derived, not tuned"); the exact value is computed on the host
// in double from the same bf16-exact inputs. Such a bound holds for every seed.
//
// bf16 keeps 8 significant bits: rounding to nearest moves x by at most 2^-8·|x|.
inline constexpr double kBf16Unit = 0x1p-8;
// fp32 keeps 24: one operation, in any rounding mode (truncating tensor-core
// adders included), moves its result by less than 2^-23 of itself.
inline constexpr double kF32Unit = 0x1p-23;
// Higham's γ_n = n·u / (1 − n·u): a sum of n + 1 terms in fp32, in any order
// and any grouping (split-K partials, tree reductions), is within γ_n·Σ|terms|
// of the exact sum. A product of two bf16 values is exact in fp32 (8 + 8 bits),
// so a bf16 dot product of length K accumulated in fp32 is within γ_K·Σ|x·w|.
inline double Gamma(int64_t n) {
  const double nu = static_cast<double>(n) * kF32Unit;
  return nu / (1 - nu);
}

// Σ_l x[i, l]·w[j, l] (+ bias[j]) and Σ_l |x[i, l]·w[j, l]| (+ |bias[j]|) in
// double, [m, n] row-major: the exact value of a Linear and the scale of its
// fp32 accumulation error.
struct HostDots {
  std::vector<double> sum, abs;
};
inline HostDots Dots(const std::vector<float>& x, const std::vector<float>& w, const float* bias, int64_t m,
                     int64_t k, int64_t n) {
  HostDots d{std::vector<double>(static_cast<size_t>(m * n)), std::vector<double>(static_cast<size_t>(m * n))};
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double s = bias ? bias[j] : 0.0, a = bias ? std::abs(bias[j]) : 0.0;
      for (int64_t l = 0; l < k; ++l) {
        const double p = double{x[i * k + l]} * w[j * k + l];
        s += p;
        a += std::abs(p);
      }
      d.sum[i * n + j] = s;
      d.abs[i * n + j] = a;
    }
  }
  return d;
}

// Every |got[i] − want[i]| within bound[i]; a failure names the worst element
// (the largest share of its bound used) and how many elements broke theirs.
inline void ExpectWithinBound(const std::vector<float>& got, const std::vector<float>& want,
                              const std::vector<double>& bound, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  ASSERT_EQ(got.size(), bound.size()) << what;
  size_t worst = 0, broken = 0;
  double worst_share = -1;
  for (size_t i = 0; i < got.size(); ++i) {
    const double error = std::abs(double{got[i]} - want[i]);
    const double share = bound[i] > 0 ? error / bound[i] : (error == 0 ? 0 : INFINITY);
    if (!(share <= 1)) ++broken;  // NaN too
    if (!(share <= worst_share)) {
      worst_share = share;
      worst = i;
    }
  }
  EXPECT_EQ(broken, 0u) << what << ": " << broken << " of " << got.size()
                        << " elements outside their derived bound; the worst, element " << worst << ": got "
                        << got[worst] << ", want " << want[worst] << ", |difference| "
                        << std::abs(double{got[worst]} - want[worst]) << " > bound " << bound[worst];
}

// One sequence's part of a step: `n_new` new tokens ending at seq_len, stored through `blocks`.
struct SeqPart {
  int32_t seq_len = 0;
  int32_t n_new = 0;
  std::vector<int32_t> blocks;
};

// The step of `parts` in order (backend/step_batch.h) with random token ids
// below `vocab`.
inline StepBatch RandomStep(const std::vector<SeqPart>& parts, int32_t block_size, std::mt19937& rng,
                            int32_t vocab) {
  std::vector<std::vector<int32_t>> tokens(parts.size());
  std::vector<StepSequence> seqs;
  for (size_t s = 0; s < parts.size(); ++s) {
    for (int32_t i = 0; i < parts[s].n_new; ++i) {
      tokens[s].push_back(static_cast<int32_t>(rng() % static_cast<uint32_t>(vocab)));
    }
    seqs.push_back({tokens[s], parts[s].seq_len - parts[s].n_new, parts[s].blocks});
  }
  absl::StatusOr<StepBatch> step = StepBatch::Build(seqs, block_size);
  EXPECT_TRUE(step.ok()) << step.status();
  return step.ok() ? *std::move(step) : StepBatch();
}

// Blocks for sequences of the given lengths: a random permutation of
// 0..num_blocks-1 dealt out in order (scattered, never shared).
inline std::vector<std::vector<int32_t>> DealBlocks(const std::vector<int32_t>& seq_lens, int32_t block_size,
                                                    int64_t num_blocks, std::mt19937& rng) {
  std::vector<int32_t> perm(static_cast<size_t>(num_blocks));
  for (size_t i = 0; i < perm.size(); ++i) perm[i] = static_cast<int32_t>(i);
  std::shuffle(perm.begin(), perm.end(), rng);
  std::vector<std::vector<int32_t>> out;
  size_t next = 0;
  for (int32_t len : seq_lens) {
    std::vector<int32_t> b;
    for (int32_t i = 0; i < (len + block_size - 1) / block_size; ++i) b.push_back(perm.at(next++));
    out.push_back(std::move(b));
  }
  return out;
}

// A device array that frees itself.
template <typename T>
struct DeviceArray {
  T* ptr = nullptr;
  size_t n = 0;
  explicit DeviceArray(size_t count) : n(count) {
    void* p = nullptr;
    CUDA_CHECK(cudaMalloc(&p, std::max<size_t>(n, 1) * sizeof(T)));
    ptr = static_cast<T*>(p);
  }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  ~DeviceArray() { cudaFree(ptr); }
  void Upload(const std::vector<T>& v) {
    ASSERT_EQ(v.size(), n);
    CUDA_CHECK(cudaMemcpy(ptr, v.data(), n * sizeof(T), cudaMemcpyHostToDevice));
  }
  void Poison() { CUDA_CHECK(cudaMemset(ptr, 0xff, std::max<size_t>(n, 1) * sizeof(T))); }  // NaN in bf16 and f32
  std::vector<T> Download() const {
    std::vector<T> v(n);
    CUDA_CHECK(cudaMemcpy(v.data(), ptr, n * sizeof(T), cudaMemcpyDeviceToHost));
    return v;
  }
};

inline std::vector<uint16_t> ToBf16(const std::vector<float>& v) {
  std::vector<uint16_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = FloatToBf16(v[i]);
  return out;
}

inline std::vector<float> FromBf16(const std::vector<uint16_t>& v) {
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = Bf16ToFloat(v[i]);
  return out;
}

// softmax(q · K · scale) · V in double for one query row over keys 0 .. ctx-1:
// q points at the row's hd query values, key j sits in cache slot slot(j), and
// k and v are [slots, hkv, hd] caches read at KV head kvh.
template <typename SlotFn>
std::vector<double> HostAttentionRow(const float* q, const std::vector<float>& k, const std::vector<float>& v,
                                     int hkv, int hd, int kvh, int ctx, double scale, SlotFn&& slot) {
  std::vector<double> s(static_cast<size_t>(ctx));
  double m = -INFINITY;
  for (int j = 0; j < ctx; ++j) {
    const int64_t at = (int64_t{slot(j)} * hkv + kvh) * hd;
    double dot = 0;
    for (int d = 0; d < hd; ++d) dot += double{q[d]} * k[static_cast<size_t>(at + d)];
    s[static_cast<size_t>(j)] = dot * scale;
    m = std::max(m, s[static_cast<size_t>(j)]);
  }
  double den = 0;
  std::vector<double> acc(static_cast<size_t>(hd), 0.0);
  for (int j = 0; j < ctx; ++j) {
    const int64_t at = (int64_t{slot(j)} * hkv + kvh) * hd;
    const double e = std::exp(s[static_cast<size_t>(j)] - m);
    den += e;
    for (int d = 0; d < hd; ++d) acc[static_cast<size_t>(d)] += e * v[static_cast<size_t>(at + d)];
  }
  for (double& x : acc) x /= den;
  return acc;
}

// HostAttentionRow with the bounds of a kernel's error on each element
// (cuda_test_util.h, "Tolerances derived from the arithmetic"):
//   scores: q·k of bf16 values summed in fp32 (γ_hd·Σ|q·k|), times the fp32
//     scale (one op): each within E of its exact value, so every probability
//     within a factor e^{±2E} (numerator and denominator);
//   softmax: exp within (8 + 6·R) fp32 ulp (CUDA's __expf/exp2f grow with the
//     argument, R = the scores' range; its argument's own rounding), twice
//     (term and sum), once more per online-softmax rescale or split merge
//     (at most 2 + ctx/16 of them, plus `merges` more for a kernel that also
//     merges partitions of a 16-key-tiled softmax); then Σ p·v in fp32
//     (γ_{ctx+1}·Σ p·|v|);
//   a GPU kernel may round P to bf16 for the tensor cores (u per term) and
//   rounds its output to bf16 (u); the CPU keeps fp32.
// So with W = Σ_j p_j·|v_j| per element:
//   eta = e^{2E} − 1 + 2·(8 + 6R)·2^-23·(2 + ctx/16 + merges)
//   cpu = (eta + γ_{ctx+1}·(1 + eta))·W
//   gpu = b + u·(|out| + b),  b = (etaP + γ_{ctx+1}·(1 + etaP))·W,  etaP = (1 + eta)(1 + u) − 1
struct AttentionBounded {
  std::vector<double> out, gpu, cpu;
};
template <typename SlotFn>
AttentionBounded HostAttentionRowBounded(const float* q, const std::vector<float>& k, const std::vector<float>& v,
                                         int hkv, int hd, int kvh, int ctx, float scale, SlotFn&& slot,
                                         int merges = 0) {
  std::vector<double> s(static_cast<size_t>(ctx));
  double hi = -INFINITY, lo = INFINITY, e_max = 0;
  for (int j = 0; j < ctx; ++j) {
    const int64_t at = (int64_t{slot(j)} * hkv + kvh) * hd;
    double dot = 0, mag = 0;
    for (int d = 0; d < hd; ++d) {
      const double p = double{q[d]} * k[static_cast<size_t>(at + d)];
      dot += p;
      mag += std::abs(p);
    }
    s[static_cast<size_t>(j)] = dot * scale;
    hi = std::max(hi, s[static_cast<size_t>(j)]);
    lo = std::min(lo, s[static_cast<size_t>(j)]);
    e_max = std::max(e_max, Gamma(hd) * mag * scale + kF32Unit * std::abs(dot * scale));
  }
  double den = 0;
  std::vector<double> acc(static_cast<size_t>(hd), 0.0), mag(static_cast<size_t>(hd), 0.0);
  for (int j = 0; j < ctx; ++j) {
    const int64_t at = (int64_t{slot(j)} * hkv + kvh) * hd;
    const double e = std::exp(s[static_cast<size_t>(j)] - hi);
    den += e;
    for (int d = 0; d < hd; ++d) {
      acc[static_cast<size_t>(d)] += e * v[static_cast<size_t>(at + d)];
      mag[static_cast<size_t>(d)] += e * std::abs(v[static_cast<size_t>(at + d)]);
    }
  }
  const double eta = std::expm1(2 * e_max) + 2 * (8 + 6 * (hi - lo)) * kF32Unit * (2 + ctx / 16.0 + merges);
  const double eta_p = (1 + eta) * (1 + kBf16Unit) - 1, g = Gamma(ctx + 1);
  AttentionBounded b;
  for (int d = 0; d < hd; ++d) {
    const double out = acc[static_cast<size_t>(d)] / den, w = mag[static_cast<size_t>(d)] / den;
    const double body = (eta_p + g * (1 + eta_p)) * w;
    b.out.push_back(out);
    b.gpu.push_back(body + kBf16Unit * (std::abs(out) + body));
    b.cpu.push_back((eta + g * (1 + eta)) * w);
  }
  return b;
}

// The exact causal attention of every row of a step of `parts` (rows in
// order, each sequence's n_new tokens ending at its seq_len, keys through its
// own blocks) with its bounds, [T, Hq·hd]. `store_kv`: the step's own keys and
// values are in qkv, written to the caches first (StoreKv) as the backends do.
inline AttentionBounded HostStepAttention(const std::vector<SeqPart>& parts, int32_t bs, const AttentionShape& shape,
                                          const std::vector<float>& qkv, std::vector<float> cache_k,
                                          std::vector<float> cache_v, float scale, bool store_kv) {
  const int hd = shape.head_dim, hkv = shape.num_kv_heads, group = shape.num_heads / shape.num_kv_heads;
  const int64_t width = shape.qkv_width();
  auto slot_of = [bs](const SeqPart& part, int j) {
    return int64_t{part.blocks[static_cast<size_t>(j / bs)]} * bs + j % bs;
  };
  if (store_kv) {
    int64_t t = 0;
    for (const SeqPart& part : parts) {
      for (int32_t i = 0; i < part.n_new; ++i, ++t) {
        const int64_t slot = slot_of(part, part.seq_len - part.n_new + i);
        for (int64_t e = 0; e < int64_t{hkv} * hd; ++e) {
          cache_k[static_cast<size_t>(slot * hkv * hd + e)] = qkv[static_cast<size_t>(t * width + int64_t{shape.num_heads} * hd + e)];
          cache_v[static_cast<size_t>(slot * hkv * hd + e)] =
              qkv[static_cast<size_t>(t * width + int64_t{shape.num_heads + hkv} * hd + e)];
        }
      }
    }
  }
  AttentionBounded all;
  int64_t t = 0;
  for (const SeqPart& part : parts) {
    auto slot = [&](int j) { return slot_of(part, j); };
    for (int32_t i = 0; i < part.n_new; ++i, ++t) {
      const int ctx = part.seq_len - part.n_new + i + 1;
      for (int h = 0; h < shape.num_heads; ++h) {
        const AttentionBounded row = HostAttentionRowBounded(qkv.data() + t * width + int64_t{h} * hd, cache_k,
                                                             cache_v, hkv, hd, h / group, ctx, scale, slot);
        all.out.insert(all.out.end(), row.out.begin(), row.out.end());
        all.gpu.insert(all.gpu.end(), row.gpu.begin(), row.gpu.end());
        all.cpu.insert(all.cpu.end(), row.cpu.begin(), row.cpu.end());
      }
    }
  }
  return all;
}

// bound_a + bound_b, element by element (a comparison of two computations).
inline std::vector<double> Plus(const std::vector<double>& a, const std::vector<double>& b) {
  std::vector<double> s(a.size());
  for (size_t i = 0; i < a.size(); ++i) s[i] = a[i] + b[i];
  return s;
}

}  // namespace tpserve::cuda_test
