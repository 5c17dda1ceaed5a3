// One row of the sampler as a block-wide algorithm, written once for the GPU
// kernel (cuda/sampling.cu: one thread block per row) and for the host (a
// one-thread "block", used by tests/worker/sampling_row_test.cc against
// tpserve::Sample). No CUDA headers: g++ compiles this file as plain C++.
//
// Semantics are those of the host sampler (sampling/sampler.h), in vLLM's order:
//   token-level controls (sampling/token_controls.h: allowed tokens, bans,
//   logit_bias) and penalties on the raw logits x → greedy argmax (ties to the lowest id), or
//   x / T → min-p → top-k → top-p → one inverse-CDF draw at the row's uniform u
//   over the kept tokens in id order; log-probs of the raw logits.
//
// Without sorting: every filter keeps a prefix of the order "x descending, id
// ascending" (the weights w = exp((x - max x) / T) are monotone in x, and ties
// in x are ties in w, broken to the lower id). So the kept set is always
//   Kept(i) = key(x_i) > cut.key || (key(x_i) == cut.key && i <= cut.id)
// for a Cut found by bisection over the 32-bit order-preserving key of x
// (counts for top-k, masses for top-p), then over ids inside a tie group.
// Every bisection step is one pass over the row with a block reduction; all
// threads see the same reduced value, so the control flow stays uniform.
//
// Token-level controls travel in the row's entries (PenaltyEntry::bias: the
// logit_bias, or -inf for a banned token), so they cost per row what its
// entries cost, not the vocabulary. allowed_token_ids: the row's entries are
// then exactly its allowed tokens (RowParams::allowed_only) and every pass
// walks them instead of the vocabulary (ForEachCandidate): the gathered row
// of the host sampler, without a copy. Only the raw log-probs read the whole row.
//
// Precision: weights w in fp32 (expf), every sum of weights in fp64 (a one-
// thread fp32 sum over 128k terms would drift by up to 1e-2 relative; fp64
// keeps the block and the one-thread host instantiation within ~1e-7 of the
// host sampler's fp64 weights). The min-p cut is found in fp64 with the host
// sampler's own formula, so it agrees with it exactly. Token choices can only
// differ from the host sampler when u (or top_p · mass) lies within that
// rounding of a boundary of the cumulative distribution.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define TPSERVE_HD __host__ __device__
#else
#define TPSERVE_HD
#endif

