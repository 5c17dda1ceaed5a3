// CpuStoreKv / CpuAttention against a naive double-precision attention over
// contiguous K/V, through shuffled (non-contiguous) block tables.
#include "backend/cpu_attention.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "backend/step_batch.h"
#include "tests/testing/seed.h"

namespace tpserve {
namespace {

// One sequence of a test step: `cached` tokens already in the KV cache, `n_new`
// computed in this step (decode sequences have n_new = 1).
struct SeqSpec {
  int32_t cached;
  int32_t n_new;
  int32_t len() const { return cached + n_new; }
};

// A step with owned storage, its K/V reference data and a paged cache.
struct PagedBatch {
  AttentionShape shape;
  int32_t block_size = 0;
  std::vector<SeqSpec> seqs;
  // Contiguous per-sequence reference data.
  std::vector<std::vector<float>> k, v;  // [s][L, Hkv, hd]
  std::vector<std::vector<float>> q;     // [s][n_new, Hq, hd]
  std::vector<std::vector<int32_t>> tables;  // [s] block ids (shuffled)
  StepBatch step;                            // the step over seqs and tables
  // Cache: [num_blocks, block_size, Hkv, hd], poisoned with NaN where nothing was written.
  int64_t num_blocks = 0;
  std::vector<float> k_cache, v_cache;
  std::vector<float> qkv;  // [T, qkv_width]

  int64_t kv_row() const { return int64_t{shape.num_kv_heads} * shape.head_dim; }

