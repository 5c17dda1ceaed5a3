#include "sampling/sampler.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "base/check.h"
#include "base/random.h"
#include "sampling/limits.h"

namespace tpserve {
namespace {

// Seeds for requests without one: a random base from the OS, then a counter
// mixed through SplitMix64 so that concurrent sequences never share a stream.
uint64_t FreshSeed() {
  static std::atomic<uint64_t> counter{[] {
    std::random_device rd;
    return (uint64_t{rd()} << 32) ^ rd();
  }()};
  return SplitMix64(counter.fetch_add(1, std::memory_order_relaxed));
}

absl::Status Invalid(const char* field, double value, const char* range) {
  return absl::InvalidArgumentError(absl::StrCat("sampling parameter ", field, " = ", value,
                                                 " is invalid: it must be ", range));
}

// Index of the largest value; ties to the lowest index.
int32_t Argmax(std::span<const float> x) {
  int32_t best = 0;
  for (int32_t i = 1; i < static_cast<int32_t>(x.size()); ++i) {
    if (x[i] > x[best]) best = i;
  }
  return best;
}

// Steps 2-4 of sampler.h for temperature > 0: filters on softmax(x / T), then
// an inverse-CDF draw at `u` over the kept tokens in id order.
// `weight` and `kept` are scratch buffers.
int32_t DrawFiltered(std::span<const float> x, const SamplingParams& p, double u,
                     std::vector<double>& weight, std::vector<int32_t>& kept) {
  const int32_t vocab = static_cast<int32_t>(x.size());
  const double max_x = x[Argmax(x)];
  const double inv_t = 1.0 / p.temperature;
  weight.resize(vocab);  // unnormalised softmax(x / T), the maximum is 1
  for (int32_t i = 0; i < vocab; ++i) weight[i] = std::exp((double{x[i]} - max_x) * inv_t);

  kept.resize(vocab);
  std::iota(kept.begin(), kept.end(), 0);
  if (p.min_p > 0) {  // prob ≥ min_p · max prob, i.e. weight ≥ min_p
    std::erase_if(kept, [&](int32_t i) { return weight[i] < p.min_p; });
  }
  auto more_likely = [&](int32_t a, int32_t b) {
    return weight[a] > weight[b] || (weight[a] == weight[b] && a < b);
  };
  bool sorted_by_id = true;
  if (p.top_k > 0 && static_cast<size_t>(p.top_k) < kept.size()) {
    std::nth_element(kept.begin(), kept.begin() + p.top_k, kept.end(), more_likely);
    kept.resize(p.top_k);
    sorted_by_id = false;
  }
  if (p.top_p < 1.0f) {
    double total = 0;
    for (int32_t i : kept) total += weight[i];
    const double mass = double{p.top_p} * total;
    // Sort only the most likely m tokens, growing m until they hold the mass
    // (a full sort of a 150k vocabulary costs far more than the usual nucleus).
    size_t m = std::min<size_t>(kept.size(), 1024);
    for (;;) {
      if (m < kept.size()) std::nth_element(kept.begin(), kept.begin() + m, kept.end(), more_likely);
      std::sort(kept.begin(), kept.begin() + m, more_likely);
      double before = 0;  // mass of the more likely tokens
      size_t n = 0;
      while (n < m && (n == 0 || before < mass)) before += weight[kept[n++]];
      if (before >= mass || m == kept.size()) {
        kept.resize(n);
        break;
      }
      m = std::min(kept.size(), m * 8);
    }
    sorted_by_id = false;
  }
  if (!sorted_by_id) std::sort(kept.begin(), kept.end());

  double total = 0;
  for (int32_t i : kept) total += weight[i];
  const double target = u * total;
  double cum = 0;
  for (int32_t i : kept) {
    cum += weight[i];
    if (cum > target) return i;
  }
  // Rounding: u · total reached the very end. The last token with weight, never
  // one of weight 0 (a ban or a grammar mask puts -inf in the row).
  for (auto it = kept.rbegin(); it != kept.rend(); ++it) {
    if (weight[*it] > 0) return *it;
  }
  return kept.back();
}

// Raw log-probs: the chosen token's and the top n of log-softmax(raw), in double.
void FillLogprobs(std::span<const float> raw, int32_t n, SampledToken& out,
                  std::vector<int32_t>& order) {
  const int32_t vocab = static_cast<int32_t>(raw.size());
  const double max_x = raw[Argmax(raw)];
  double sum = 0;
  for (float x : raw) sum += std::exp(double{x} - max_x);
  const double log_z = max_x + std::log(sum);
  out.logprob = static_cast<float>(double{raw[out.token]} - log_z);
  n = std::min(n, vocab);
  out.top.clear();
  if (n == 0) return;
  order.resize(vocab);
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + n, order.end(), [&](int32_t a, int32_t b) {
    return raw[a] > raw[b] || (raw[a] == raw[b] && a < b);
  });
  for (int32_t i = 0; i < n; ++i) {
    out.top.emplace_back(order[i], static_cast<float>(double{raw[order[i]]} - log_z));
  }
}

}  // namespace