namespace tpserve::sampling {

inline constexpr int32_t kNoId = 0x7fffffff;        // "no token" / "the whole tie group"
inline constexpr float kRowGreedyTemperature = 1e-5f;  // = tpserve::kGreedyTemperature

// What one row needs from its SamplingParams, plus its uniform draw.
struct RowParams {
  float temperature = 1.0f;         // < kRowGreedyTemperature: greedy
  int32_t top_k = -1;               // <= 0: off
  float top_p = 1.0f;               // >= 1: off
  float min_p = 0.0f;               // <= 0: off
  float repetition_penalty = 1.0f;  // 1: off
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  int32_t num_logprobs = -1;  // -1: none; n >= 0: the chosen token's and the top n
  int32_t allowed_only = 0;   // 1: the candidates are the row's entries (allowed_token_ids), > 0 of them
  double uniform = 0.0;       // [0, 1): this row's one draw from its sequence's RNG
};

// A token the sequence has seen (prompt, when the repetition penalty is on, or
// output), or one its token-level controls name (biased, banned, allowed).
// A row's entries are sorted by token, without duplicates.
struct PenaltyEntry {
  int32_t token;
  int32_t output_count;  // times generated so far (0: prompt only)
  int32_t in_prompt;     // 1 when in the prompt (only uploaded with a repetition penalty)
  float bias = 0.0f;     // added before the penalties (logit_bias); -inf: banned (bad_words)
};

struct TopLogprob {
  int32_t token;
  float logprob;
};

struct RowResult {
  int32_t token;
  float logprob;     // of token (raw log-softmax), when num_logprobs >= 0
  int32_t num_top;   // entries written to the row's TopLogprob list
};

// Prefix of the order (key descending, id ascending): see the header comment.
struct Cut {
  uint32_t key;
  int32_t id;
};

TPSERVE_HD inline bool Kept(const Cut& cut, uint32_t key, int32_t id) {
  return key > cut.key || (key == cut.key && id <= cut.id);
}

// Order-preserving map float → uint32 (a < b ⇔ key(a) < key(b); -0 and +0 share
// a key, since the host sampler treats them as a tie).
TPSERVE_HD inline uint32_t OrderedKey(float x) {
  x = (x == 0.0f) ? 0.0f : x;
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
TPSERVE_HD inline float FromOrderedKey(uint32_t key) {
  const uint32_t u = (key & 0x80000000u) ? (key & 0x7fffffffu) : ~key;
  float x;
  memcpy(&x, &u, sizeof x);
  return x;
}

// Logit storage: fp32, or bf16 as its 16 bits (the top half of an fp32).
TPSERVE_HD inline float LoadLogit(float v) { return v; }
TPSERVE_HD inline float LoadLogit(uint16_t bf16) {
  const uint32_t u = static_cast<uint32_t>(bf16) << 16;
  float x;
  memcpy(&x, &u, sizeof x);
  return x;
}

// fp32 arithmetic without fused multiply-add on the device (nvcc contracts
// a * b + c by default), so the penalties round exactly as on the host.
TPSERVE_HD inline float MulRn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
TPSERVE_HD inline float AddRn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}

// Row s of the gathered LM-head logits [tp, S, Vs]: token i = r·Vs + j is
// gathered[r, s, j]; tokens >= vocab (the shards' padding) are never read.
template <typename T>
struct GatheredRow {
  const T* data;         // &gathered[0, s, 0]; shard r at data + r·shard_stride
  int64_t shard_stride;  // S·Vs
  int32_t shard_vocab;   // Vs
  int32_t vocab;         // V <= tp·Vs

  TPSERVE_HD float Raw(int32_t i) const {
    const int32_t r = i / shard_vocab;
    return LoadLogit(data[r * shard_stride + (i - r * shard_vocab)]);
  }
};

// Calls f(i, raw_i) for this thread's share of the row (ids strided by the
// block size inside each shard; increasing ids per thread).
template <class Block, typename T, class F>
TPSERVE_HD void ForEachToken(Block& b, const GatheredRow<T>& row, F&& f) {
  int32_t base = 0;
  for (int64_t r = 0; base < row.vocab; ++r, base += row.shard_vocab) {
    const T* shard = row.data + r * row.shard_stride;
    const int32_t n = row.vocab - base < row.shard_vocab ? row.vocab - base : row.shard_vocab;
    for (int32_t j = b.thread(); j < n; j += b.size()) f(base + j, LoadLogit(shard[j]));
  }
}

// A value and its token id; "better" is larger, ties to the lower id.
struct ValueId {
  float value;
  int32_t id;
};
TPSERVE_HD inline bool Better(const ValueId& a, const ValueId& b) {
  return a.value > b.value || (a.value == b.value && a.id < b.id);
}

// Bisection helpers. LastTrue: the largest v in [lo, hi] with pred(v), pred
// true then false, pred(lo) assumed. FirstTrue: the smallest v in [lo, hi]
// with pred(v), pred false then true, pred(hi) assumed.
template <class Pred>
TPSERVE_HD uint32_t LastTrue(uint32_t lo, uint32_t hi, Pred&& pred) {
  while (lo < hi) {
    const uint32_t mid = static_cast<uint32_t>(lo + (static_cast<uint64_t>(hi) - lo + 1) / 2);
    if (pred(mid)) lo = mid; else hi = mid - 1;
  }
  return lo;
}
template <class Pred>
TPSERVE_HD uint32_t FirstTrue(uint32_t lo, uint32_t hi, Pred&& pred) {
  while (lo < hi) {
    const uint32_t mid = lo + (hi - lo) / 2;
    if (pred(mid)) hi = mid; else lo = mid + 1;
  }
  return lo;
}

// The host sampler's weight, exactly as worker/sampler.cc computes it (fp64).
TPSERVE_HD inline double HostWeight(float x, float max_x, float temperature) {
  const double inv_t = 1.0 / static_cast<double>(temperature);
  return exp((static_cast<double>(x) - static_cast<double>(max_x)) * inv_t);
}

// Scratch the row algorithm needs from its block.
struct RowScratch {
  uint32_t* seen;    // [ceil(V / 32)] bit t: token t has a penalty entry
  int32_t* counter;  // one int: slots handed out in the top-n list
};

// Samples one row. Call from every thread of the block with the same
// arguments; returns the same result on every thread and writes the top
// log-probs to top[0, result.num_top) (most likely first, ties to the lower id).
//   row:      the row's logits (read only)
//   entries:  [num_entries] the row's penalty entries, sorted by token
//   top:      [>= min(p.num_logprobs, V)] out
template <class Block, typename T>
class RowSampler {
 public:
  TPSERVE_HD RowSampler(Block& b, const GatheredRow<T>& row, const PenaltyEntry* entries,
                        int32_t num_entries, const RowParams& p, RowScratch scratch)
      : b_(b), row_(row), entries_(entries), num_entries_(num_entries), p_(p), s_(scratch) {}

