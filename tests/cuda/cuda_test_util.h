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

}  // namespace tpserve::cuda_test