absl::Status ValidateSamplingParams(const SamplingParams& p) {
  if (!(p.temperature >= 0) || !std::isfinite(p.temperature)) {
    return Invalid("temperature", p.temperature, "a finite number >= 0 (0 = greedy)");
  }
  if (p.top_k < -1) return Invalid("top_k", p.top_k, ">= 1, or -1 or 0 to disable it");
  if (!(p.top_p > 0 && p.top_p <= 1)) return Invalid("top_p", p.top_p, "in (0, 1] (1 = off)");
  if (!(p.min_p >= 0 && p.min_p <= 1)) return Invalid("min_p", p.min_p, "in [0, 1] (0 = off)");
  if (!(p.repetition_penalty > 0) || !std::isfinite(p.repetition_penalty)) {
    return Invalid("repetition_penalty", p.repetition_penalty, "a finite number > 0 (1 = off)");
  }
  if (!(p.presence_penalty >= -2 && p.presence_penalty <= 2)) {
    return Invalid("presence_penalty", p.presence_penalty, "in [-2, 2] (0 = off)");
  }
  if (!(p.frequency_penalty >= -2 && p.frequency_penalty <= 2)) {
    return Invalid("frequency_penalty", p.frequency_penalty, "in [-2, 2] (0 = off)");
  }
  if (p.logprobs < -1 || p.logprobs > kMaxLogprobs) {
    static_assert(kMaxLogprobs == 20, "the message below names the limit");
    return Invalid("logprobs", p.logprobs, "in [0, 20] (kMaxLogprobs), or -1 for none");
  }
  if (p.prompt_logprobs < -1 || p.prompt_logprobs > kMaxLogprobs) {
    return Invalid("prompt_logprobs", p.prompt_logprobs, "in [0, 20] (kMaxLogprobs), or -1 for none");
  }
  // Ids past the sampler's vocabulary are ignored there (the coordinator checks them against the model's).
  if (p.controls != nullptr) return ValidateTokenControls(*p.controls, std::numeric_limits<int32_t>::max());
  return absl::OkStatus();
}

ScoredToken ScoreToken(std::span<const float> raw, int32_t token, int32_t n, std::vector<int32_t>& scratch) {
  TPSERVE_CHECK(token >= 0 && token < std::ssize(raw), "ScoreToken: token ", token, " outside a row of ", raw.size());
  ScoredToken out;
  out.scored.token = token;
  FillLogprobs(raw, n, out.scored, scratch);
  const float x = raw[static_cast<size_t>(token)];
  out.rank = 1 + static_cast<int32_t>(std::count_if(raw.begin(), raw.end(), [x](float y) { return y > x; }));
  return out;
}

SequenceSamplingState::SequenceSamplingState(const SamplingParams& params,
                                             std::span<const int32_t> prompt,
                                             std::span<const int32_t> output)
    : params_(params), rng_(params.seed ? *params.seed : FreshSeed()) {
  if (params_.repetition_penalty != 1.0f) prompt_tokens_.insert(prompt.begin(), prompt.end());
  if (params_.controls != nullptr) tail_length_ = params_.controls->TailLength();
  for (int32_t token : output) AppendOutput(token);
}

void SequenceSamplingState::AppendOutput(int32_t token) {
  ++output_counts_[token];
  if (tail_length_ == 0) return;
  tail_.push_back(token);
  if (std::ssize(tail_) >= 2 * tail_length_) tail_.erase(tail_.begin(), tail_.end() - tail_length_);  // amortized O(1)
}

void SequenceSamplingState::AppendBannedTokens(std::vector<int32_t>& out) const {
  if (params_.controls != nullptr) tpserve::AppendBannedTokens(*params_.controls, tail_, out);
}

int32_t SequenceSamplingState::OutputCount(int32_t token) const {
  auto it = output_counts_.find(token);
  return it == output_counts_.end() ? 0 : it->second;
}

double SequenceSamplingState::NextUniform() {
  return static_cast<double>(rng_() >> 11) * 0x1.0p-53;
}

SampledToken TakeForcedToken(SequenceSamplingState& seq, int32_t token) {
  seq.NextUniform();  // Sample's one draw per token, greedy included
  seq.AppendOutput(token);
  return SampledToken{.token = token};
}