  TPSERVE_HD RowResult Run(TopLogprob* top) {
    BuildSeenMask();
    Stats();
    RowResult result{};
    result.token = p_.temperature < kRowGreedyTemperature ? best_.id : Draw();
    result.num_top = 0;
    if (p_.num_logprobs >= 0) Logprobs(result, top);
    return result;
  }

 private:
  // ---- penalties (worker/sampler.cc ApplyPenalties) ----
  TPSERVE_HD void BuildSeenMask() {
    if (num_entries_ == 0) return;
    const int32_t words = (row_.vocab + 31) / 32;
    for (int32_t w = b_.thread(); w < words; w += b_.size()) s_.seen[w] = 0;
    b_.Sync();
    for (int32_t e = b_.thread(); e < num_entries_; e += b_.size()) {
      const int32_t t = entries_[e].token;
      if (t >= 0 && t < row_.vocab) b_.AtomicOr(&s_.seen[t >> 5], 1u << (t & 31));
    }
    b_.Sync();
  }

  TPSERVE_HD float Penalised(int32_t i, float x) const {
    if (num_entries_ == 0 || !((s_.seen[i >> 5] >> (i & 31)) & 1u)) return x;
    int32_t lo = 0, hi = num_entries_ - 1;  // binary search: entries are sorted by token
    while (lo < hi) {
      const int32_t mid = (lo + hi) / 2;
      if (entries_[mid].token < i) lo = mid + 1; else hi = mid;
    }
    const PenaltyEntry& e = entries_[lo];
    if (e.bias != 0.0f) x = AddRn(x, e.bias);
    const float r = p_.repetition_penalty;
    if (r != 1.0f && (e.in_prompt != 0 || e.output_count > 0)) x = x > 0 ? x / r : MulRn(x, r);
    if ((p_.frequency_penalty != 0.0f || p_.presence_penalty != 0.0f) && e.output_count > 0) {
      x = x - AddRn(MulRn(p_.frequency_penalty, static_cast<float>(e.output_count)),
                    p_.presence_penalty);
    }
    return x;
  }

  TPSERVE_HD uint32_t KeyX(int32_t i, float raw) const { return OrderedKey(Penalised(i, raw)); }

  // ---- the candidates: every token, or the row's entries (allowed_only) ----
  TPSERVE_HD int32_t NumCandidates() const { return p_.allowed_only ? num_entries_ : row_.vocab; }
  TPSERVE_HD int32_t Candidate(int32_t k) const { return p_.allowed_only ? entries_[k].token : k; }
  // f(i, raw_i) for this thread's share of the candidates (increasing ids
  // per thread); the whole row once Logprobs has begun (raw log-probs).
  template <class F>
  TPSERVE_HD void ForEachCandidate(F&& f) const {
    if (!p_.allowed_only || whole_row_) {
      ForEachToken(b_, row_, f);
      return;
    }
    for (int32_t k = b_.thread(); k < num_entries_; k += b_.size()) {
      const int32_t i = entries_[k].token;
      f(i, row_.Raw(i));
    }
  }

