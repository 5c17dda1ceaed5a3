#include "backend/cpu_attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "base/check.h"

namespace tpserve {
namespace {

// Query rows (token × query head of one KV group) attended together, so that
// each K/V row is read once per tile instead of once per query row.
constexpr int kRowsPerTile = 32;

[[noreturn]] void Fail(const char* op, const char* what, const Tensor& t) {
  TPSERVE_FATAL(op, ": ", what, " (got ", t.ShapeString(), ")");
}

// Checks that cache.k / cache.v are f32 [num_blocks, block_size, Hkv, hd] on the CPU.
void CheckCache(const char* op, const AttentionShape& shape, const KvCacheLayer& cache) {
  for (const Tensor* t : {&cache.k, &cache.v}) {
    if (t->device != Device::kCpu || t->dtype != DType::kF32) {
      Fail(op, "the KV cache must be f32 on the CPU", *t);
    }
    if (t->ndim != 4 || t->dim(2) != shape.num_kv_heads || t->dim(3) != shape.head_dim) {
      Fail(op, "the KV cache must be [num_blocks, block_size, Hkv, hd]", *t);
    }
  }
  if (cache.k.shape != cache.v.shape) Fail(op, "K and V caches differ in shape", cache.v);
  TPSERVE_CHECK(shape.num_kv_heads > 0 && shape.num_heads % shape.num_kv_heads == 0, op, ": Hq = ",
                shape.num_heads, " is not a multiple of Hkv = ", shape.num_kv_heads);
}

// Σ a[i]·b[i] with eight independent partial sums (vectorisable without -ffast-math).
inline float Dot(const float* a, const float* b, int n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int l = 0; l < 8; ++l) acc[l] += a[i + l] * b[i + l];
  }
  float tail = 0;
  for (; i < n; ++i) tail += a[i] * b[i];
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7])) + tail;
}

// a[i] += p · v[i], in blocks of eight (vectorisable at -O2).
inline void Axpy(float p, const float* __restrict v, float* __restrict a, int n) {
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int l = 0; l < 8; ++l) a[i + l] += p * v[i + l];
  }
  for (; i < n; ++i) a[i] += p * v[i];
}

// The buffers and sizes CpuAttention reuses for every tile. A tile is up to
// tile_tokens new tokens of one sequence × the G query heads of one KV head:
// R = nt · G rows, row r = token i0 + r / G, query head g·G + r % G.
struct TileWork {
  TileWork(const AttentionShape& shape, int32_t max_len)
      : hd(shape.head_dim),
        group(shape.num_heads / shape.num_kv_heads),
        tile_tokens(std::max(1, kRowsPerTile / group)),
        max_rows(tile_tokens * group),
        k_rows(max_len),
        v_rows(max_len),
        q(size_t(max_rows) * hd),
        scores(size_t(max_rows) * max_len),
        acc(size_t(max_rows) * hd),
        ctx(max_rows),
        inv_sum(max_rows) {}

  int hd;           // head_dim
  int group;        // G query heads share one KV head
  int tile_tokens;  // new tokens per tile
  int max_rows;     // R at most
  std::vector<const float*> k_rows, v_rows;  // [L] slot base of position j
  std::vector<float> q;                      // [R, hd] scaled queries
  std::vector<float> scores;                 // [R, L] logits, then exp
  std::vector<float> acc;                    // [R, hd] Σ p · v
  std::vector<int32_t> ctx;                  // [R] keys visible to row r
  std::vector<float> inv_sum;                // [R]
};

// One tile of one sequence: its new tokens i0 .. i0 + nt - 1 and KV head g.
struct Tile {
  int32_t q_begin;    // the sequence's first new token in the step
  int32_t first_pos;  // position of the sequence's first new token
  int32_t i0;
  int nt;
  int g;
  int rows(const TileWork& w) const { return nt * w.group; }
  int32_t len() const { return first_pos + i0 + nt; }  // keys any row of the tile sees
};

// Copies the tile's queries, times `scale`, into w.q and sets w.ctx.
void LoadTileQueries(const float* qkv, int64_t width, float scale, const Tile& tile, TileWork& w) {
  const int hd = w.hd, group = w.group, rows = tile.rows(w);
  for (int r = 0; r < rows; ++r) {
    const int64_t t = tile.q_begin + tile.i0 + r / group;
    const int h = tile.g * group + r % group;
    const float* src = qkv + t * width + int64_t{h} * hd;
    for (int d = 0; d < hd; ++d) w.q[size_t(r) * hd + d] = src[d] * scale;
    w.ctx[r] = tile.first_pos + tile.i0 + r / group + 1;
  }
}