namespace {

// Where token t is in a row of `size` logits laid out as ApplyPenalties says; -1: not there.
int64_t SlotOf(int32_t t, int64_t size, std::span<const int32_t> ids) {
  if (ids.empty()) return t >= 0 && t < size ? t : -1;
  const auto it = std::lower_bound(ids.begin(), ids.end(), t);
  return it != ids.end() && *it == t ? it - ids.begin() : -1;
}

}  // namespace

void ApplyPenalties(const SequenceSamplingState& seq, std::span<float> logits, std::span<const int32_t> ids) {
  const SamplingParams& p = seq.params();
  const int64_t size = static_cast<int64_t>(logits.size());
  if (p.repetition_penalty != 1.0f) {
    const float r = p.repetition_penalty;
    auto penalise = [&](int64_t k) { logits[k] = logits[k] > 0 ? logits[k] / r : logits[k] * r; };
    for (int32_t t : seq.prompt_tokens_) {
      if (const int64_t k = SlotOf(t, size, ids); k >= 0) penalise(k);
    }
    for (const auto& [t, count] : seq.output_counts_) {
      if (seq.InPrompt(t)) continue;
      if (const int64_t k = SlotOf(t, size, ids); k >= 0) penalise(k);
    }
  }
  if (p.frequency_penalty != 0.0f || p.presence_penalty != 0.0f) {
    for (const auto& [t, count] : seq.output_counts_) {
      const int64_t k = SlotOf(t, size, ids);
      if (k < 0 || count == 0) continue;
      logits[k] -= p.frequency_penalty * static_cast<float>(count) + p.presence_penalty;
    }
  }
}

void ApplyRowEdits(std::span<const std::pair<int32_t, float>> edits, std::span<float> logits,
                   std::span<const int32_t> ids) {
  const int64_t size = static_cast<int64_t>(logits.size());
  for (const auto& [t, bias] : edits) {
    if (const int64_t k = SlotOf(t, size, ids); k >= 0) logits[k] += bias;
  }
}

std::vector<SampledToken> Sample(std::span<const float> logits, int64_t row_stride,
                                 int64_t vocab_size, std::span<SequenceSamplingState* const> seqs) {
  const int64_t num_rows = static_cast<int64_t>(seqs.size());
  TPSERVE_CHECK(vocab_size > 0 && row_stride >= vocab_size &&
                    static_cast<int64_t>(logits.size()) >= num_rows * row_stride,
                "Sample: logits of ", logits.size(), " floats do not hold ", num_rows,
                " rows of stride ", row_stride, " with ", vocab_size, " tokens");
  std::vector<SampledToken> result(num_rows);
  std::vector<float> work;       // [V] penalised logits, or [n] those of the n allowed tokens
  std::vector<double> weight;    // [V] scratch for DrawFiltered
  std::vector<int32_t> indices;  // [V] scratch
  std::vector<int32_t> banned;   // scratch: the bad words' bans
  std::vector<std::pair<int32_t, float>> edits;  // scratch: RowEdits
  for (int64_t s = 0; s < num_rows; ++s) {
    SequenceSamplingState& seq = *seqs[s];
    const SamplingParams& p = seq.params();
    const std::span<const float> raw = logits.subspan(s * row_stride, vocab_size);
    // Step 0: the candidates (every token, or the allowed ones gathered) and their edits.
    const std::span<const int32_t> ids = p.controls != nullptr
                                             ? AllowedInVocab(*p.controls, static_cast<int32_t>(vocab_size))
                                             : std::span<const int32_t>();
    if (ids.empty()) {
      work.assign(raw.begin(), raw.end());
    } else {
      work.resize(ids.size());
      for (size_t k = 0; k < ids.size(); ++k) work[k] = raw[static_cast<size_t>(ids[k])];
    }
    if (p.controls != nullptr) {
      banned.clear();
      seq.AppendBannedTokens(banned);
      RowEdits(*p.controls, banned, static_cast<int32_t>(vocab_size), edits);
      ApplyRowEdits(edits, work, ids);
    }
    ApplyPenalties(seq, work, ids);
    const double u = seq.NextUniform();  // drawn for greedy too: one per token, always
    SampledToken& out = result[s];
    out.token = p.temperature < kGreedyTemperature ? Argmax(work)
                                                   : DrawFiltered(work, p, u, weight, indices);
    if (!ids.empty()) out.token = ids[static_cast<size_t>(out.token)];
    if (p.logprobs >= 0) FillLogprobs(raw, p.logprobs, out, indices);
    seq.AppendOutput(out.token);
  }
  return result;
}

}  // namespace tpserve