  // ---- one pass each ----
  TPSERVE_HD void Stats() {
    ValueId best{-INFINITY, kNoId};
    float x_min = INFINITY, raw_min = INFINITY, raw_max = -INFINITY;
    ForEachCandidate([&](int32_t i, float raw) {
      const float x = Penalised(i, raw);
      if (Better(ValueId{x, i}, best)) best = ValueId{x, i};
      x_min = fminf(x_min, x);
      raw_min = fminf(raw_min, raw);
      raw_max = fmaxf(raw_max, raw);
    });
    best_ = b_.ArgMax(best);
    x_min_ = b_.Min(x_min);
    raw_min_ = b_.Min(raw_min);
    raw_max_ = b_.Max(raw_max);
  }

  template <class Pred>
  TPSERVE_HD int64_t CountIf(Pred&& pred) {
    int64_t n = 0;
    ForEachCandidate([&](int32_t i, float raw) { n += pred(i, raw) ? 1 : 0; });
    return b_.Sum(n);
  }

  TPSERVE_HD float Weight(float x) const { return expf((x - best_.value) * inv_t_); }

  // Σ w over kept tokens with key >= min_key (fp64).
  TPSERVE_HD double MassFrom(const Cut& cut, uint32_t min_key) {
    double sum = 0;
    ForEachCandidate([&](int32_t i, float raw) {
      const float x = Penalised(i, raw);
      const uint32_t key = OrderedKey(x);
      if (key >= min_key && Kept(cut, key, i)) sum += Weight(x);
    });
    return b_.Sum(sum);
  }

  // The first n tokens of the order (key desc, id asc) as a Cut, key_of(i, raw)
  // being the key; keys lie in [lo, hi], n in [1, V].
  template <class KeyOf>
  TPSERVE_HD Cut SelectPrefix(int64_t n, uint32_t lo, uint32_t hi, KeyOf&& key_of) {
    const uint32_t c = LastTrue(lo, hi, [&](uint32_t k) {
      return CountIf([&](int32_t i, float raw) { return key_of(i, raw) >= k; }) >= n;
    });
    const int64_t above = CountIf([&](int32_t i, float raw) { return key_of(i, raw) > c; });
    const int64_t group = CountIf([&](int32_t i, float raw) { return key_of(i, raw) == c; });
    const int64_t need = n - above;  // in [1, group]
    if (need >= group) return Cut{c, kNoId};
    const uint32_t d = FirstTrue(0, static_cast<uint32_t>(row_.vocab - 1), [&](uint32_t id) {
      return CountIf([&](int32_t i, float raw) {
               return key_of(i, raw) == c && static_cast<uint32_t>(i) <= id;
             }) >= need;
    });
    return Cut{c, static_cast<int32_t>(d)};
  }

  // ---- temperature, filters and the draw ----
  TPSERVE_HD int32_t Draw() {
    inv_t_ = 1.0f / p_.temperature;
    key_lo_ = OrderedKey(x_min_);
    const uint32_t key_lo = key_lo_, key_hi = OrderedKey(best_.value);
    auto key_x = [&](int32_t i, float raw) { return KeyX(i, raw); };
    Cut cut{0, kNoId};  // everything
    int64_t kept = NumCandidates();
    if (p_.min_p > 0) {  // weight >= min_p (the max weight is 1), the host's fp64 formula
      const uint32_t k = FirstTrue(key_lo, key_hi, [&](uint32_t key) {
        return HostWeight(FromOrderedKey(key), best_.value, p_.temperature) >=
               static_cast<double>(p_.min_p);
      });
      cut = Cut{k, kNoId};
      kept = CountIf([&](int32_t i, float raw) { return KeyX(i, raw) >= k; });
    }
    if (p_.top_k > 0 && p_.top_k < kept) {  // a prefix of a prefix: select over the whole row
      cut = SelectPrefix(p_.top_k, key_lo, key_hi, key_x);
      kept = p_.top_k;
    }
    if (p_.top_p < 1.0f) cut = TopP(cut, key_hi);
    return InverseCdf(cut);
  }