  StepMetadata Meta() const { return step.view(); }
  KvCacheLayer Cache() {
    const int64_t nb = num_blocks, bs = block_size, hkv = shape.num_kv_heads, hd = shape.head_dim;
    return {Tensor(k_cache.data(), DType::kF32, Device::kCpu, {nb, bs, hkv, hd}),
            Tensor(v_cache.data(), DType::kF32, Device::kCpu, {nb, bs, hkv, hd})};
  }
  int64_t Slot(size_t s, int32_t pos) const {
    const int32_t block = tables[s][static_cast<size_t>(pos / block_size)];
    return int64_t{block} * block_size + pos % block_size;
  }
};

// Builds a step for `seqs` (prefill sequences first): random K/V/Q, a shuffled
// block assignment with spare blocks, the cached prefixes written straight into
// the cache (independently of CpuStoreKv) and the new tokens' qkv rows.
PagedBatch MakeBatch(const AttentionShape& shape, int32_t block_size, std::vector<SeqSpec> seqs,
                     int32_t num_prefill, std::mt19937_64& rng) {
  PagedBatch b;
  b.shape = shape;
  b.block_size = block_size;
  b.seqs = std::move(seqs);
  std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
  const int hd = shape.head_dim;
  const int64_t kv_row = b.kv_row();

  std::vector<int32_t> blocks_needed;
  for (const SeqSpec& s : b.seqs) blocks_needed.push_back((s.len() + block_size - 1) / block_size);
  b.num_blocks = std::accumulate(blocks_needed.begin(), blocks_needed.end(), int64_t{0}) + 3;
  std::vector<int32_t> ids(b.num_blocks);
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  b.tables.resize(b.seqs.size());
  size_t next = 0;
  for (size_t s = 0; s < b.seqs.size(); ++s) {
    for (int32_t i = 0; i < blocks_needed[s]; ++i) b.tables[s].push_back(ids[next++]);
  }

  const size_t cache_elems = size_t(b.num_blocks) * block_size * kv_row;
  b.k_cache.assign(cache_elems, std::numeric_limits<float>::quiet_NaN());
  b.v_cache.assign(cache_elems, std::numeric_limits<float>::quiet_NaN());

  const int64_t width = shape.qkv_width();
  const int64_t q_cols = int64_t{shape.num_heads} * hd;
  std::vector<std::vector<int32_t>> tokens(b.seqs.size());
  for (size_t s = 0; s < b.seqs.size(); ++s) {
    const SeqSpec& spec = b.seqs[s];
    std::vector<float> k(size_t(spec.len()) * kv_row), v(k.size()), q(size_t(spec.n_new) * q_cols);
    for (float& x : k) x = uni(rng);
    for (float& x : v) x = uni(rng);
    for (float& x : q) x = uni(rng);
    for (int32_t p = 0; p < spec.cached; ++p) {
      const int64_t slot = b.Slot(s, p);
      std::copy_n(&k[size_t(p) * kv_row], kv_row, &b.k_cache[slot * kv_row]);
      std::copy_n(&v[size_t(p) * kv_row], kv_row, &b.v_cache[slot * kv_row]);
    }
    for (int32_t i = 0; i < spec.n_new; ++i) {
      const int32_t p = spec.cached + i;
      tokens[s].push_back(static_cast<int32_t>(rng() % 1000));
      const size_t row = b.qkv.size();
      b.qkv.resize(row + width);
      std::copy_n(&q[size_t(i) * q_cols], q_cols, &b.qkv[row]);
      std::copy_n(&k[size_t(p) * kv_row], kv_row, &b.qkv[row + q_cols]);
      std::copy_n(&v[size_t(p) * kv_row], kv_row, &b.qkv[row + q_cols + kv_row]);
    }
    b.k.push_back(std::move(k));
    b.v.push_back(std::move(v));
    b.q.push_back(std::move(q));
  }
  std::vector<StepSequence> steps;
  for (size_t s = 0; s < b.seqs.size(); ++s) steps.push_back({tokens[s], b.seqs[s].cached, b.tables[s]});
  EXPECT_TRUE(b.step.Assign(steps, block_size).ok());
  EXPECT_EQ(b.step.arrays().num_prefill_seqs, num_prefill);
  return b;
}

// Naive causal attention in double over the contiguous reference K/V: [T, Hq·hd].
std::vector<double> NaiveAttention(const PagedBatch& b, double scale) {
  const int hd = b.shape.head_dim, hq = b.shape.num_heads;
  const int group = hq / b.shape.num_kv_heads;
  const int64_t kv_row = b.kv_row();
  std::vector<double> out;
  for (size_t s = 0; s < b.seqs.size(); ++s) {
    const SeqSpec& spec = b.seqs[s];
    for (int32_t i = 0; i < spec.n_new; ++i) {
      const int32_t pos = spec.cached + i;
      for (int h = 0; h < hq; ++h) {
        const float* q = &b.q[s][(size_t(i) * hq + h) * hd];
        const int kvh = h / group;
        std::vector<double> logit(pos + 1);
        double m = -1e300;
        for (int32_t j = 0; j <= pos; ++j) {
          const float* k = &b.k[s][j * kv_row + kvh * hd];
          double dot = 0;
          for (int d = 0; d < hd; ++d) dot += double(q[d]) * k[d];
          logit[j] = dot * scale;
          m = std::max(m, logit[j]);
        }
        double sum = 0;
        for (double& x : logit) sum += (x = std::exp(x - m));
        for (int d = 0; d < hd; ++d) {
          double acc = 0;
          for (int32_t j = 0; j <= pos; ++j) acc += logit[j] * b.v[s][j * kv_row + kvh * hd + d];
          out.push_back(acc / sum);
        }
      }
    }
  }
  return out;
}

struct AttnCase {
  int32_t hq, hkv, hd, block_size;
};

std::string Describe(const AttnCase& c, uint64_t seed) {
  return "Hq=" + std::to_string(c.hq) + " Hkv=" + std::to_string(c.hkv) + " hd=" +
         std::to_string(c.hd) + " block_size=" + std::to_string(c.block_size) +
         " seed=" + std::to_string(seed);
}

TEST(CpuAttention, MixedBatchMatchesNaiveThroughShuffledBlockTables) {
  const AttnCase cases[] = {
      {3, 3, 64, 16},   // MHA, odd head count
      {12, 3, 128, 3},  // GQA 4:1, odd KV heads
      {4, 1, 10, 1},    // GQA 4:1 (MQA), small head dim not a multiple of 8, one token per block
      {7, 7, 6, 3},     // odd everything
      {6, 2, 64, 16},   // GQA 3:1
  };
  for (const AttnCase& c : cases) {
    const uint64_t seed = testing_util::TestSeed();
    SCOPED_TRACE(Describe(c, seed));
    std::mt19937_64 rng(seed);
    const int32_t bs = c.block_size;
    // 2 prefill sequences (one from scratch, longer than a query tile; one after a
    // cached prefix of two blocks and a bit) + 3 decode sequences.
    const std::vector<SeqSpec> seqs = {
        {0, 41}, {2 * bs + 1, 5}, {22, 1}, {0, 1}, {bs + 30, 1}};
    const AttentionShape shape{c.hq, c.hkv, c.hd};
    PagedBatch b = MakeBatch(shape, bs, seqs, 2, rng);
    const StepMetadata step = b.Meta();
    const float scale = 1.0f / std::sqrt(float(c.hd));
    std::vector<float> out(size_t(step.num_tokens()) * c.hq * c.hd, -1.0f);
    CpuStoreKv(step, b.qkv.data(), shape, b.Cache());
    CpuAttention(step, b.qkv.data(), shape, b.Cache(), scale, out.data());
    const std::vector<double> ref = NaiveAttention(b, scale);
    ASSERT_EQ(ref.size(), out.size());
    int bad = 0;
    for (size_t i = 0; i < out.size() && bad < 5; ++i) {
      if (!(std::abs(out[i] - ref[i]) <= 2e-6 + 2e-5 * std::abs(ref[i]))) {
        ADD_FAILURE() << "element " << i << ": got " << out[i] << ", want " << ref[i];
        ++bad;
      }
    }

    // Batch invariance: each sequence alone in a step over the same cache gets
    // its rows of the batch's output, bit for bit.
    const int64_t out_width = int64_t{c.hq} * c.hd;
    const std::span<const int32_t> tokens(b.step.arrays().token_ids);
    int64_t row = 0;
    for (size_t s = 0; s < seqs.size(); ++s) {
      const int32_t n = seqs[s].n_new;
      StepBatch alone;
      ASSERT_TRUE(alone.Assign(std::vector<StepSequence>{{tokens.subspan(row, n), seqs[s].cached, b.tables[s]}}, bs)
                      .ok());
      const std::vector<float> qkv(b.qkv.begin() + row * shape.qkv_width(),
                                   b.qkv.begin() + (row + n) * shape.qkv_width());
      std::vector<float> own(size_t(n) * out_width);
      CpuAttention(alone.view(), qkv.data(), shape, b.Cache(), scale, own.data());
      EXPECT_EQ(0, std::memcmp(own.data(), &out[row * out_width], own.size() * sizeof(float)))
          << "sequence " << s << " alone differs from its rows in the batch";
      row += n;
    }
  }
}

// A prompt prefilled in chunks of any size, each attending to the K/V the
// earlier chunks left in the cache, gets the whole prompt's output bit for
// bit: every query row sums over its keys in position order, whichever step
// stored them (cpu_attention.h).
TEST(CpuAttention, ChunksOfAnySizeOverTheCacheGiveTheWholePromptsBits) {
  const uint64_t seed = testing_util::TestSeed();
  SCOPED_TRACE("seed=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const AttentionShape shape{8, 2, 64};
  const int32_t bs = 16, len = 2 * bs + 5;
  const float scale = 0.125f;
  const int64_t out_width = int64_t{shape.num_heads} * shape.head_dim, width = shape.qkv_width();

  // The whole prompt in one step.
  PagedBatch whole = MakeBatch(shape, bs, {{0, len}}, 1, rng);
  std::vector<float> out_whole(size_t(len) * out_width);
  CpuStoreKv(whole.Meta(), whole.qkv.data(), shape, whole.Cache());
  CpuAttention(whole.Meta(), whole.qkv.data(), shape, whole.Cache(), scale, out_whole.data());
  const std::span<const int32_t> tokens(whole.step.arrays().token_ids);

  for (int32_t chunk : {1, 3, 7, 2 * bs, len - 1}) {
    SCOPED_TRACE("chunk " + std::to_string(chunk));
    // Another (shuffled) block table and a fresh cache for the same prompt.
    PagedBatch chunked = MakeBatch(shape, bs, {{0, len}}, 1, rng);
    for (int32_t start = 0; start < len; start += chunk) {
      const int32_t n = std::min(chunk, len - start);
      StepBatch step;
      ASSERT_TRUE(
          step.Assign(std::vector<StepSequence>{{tokens.subspan(start, n), start, chunked.tables[0]}}, bs).ok());
      const std::vector<float> qkv(whole.qkv.begin() + start * width, whole.qkv.begin() + (start + n) * width);
      std::vector<float> out(size_t(n) * out_width);
      CpuStoreKv(step.view(), qkv.data(), shape, chunked.Cache());
      CpuAttention(step.view(), qkv.data(), shape, chunked.Cache(), scale, out.data());
      ASSERT_EQ(0, std::memcmp(out.data(), &out_whole[start * out_width], out.size() * sizeof(float)))
          << "the chunk at " << start << " differs from the whole prompt's rows";
    }
  }
}

TEST(CpuStoreKv, WritesOnlyMappedSlotsAndSkipsPadding) {
  const uint64_t seed = testing_util::TestSeed();
  SCOPED_TRACE("seed=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const AttentionShape shape{6, 3, 10};
  const int32_t bs = 3;
  PagedBatch b = MakeBatch(shape, bs, {{0, 7}, {4, 1}, {0, 1}}, 1, rng);
  const float poison = -777.0f;
  std::fill(b.k_cache.begin(), b.k_cache.end(), poison);
  std::fill(b.v_cache.begin(), b.v_cache.end(), poison);
  // Tokens 1 and 4 of the prefill and the last decode token are padding.
  for (int t : {1, 4, 8}) b.step.mutable_arrays().slot_mapping[t] = -1;
  CpuStoreKv(b.Meta(), b.qkv.data(), shape, b.Cache());

  const int64_t kv_row = b.kv_row();
  const int64_t q_cols = int64_t{shape.num_heads} * shape.head_dim;
  const int64_t width = shape.qkv_width();
  std::vector<bool> written(size_t(b.num_blocks) * bs, false);
  const std::vector<int64_t>& slots = b.step.arrays().slot_mapping;
  for (size_t t = 0; t < slots.size(); ++t) {
    const int64_t slot = slots[t];
    if (slot < 0) continue;
    written[slot] = true;
    for (int64_t e = 0; e < kv_row; ++e) {
      ASSERT_EQ(b.k_cache[slot * kv_row + e], b.qkv[t * width + q_cols + e]) << "token " << t;
      ASSERT_EQ(b.v_cache[slot * kv_row + e], b.qkv[t * width + q_cols + kv_row + e]) << "token " << t;
    }
  }
  int untouched_slots = 0;
  for (size_t slot = 0; slot < written.size(); ++slot) {
    if (written[slot]) continue;
    ++untouched_slots;
    for (int64_t e = 0; e < kv_row; ++e) {
      ASSERT_EQ(b.k_cache[slot * kv_row + e], poison) << "slot " << slot << " was written";
      ASSERT_EQ(b.v_cache[slot * kv_row + e], poison) << "slot " << slot << " was written";
    }
  }
  EXPECT_GE(untouched_slots, 3 + 4);  // the padding tokens' slots, the cached prefix, spare blocks
}

}  // namespace
}  // namespace tpserve
