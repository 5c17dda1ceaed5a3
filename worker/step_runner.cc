#include "worker/step_runner.h"

#include <algorithm>
#include <span>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"

namespace tpserve {
namespace {

template <typename... Parts>
absl::Status Invalid(uint64_t seq_id, const Parts&... parts) {
  return absl::InvalidArgumentError(absl::StrCat("step: sequence ", seq_id, ": ", parts...));
}

}  // namespace

absl::Status StepRunner::Reserve() {
  if (reserved_) return absl::OkStatus();
  if (absl::Status st = model_.backend().Reserve(StepCapacityFor(model_, cache_.block_size())); !st.ok()) {
    return st;
  }
  reserved_ = true;
  return absl::OkStatus();
}

absl::Status StepRunner::WarmUp() {
  if (absl::Status st = Reserve(); !st.ok()) return st;
  graphs_.reset();
  if (options_.enforce_eager || !DecodeGraphs::Supported(model_.backend(), model_.comm(), model_)) {
    return absl::OkStatus();
  }
  auto graphs = std::make_unique<DecodeGraphs>(model_, cache_, model_.backend(),
                                               StepCapacityFor(model_, cache_.block_size()));
  if (absl::Status st = graphs->Capture(); !st.ok()) return st;
  graphs_ = std::move(graphs);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<StepToken>> StepRunner::Run(const StepPlan& plan) {
  if (absl::Status st = Reserve(); !st.ok()) return st;
  const ModelConfig& config = model_.config();
  const int32_t bs = cache_.block_size();
  const int64_t num_blocks = cache_.num_blocks();

  // ---- 1. what the plan schedules, checked against the state after the drops ----
  const absl::flat_hash_set<uint64_t> finished(plan.finished.begin(), plan.finished.end());
  auto known = [&](uint64_t id) { return seqs_.contains(id) && !finished.contains(id); };
  struct Entry {
    uint64_t id = 0;
    const NewSequencePlan* added = nullptr;          // a new sequence, or
    const ContinuingSequencePlan* cont = nullptr;    // a continuing one
    std::span<const int32_t> tokens;                 // [n] to compute
    std::vector<int32_t> table;                      // block table after this step's blocks
    int64_t num_computed = 0;                        // before this step
    bool sample = false;
  };
  absl::flat_hash_map<uint64_t, Entry> entries;
  for (const NewSequencePlan& s : plan.new_sequences) {
    if (known(s.seq_id)) {
      return Invalid(s.seq_id, "sent as new but the worker already holds it; send it in "
                               "`continuing`, or in `finished` first to restart it");
    }
    Entry e{.id = s.seq_id, .added = &s, .tokens = s.token_ids, .table = s.block_ids,
            .num_computed = s.num_computed_tokens, .sample = s.sample};
    if (!entries.emplace(s.seq_id, std::move(e)).second) {
      return Invalid(s.seq_id, "appears twice among the new sequences");
    }
  }
  for (const ContinuingSequencePlan& s : plan.continuing) {
    if (!known(s.seq_id)) {
      return Invalid(s.seq_id, finished.contains(s.seq_id) ? "is continuing and finished in the same step"
                                                           : "is continuing but the worker does not hold it; "
                                                             "send it as a new sequence");
    }
    const Sequence& held = seqs_.at(s.seq_id);
    Entry e{.id = s.seq_id, .cont = &s, .tokens = s.token_ids, .table = held.block_table,
            .num_computed = held.num_computed, .sample = s.sample};
    e.table.insert(e.table.end(), s.new_block_ids.begin(), s.new_block_ids.end());
    if (!entries.emplace(s.seq_id, std::move(e)).second) {
      return Invalid(s.seq_id, "is both new and continuing, or continuing twice");
    }
  }
  if (plan.order.size() != entries.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "step: order lists ", plan.order.size(), " sequences but the step schedules ", entries.size(),
        " (new + continuing); list every scheduled sequence once"));
  }
  std::vector<const Entry*> ordered;  // [S]
  absl::flat_hash_set<uint64_t> seen;
  for (uint64_t id : plan.order) {
    auto it = entries.find(id);
    if (it == entries.end()) return Invalid(id, "is in order but neither new nor continuing");
    if (!seen.insert(id).second) return Invalid(id, "appears twice in order");
    ordered.push_back(&it->second);
  }