  // The shortest prefix of the kept tokens whose mass reaches top_p · mass(kept).
  TPSERVE_HD Cut TopP(const Cut& cut, uint32_t key_hi) {
    const double total = MassFrom(cut, 0);
    const double target = static_cast<double>(p_.top_p) * total;
    const uint32_t lo = cut.key > key_lo_ ? cut.key : key_lo_;  // every kept key is >= lo
    const uint32_t c = LastTrue(lo, key_hi, [&](uint32_t k) { return MassFrom(cut, k) >= target; });
    const double before = c == key_hi ? 0.0 : MassFrom(cut, c + 1);  // strictly more likely
    const int64_t group = CountIf([&](int32_t i, float raw) {
      const uint32_t key = KeyX(i, raw);
      return key == c && Kept(cut, key, i);
    });
    // Tokens of the tie group (equal weight wc) taken in id order until the mass is reached.
    const double wc = Weight(FromOrderedKey(c));
    int64_t m = group;
    if (wc > 0) {
      const double needed = ceil((target - before) / wc);
      if (needed < static_cast<double>(group)) m = needed < 1 ? 1 : static_cast<int64_t>(needed);
    }
    if (m >= group) return Cut{c, c == cut.key ? cut.id : kNoId};
    const uint32_t d = FirstTrue(0, static_cast<uint32_t>(row_.vocab - 1), [&](uint32_t id) {
      return CountIf([&](int32_t i, float raw) {
               const uint32_t key = KeyX(i, raw);
               return key == c && Kept(cut, key, i) && static_cast<uint32_t>(i) <= id;
             }) >= m;
    });
    return Cut{c, static_cast<int32_t>(d)};
  }

  // First kept token (in id order) whose cumulative weight exceeds u · total.
  // Thread t owns the contiguous candidates [t·chunk, (t+1)·chunk); the first
  // thread whose inclusive prefix exceeds the target walks its chunk.
  TPSERVE_HD int32_t InverseCdf(const Cut& cut) {
    const int32_t count = NumCandidates();
    const int32_t chunk = (count + b_.size() - 1) / b_.size();
    const int32_t begin = b_.thread() * chunk < count ? b_.thread() * chunk : count;
    const int32_t end = begin + chunk < count ? begin + chunk : count;
    auto weight_of = [&](int32_t i, float* w) {  // false when i is not kept
      const float x = Penalised(i, row_.Raw(i));
      if (!Kept(cut, OrderedKey(x), i)) return false;
      *w = Weight(x);
      return true;
    };
    double local = 0;
    int32_t last_kept = -1, last_any = -1;  // the last kept token of weight > 0; of any weight
    for (int32_t k = begin; k < end; ++k) {
      const int32_t i = Candidate(k);
      float w;
      if (weight_of(i, &w)) {
        local += w;
        if (w > 0) last_kept = i;  // a banned or masked token (weight 0) is never the fallback
        last_any = i;
      }
    }
    double total;
    const double exclusive = b_.ExclusiveSum(local, &total);
    const double target = p_.uniform * total;
    const int32_t owner =
        b_.MinId(local > 0 && exclusive + local > target ? b_.thread() : kNoId);
    if (owner == kNoId) {  // rounding put the target at the very end: the last kept token of weight > 0
      const int32_t last = b_.MaxId(last_kept);
      return last >= 0 ? last : b_.MaxId(last_any);  // every weight 0 (a row masked whole): any kept token
    }
    int32_t picked = kNoId;
    if (b_.thread() == owner) {
      double cum = exclusive;
      for (int32_t k = begin; k < end && picked == kNoId; ++k) {
        const int32_t i = Candidate(k);
        float w;
        if (weight_of(i, &w)) {
          cum += w;
          // w > 0: `exclusive` (the scan's sum) may exceed the target by a rounding
          // where this thread's own sums do not; a token of weight 0 is never drawn.
          if (w > 0 && cum > target) picked = i;
        }
      }
      if (picked == kNoId) picked = last_kept;
    }
    return b_.MinId(picked);
  }

