// Helpers shared by the CPU backend tests: seeded random data, host <-> backend
// copies, a minimal valid step, and element-wise / relative-L2 comparisons
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
#include "backend/step.h"

namespace tpserve::testing {

// A fresh seed per call (printed through SCOPED_TRACE by the tests); set
// TPSERVE_TEST_SEED=<seed> to replay a failure.
inline uint64_t FreshSeed() {
  if (const char* env = std::getenv("TPSERVE_TEST_SEED")) return std::strtoull(env, nullptr, 10);
  return (uint64_t{std::random_device{}()} << 32) | std::random_device{}();
}

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

// The arrays behind a StepMetadata, owned by the test.
struct HostStep {
  std::vector<int32_t> token_ids, positions, query_start, seq_lens, block_tables, logits_indices;
  std::vector<int64_t> slot_mapping;
  int32_t num_prefill = 0, num_decode = 0, max_blocks_per_seq = 0;

  StepMetadata meta() const {
    StepMetadata m;
    m.num_prefill_seqs = num_prefill;
    m.num_decode_seqs = num_decode;
    m.token_ids = token_ids;
    m.positions = positions;
    m.slot_mapping = slot_mapping;
    m.query_start = query_start;
    m.seq_lens = seq_lens;
    m.block_tables = block_tables;
    m.max_blocks_per_seq = max_blocks_per_seq;
    m.logits_indices = logits_indices;
    return m;
  }
};

// Prefill sequences with new_tokens[s] new tokens after cached[s] cached ones,
// block s·max_blocks + b for block b of sequence s, slots -1 (nothing stored),
// logits at each sequence's last row.
inline HostStep PrefillStep(const std::vector<int32_t>& token_ids,
                            const std::vector<int32_t>& new_tokens,
                            const std::vector<int32_t>& cached, int32_t block_size,
                            int32_t max_blocks_per_seq) {
  HostStep h;
  h.token_ids = token_ids;
  h.num_prefill = static_cast<int32_t>(new_tokens.size());
  h.max_blocks_per_seq = max_blocks_per_seq;
  h.query_start.push_back(0);
  for (size_t s = 0; s < new_tokens.size(); ++s) {
    for (int32_t i = 0; i < new_tokens[s]; ++i) h.positions.push_back(cached[s] + i);
    h.query_start.push_back(h.query_start.back() + new_tokens[s]);
    h.seq_lens.push_back(cached[s] + new_tokens[s]);
    h.logits_indices.push_back(h.query_start.back() - 1);
    for (int32_t b = 0; b < max_blocks_per_seq; ++b) {
      const bool used = int64_t{b} * block_size < h.seq_lens.back();
      h.block_tables.push_back(used ? static_cast<int32_t>(s) * max_blocks_per_seq + b : -1);
    }
  }
  h.slot_mapping.assign(token_ids.size(), -1);
  return h;
}

}  // namespace tpserve::testing