// w.acc = the tile's unnormalised Σ p · v, w.inv_sum = 1 / Σ p, through w.k_rows / w.v_rows.
void AttendTile(const Tile& tile, TileWork& w) {
  const int hd = w.hd, rows = tile.rows(w);
  const int32_t tile_len = tile.len();
  const std::vector<int32_t>& ctx = w.ctx;
  std::vector<float>& scores = w.scores;
  // Logits: each K row once for the whole tile.
  for (int32_t j = 0; j < tile_len; ++j) {
    const float* k = w.k_rows[j] + int64_t{tile.g} * hd;
    for (int r = 0; r < rows; ++r) {
      if (j < ctx[r]) scores[size_t(r) * tile_len + j] = Dot(&w.q[size_t(r) * hd], k, hd);
    }
  }
  // Softmax numerators with the row maximum subtracted.
  for (int r = 0; r < rows; ++r) {
    float* row = &scores[size_t(r) * tile_len];
    float m = -std::numeric_limits<float>::infinity();
    for (int32_t j = 0; j < ctx[r]; ++j) m = std::max(m, row[j]);
    float sum = 0;
    for (int32_t j = 0; j < ctx[r]; ++j) {
      row[j] = std::exp(row[j] - m);
      sum += row[j];
    }
    w.inv_sum[r] = 1.0f / sum;
  }
  // Weighted sum of V: each V row once for the whole tile.
  std::fill(w.acc.begin(), w.acc.begin() + size_t(rows) * hd, 0.0f);
  for (int32_t j = 0; j < tile_len; ++j) {
    const float* v = w.v_rows[j] + int64_t{tile.g} * hd;
    for (int r = 0; r < rows; ++r) {
      if (j >= ctx[r]) continue;
      Axpy(scores[size_t(r) * tile_len + j], v, &w.acc[size_t(r) * hd], hd);
    }
  }
}

// out rows of the tile = w.acc · w.inv_sum.
void StoreTile(const Tile& tile, int64_t out_width, const TileWork& w, float* out) {
  const int hd = w.hd, group = w.group, rows = tile.rows(w);
  for (int r = 0; r < rows; ++r) {
    const int64_t t = tile.q_begin + tile.i0 + r / group;
    const int h = tile.g * group + r % group;
    float* dst = out + t * out_width + int64_t{h} * hd;
    for (int d = 0; d < hd; ++d) dst[d] = w.acc[size_t(r) * hd + d] * w.inv_sum[r];
  }
}

}  // namespace

void CpuStoreKv(const StepMetadata& step, const float* qkv, const AttentionShape& shape,
                KvCacheLayer cache) {
  CheckCache("CpuStoreKv", shape, cache);
  const int64_t width = shape.qkv_width();
  const int64_t kv_row = int64_t{shape.num_kv_heads} * shape.head_dim;  // Hkv · hd per slot
  const int64_t q_cols = int64_t{shape.num_heads} * shape.head_dim;
  float* k_cache = cache.k.ptr<float>();
  float* v_cache = cache.v.ptr<float>();
  const int32_t num_tokens = step.num_tokens();
  for (int32_t t = 0; t < num_tokens; ++t) {
    const int64_t slot = step.slot_mapping[t];
    if (slot < 0) continue;
    const float* row = qkv + t * width;
    std::memcpy(k_cache + slot * kv_row, row + q_cols, sizeof(float) * kv_row);
    std::memcpy(v_cache + slot * kv_row, row + q_cols + kv_row, sizeof(float) * kv_row);
  }
}

void CpuAttention(const StepMetadata& step, const float* qkv, const AttentionShape& shape,
                  KvCacheLayer cache, float scale, float* out) {
  CheckCache("CpuAttention", shape, cache);
  const int num_kv_heads = shape.num_kv_heads;
  const int64_t kv_row = int64_t{num_kv_heads} * shape.head_dim;
  const int64_t block_size = cache.k.dim(1);
  const float* k_cache = cache.k.ptr<float>();
  const float* v_cache = cache.v.ptr<float>();
  int32_t max_len = 0;
  for (int32_t len : step.seq_lens) max_len = std::max(max_len, len);
  TileWork w(shape, max_len);

  const int32_t num_seqs = step.num_seqs();
  for (int32_t s = 0; s < num_seqs; ++s) {
    const int32_t q_begin = step.query_start[s];
    const int32_t n_new = step.query_start[s + 1] - q_begin;
    const int32_t len = step.seq_lens[s];
    const int32_t first_pos = len - n_new;  // position of the first new token
    const int32_t* table = step.block_tables.data() + int64_t{s} * step.max_blocks_per_seq;
    for (int32_t j = 0; j < len; ++j) {
      const int64_t slot = int64_t{table[j / block_size]} * block_size + j % block_size;
      w.k_rows[j] = k_cache + slot * kv_row;
      w.v_rows[j] = v_cache + slot * kv_row;
    }

    for (int g = 0; g < num_kv_heads; ++g) {
      for (int32_t i0 = 0; i0 < n_new; i0 += w.tile_tokens) {
        const int nt = std::min<int32_t>(w.tile_tokens, n_new - i0);
        const Tile tile{q_begin, first_pos, i0, nt, g};
        LoadTileQueries(qkv, shape.qkv_width(), scale, tile, w);
        AttendTile(tile, w);
        StoreTile(tile, int64_t{shape.num_heads} * w.hd, w, out);
      }
    }
  }
}

}  // namespace tpserve