  // ---- raw log-probs (before penalties, temperature and filters) ----
  TPSERVE_HD void Logprobs(RowResult& result, TopLogprob* top) {
    whole_row_ = true;       // from here on (SelectPrefix's counts too) the raw row, every token
    if (p_.allowed_only) {  // Stats saw the candidates only: the raw range of the whole row
      float raw_min = INFINITY, raw_max = -INFINITY;
      ForEachToken(b_, row_, [&](int32_t, float raw) {
        raw_min = fminf(raw_min, raw);
        raw_max = fmaxf(raw_max, raw);
      });
      raw_min_ = b_.Min(raw_min);
      raw_max_ = b_.Max(raw_max);
    }
    double sum = 0;
    ForEachToken(b_, row_, [&](int32_t, float raw) { sum += expf(raw - raw_max_); });
    const double log_z = static_cast<double>(raw_max_) + log(b_.Sum(sum));
    result.logprob = static_cast<float>(static_cast<double>(row_.Raw(result.token)) - log_z);
    const int64_t n = p_.num_logprobs < row_.vocab ? p_.num_logprobs : row_.vocab;
    if (n == 0) return;
    auto key_raw = [](int32_t, float raw) { return OrderedKey(raw); };
    const Cut cut = SelectPrefix(n, OrderedKey(raw_min_), OrderedKey(raw_max_), key_raw);
    if (b_.thread() == 0) *s_.counter = 0;
    b_.Sync();
    ForEachToken(b_, row_, [&](int32_t i, float raw) {
      if (Kept(cut, OrderedKey(raw), i)) top[b_.AtomicAdd(s_.counter, 1)] = TopLogprob{i, raw};
    });
    b_.Sync();
    if (b_.thread() == 0) {  // insertion sort of n entries, most likely first, ties to the lower id
      for (int64_t a = 1; a < n; ++a) {
        const TopLogprob e = top[a];
        int64_t j = a;
        while (j > 0 && Better(ValueId{e.logprob, e.token}, ValueId{top[j - 1].logprob, top[j - 1].token})) {
          top[j] = top[j - 1];
          --j;
        }
        top[j] = e;
      }
      for (int64_t a = 0; a < n; ++a) {
        top[a].logprob = static_cast<float>(static_cast<double>(top[a].logprob) - log_z);
      }
    }
    b_.Sync();
    result.num_top = static_cast<int32_t>(n);
  }

  Block& b_;
  GatheredRow<T> row_;
  const PenaltyEntry* entries_;
  int32_t num_entries_;
  RowParams p_;
  RowScratch s_;
  ValueId best_{};  // argmax of the penalised logits
  float x_min_ = 0, raw_min_ = 0, raw_max_ = 0;
  float inv_t_ = 1;
  uint32_t key_lo_ = 0;  // key of the smallest penalised logit
  bool whole_row_ = false;  // set by Logprobs: ForEachCandidate walks every token
};

// The host's "block": one thread, reductions are identities.
struct SerialBlock {
  int32_t thread() const { return 0; }
  int32_t size() const { return 1; }
  void Sync() {}
  int64_t Sum(int64_t v) { return v; }
  double Sum(double v) { return v; }
  float Min(float v) { return v; }
  float Max(float v) { return v; }
  ValueId ArgMax(ValueId v) { return v; }
  int32_t MinId(int32_t v) { return v; }
  int32_t MaxId(int32_t v) { return v; }
  double ExclusiveSum(double v, double* total) {
    *total = v;
    return 0;
  }
  void AtomicOr(uint32_t* word, uint32_t bits) { *word |= bits; }
  int32_t AtomicAdd(int32_t* counter, int32_t n) {
    const int32_t old = *counter;
    *counter += n;
    return old;
  }
};

}  // namespace tpserve::sampling
