// Helpers shared by the CPU backend tests: seeded random data, host <-> backend
// copies, a prefill step, and element-wise / relative-L2 comparisons
// against double-precision references.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/step_batch.h"

namespace tpserve::testing {

inline std::vector<float> RandomFloats(std::mt19937_64& rng, int64_t n, float lo = -1.f,
                                       float hi = 1.f) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(rng);
  return v;
}

inline Buffer Upload(Backend& backend, const std::vector<float>& host,
                     std::initializer_list<int64_t> shape) {
  Buffer buf = backend.Allocate(DType::kF32, shape);
  EXPECT_EQ(static_cast<size_t>(buf.tensor().numel()), host.size());
  backend.CopyFromHost(host.data(), DType::kF32, buf);
  return buf;
}

inline std::vector<float> Download(Backend& backend, const Tensor& t) {
  std::vector<float> host(static_cast<size_t>(t.numel()));
  backend.CopyToHostF32(t, host.data());
  return host;
}

// |got - ref| <= atol + rtol·|ref| for every element; reports the first few misses.
inline void ExpectClose(std::span<const float> got, std::span<const double> ref,
                        const std::string& what, double atol = 1e-5, double rtol = 1e-5) {
  ASSERT_EQ(got.size(), ref.size()) << what;
  int misses = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::abs(static_cast<double>(got[i]) - ref[i]);
    if (!(err <= atol + rtol * std::abs(ref[i]))) {
      ADD_FAILURE() << what << "[" << i << "]: got " << got[i] << ", want " << ref[i];
      if (++misses == 5) return;
    }
  }
}

// ‖got - ref‖₂ / ‖ref‖₂ <= tol (for GEMM, whose summation order is the library's).
inline void ExpectRelL2(std::span<const float> got, std::span<const double> ref,
                        const std::string& what, double tol = 1e-5) {
  ASSERT_EQ(got.size(), ref.size()) << what;
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    num += (got[i] - ref[i]) * (got[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  EXPECT_LE(std::sqrt(num), tol * std::sqrt(den) + 1e-30) << what << ": relative L2 error "
                                                         << std::sqrt(num / (den + 1e-300));
}

// Prefill sequences with new_tokens[s] new tokens after cached[s] cached ones,
// block s·max_blocks + b for block b of sequence s, slots -1 (nothing stored),
// logits at each sequence's last row.
inline StepBatch PrefillStep(const std::vector<int32_t>& token_ids, const std::vector<int32_t>& new_tokens,
                             const std::vector<int32_t>& cached, int32_t block_size, int32_t max_blocks_per_seq) {
  std::vector<std::vector<int32_t>> tables(new_tokens.size());
  std::vector<StepSequence> seqs;
  size_t first = 0;
  for (size_t s = 0; s < new_tokens.size(); ++s) {
    const int64_t seq_len = int64_t{cached[s]} + new_tokens[s];
    for (int32_t b = 0; int64_t{b} * block_size < seq_len; ++b) {
      tables[s].push_back(static_cast<int32_t>(s) * max_blocks_per_seq + b);
    }
    seqs.push_back({std::span(token_ids).subspan(first, static_cast<size_t>(new_tokens[s])), cached[s], tables[s]});
    first += static_cast<size_t>(new_tokens[s]);
  }
  absl::StatusOr<StepBatch> step = StepBatch::Build(seqs, block_size, StepBatch::StoreKv::kNo);
  EXPECT_TRUE(step.ok()) << step.status();
  return step.ok() ? *std::move(step) : StepBatch();
}

}  // namespace tpserve::testing