  // ---- 2. every sequence's tokens, blocks and positions ----
  int64_t total_tokens = 0;
  for (const Entry* e : ordered) {
    const int64_t n = std::ssize(e->tokens);
    if (n == 0) return Invalid(e->id, "has no tokens to compute; every scheduled sequence needs at least one");
    for (int32_t t : e->tokens) {
      if (t < 0 || t >= config.vocab_size) {
        return Invalid(e->id, "token id ", t, " is outside the vocabulary [0, ", config.vocab_size, ")");
      }
    }
    if (e->added != nullptr) {
      const NewSequencePlan& s = *e->added;
      if (s.prompt.empty()) return Invalid(e->id, "has an empty prompt");
      const int64_t known_tokens = std::ssize(s.prompt) + std::ssize(s.output);
      if (s.num_computed_tokens < 0 || s.num_computed_tokens + n > known_tokens) {
        return Invalid(e->id, "num_computed_tokens (", s.num_computed_tokens, ") + tokens to compute (", n,
                       ") must lie within prompt + output (", known_tokens, " tokens)");
      }
      for (int64_t i = 0; i < n; ++i) {
        const int64_t p = s.num_computed_tokens + i;
        const int32_t want = p < std::ssize(s.prompt) ? s.prompt[static_cast<size_t>(p)]
                                                      : s.output[static_cast<size_t>(p - std::ssize(s.prompt))];
        if (e->tokens[static_cast<size_t>(i)] != want) {
          return Invalid(e->id, "token to compute ", i, " (position ", p, ") is ", e->tokens[static_cast<size_t>(i)],
                         " but prompt + output has ", want, " there");
        }
      }
      if (absl::Status st = ValidateSamplingParams(s.sampling); !st.ok()) return Invalid(e->id, st.message());
    }
    const int64_t seq_len = e->num_computed + n;
    if (seq_len > model_.max_position()) {
      return Invalid(e->id, "reaches ", seq_len, " tokens, beyond the model's ", model_.max_position(),
                     " positions");
    }
    if (seq_len > std::ssize(e->table) * bs) {
      return Invalid(e->id, "has ", seq_len, " tokens after this step but its ", e->table.size(),
                     " blocks of ", bs, " tokens hold only ", std::ssize(e->table) * bs,
                     "; send the missing block ids");
    }
    for (int32_t b : e->table) {
      if (b < 0 || b >= num_blocks) {
        return Invalid(e->id, "block id ", b, " is outside the KV cache's [0, ", num_blocks, ") blocks");
      }
    }
    total_tokens += n;
  }
  const int64_t num_seqs = std::ssize(ordered);
  if (total_tokens > model_.options().max_num_tokens || num_seqs > model_.options().max_num_seqs) {
    return absl::InvalidArgumentError(absl::StrCat(
        "step: ", total_tokens, " tokens in ", num_seqs, " sequences exceed the worker's limits of ",
        model_.options().max_num_tokens, " tokens (max_num_batched_tokens) and ",
        model_.options().max_num_seqs, " sequences (max_num_seqs) given at Load"));
  }

  // ---- 3. the forward ----
  const bool on_device = rank_ == 0 && options_.sampler != nullptr;
  std::optional<Logits> logits;
  if (num_seqs > 0) {
    int32_t num_prefill = 0;  // up to and including the last multi-token sequence
    int32_t max_blocks = 1;
    for (int32_t s = 0; s < num_seqs; ++s) {
      if (ordered[static_cast<size_t>(s)]->tokens.size() > 1) num_prefill = s + 1;
      max_blocks = std::max(max_blocks, static_cast<int32_t>(ordered[static_cast<size_t>(s)]->table.size()));
    }
    std::vector<int32_t> token_ids, positions, query_start{0}, seq_lens, logits_indices;
    std::vector<int64_t> slots;
    std::vector<int32_t> block_tables(static_cast<size_t>(num_seqs * max_blocks), -1);
    token_ids.reserve(static_cast<size_t>(total_tokens));
    positions.reserve(static_cast<size_t>(total_tokens));
    slots.reserve(static_cast<size_t>(total_tokens));
    for (int32_t s = 0; s < num_seqs; ++s) {
      const Entry& e = *ordered[static_cast<size_t>(s)];
      for (size_t i = 0; i < e.tokens.size(); ++i) {
        const int64_t p = e.num_computed + static_cast<int64_t>(i);
        token_ids.push_back(e.tokens[i]);
        positions.push_back(static_cast<int32_t>(p));
        slots.push_back(int64_t{e.table[static_cast<size_t>(p / bs)]} * bs + p % bs);
      }
      query_start.push_back(static_cast<int32_t>(token_ids.size()));
      seq_lens.push_back(static_cast<int32_t>(e.num_computed + std::ssize(e.tokens)));
      logits_indices.push_back(query_start.back() - 1);
      std::copy(e.table.begin(), e.table.end(), block_tables.begin() + std::ptrdiff_t{s} * max_blocks);
    }
    StepMetadata step;
    step.num_prefill_seqs = num_prefill;
    step.num_decode_seqs = static_cast<int32_t>(num_seqs) - num_prefill;
    step.token_ids = token_ids;
    step.positions = positions;
    step.slot_mapping = slots;
    step.query_start = query_start;
    step.seq_lens = seq_lens;
    step.block_tables = block_tables;
    step.max_blocks_per_seq = max_blocks;
    step.logits_indices = logits_indices;
    if (on_device) {  // the logits stay on the device for the sampler
      if (absl::Status st = graphs_ ? graphs_->Run(step) : model_.Compute(step, cache_); !st.ok()) return st;
    } else {
      absl::StatusOr<std::optional<Logits>> out = graphs_ ? graphs_->Forward(step) : model_.Forward(step, cache_);
      if (!out.ok()) return out.status();
      logits = *std::move(out);
    }
    if (rank_ == 0 && !on_device && (!logits || logits->num_seqs != num_seqs)) {
      return absl::InternalError(absl::StrCat("step: rank 0 got ", logits ? logits->num_seqs : 0,
                                              " logits rows for ", num_seqs, " sequences"));
    }
  }

  // ---- 4. commit the new state ----
  for (uint64_t id : plan.finished) seqs_.erase(id);
  for (const Entry* e : ordered) {
    const int64_t n = std::ssize(e->tokens);
    if (e->added != nullptr) {
      const NewSequencePlan& s = *e->added;
      Sequence seq;
      seq.block_table = e->table;
      seq.num_computed = e->num_computed + n;
      if (rank_ == 0) {
        seq.sampling = std::make_unique<SequenceSamplingState>(s.sampling, s.prompt, s.output);
        // The RNG draws once per sampled token: after a preemption it resumes
        // where the first run stopped, so a seeded request gives the same tokens.
        for (size_t i = 0; i < s.output.size(); ++i) seq.sampling->NextUniform();
      }
      seqs_[e->id] = std::move(seq);
    } else {
      Sequence& seq = seqs_.at(e->id);
      seq.block_table = e->table;
      seq.num_computed += n;
    }
  }

  // ---- 5. sample (rank 0) ----
  std::vector<StepToken> tokens;
  if (on_device && num_seqs > 0) {
    std::vector<SequenceSamplingState*> states(static_cast<size_t>(num_seqs), nullptr);  // nullptr: not sampled
    for (int64_t s = 0; s < num_seqs; ++s) {
      const Entry& e = *ordered[static_cast<size_t>(s)];
      if (e.sample) states[static_cast<size_t>(s)] = seqs_.at(e.id).sampling.get();
    }
    std::vector<SampledToken> got = options_.sampler->Sample(model_.device_logits(), config.vocab_size, states);
    for (int64_t s = 0; s < num_seqs; ++s) {
      if (states[static_cast<size_t>(s)] == nullptr) continue;
      tokens.push_back(StepToken{.seq_id = ordered[static_cast<size_t>(s)]->id,
                                 .sampled = std::move(got[static_cast<size_t>(s)])});
    }
    return tokens;
  }
  if (rank_ != 0 || !logits) return tokens;
  const int64_t vocab = logits->vocab_size;
  for (int64_t s = 0; s < num_seqs; ++s) {
    const Entry& e = *ordered[static_cast<size_t>(s)];
    if (!e.sample) continue;
    SequenceSamplingState* state = seqs_.at(e.id).sampling.get();
    std::vector<SampledToken> got =
        Sample(logits->row(s), vocab, vocab, std::span<SequenceSamplingState* const>(&state, 1));
    tokens.push_back(StepToken{.seq_id = e.id, .sampled = std::move(got[0])});
  }
  return tokens;
}

}  // namespace tpserve
