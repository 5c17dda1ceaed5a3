#include "worker/step_runner.h"

#include <sys/prctl.h>

#include <algorithm>
#include <span>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace tpserve {
namespace {

template <typename... Parts>
absl::Status Invalid(uint64_t seq_id, const Parts&... parts) {
  return absl::InvalidArgumentError(absl::StrCat("step: sequence ", seq_id, ": ", parts...));
}

// A new sequence's tokens to compute are its prompt + output at the positions
// after num_computed_tokens, and its sampling parameters are valid.
absl::Status CheckNewSequence(const NewSequencePlan& s) {
  const int64_t n = std::ssize(s.token_ids);
  if (s.prompt.empty()) return Invalid(s.seq_id, "has an empty prompt");
  const int64_t known_tokens = std::ssize(s.prompt) + std::ssize(s.output);
  if (s.num_computed_tokens < 0 || s.num_computed_tokens + n > known_tokens) {
    return Invalid(s.seq_id, "num_computed_tokens (", s.num_computed_tokens, ") + tokens to compute (", n,
                   ") must lie within prompt + output (", known_tokens, " tokens)");
  }
  for (int64_t i = 0; i < n; ++i) {
    const int64_t p = s.num_computed_tokens + i;
    const int32_t want = p < std::ssize(s.prompt) ? s.prompt[static_cast<size_t>(p)]
                                                  : s.output[static_cast<size_t>(p - std::ssize(s.prompt))];
    if (s.token_ids[static_cast<size_t>(i)] != want) {
      return Invalid(s.seq_id, "token to compute ", i, " (position ", p, ") is ", s.token_ids[static_cast<size_t>(i)],
                     " but prompt + output has ", want, " there");
    }
  }
  if (absl::Status st = ValidateSamplingParams(s.sampling); !st.ok()) return Invalid(s.seq_id, st.message());
  return absl::OkStatus();
}

}  // namespace

int32_t SimulatedToken(uint64_t seq_id, int64_t position, int32_t vocab_size) {
  uint64_t h = seq_id * 0x9E3779B97F4A7C15ull ^ static_cast<uint64_t>(position) * 0xC2B2AE3D27D4EB4Full;
  h ^= h >> 29;
  return static_cast<int32_t>(h % static_cast<uint64_t>(vocab_size));
}

absl::Status StepRunner::Reserve() {
  if (reserved_) return absl::OkStatus();
  TPSERVE_RETURN_IF_ERROR(model_.backend().Reserve(StepCapacityFor(model_, cache_.block_size())));
  reserved_ = true;
  return absl::OkStatus();
}

absl::Status StepRunner::WarmUp() {
  TPSERVE_RETURN_IF_ERROR(Reserve());
  graphs_.reset();
  if (options_.enforce_eager || !DecodeGraphs::Supported(model_.backend(), model_.comm(), model_)) {
    return absl::OkStatus();
  }
  auto graphs = std::make_unique<DecodeGraphs>(model_, cache_, model_.backend(),
                                               StepCapacityFor(model_, cache_.block_size()));
  TPSERVE_RETURN_IF_ERROR(graphs->Capture());
  graphs_ = std::move(graphs);
  return absl::OkStatus();
}

struct StepRunner::Entry {
  uint64_t id = 0;
  const NewSequencePlan* added = nullptr;        // a new sequence, or
  const ContinuingSequencePlan* cont = nullptr;  // a continuing one
  std::span<const int32_t> tokens;               // [n] to compute (into `input` for decode_sampled)
  std::vector<int32_t> table;                    // block table after this step's blocks
  int64_t num_computed = 0;                      // before this step
  bool sample = false;
  int32_t input = -1;                            // decode_sampled: the token its last step sampled
};

absl::StatusOr<std::vector<StepRunner::Entry>> StepRunner::CheckPlan(const StepPlan& plan) const {
  const absl::flat_hash_set<uint64_t> finished(plan.finished.begin(), plan.finished.end());
  auto known = [&](uint64_t id) { return seqs_.contains(id) && !finished.contains(id); };
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
    if (s.decode_sampled && (held.next_input < 0 || !s.token_ids.empty())) {
      return Invalid(s.seq_id, held.next_input < 0 ? "is decode_sampled but its last step sampled no token; "
                                                     "send its token in token_ids"
                                                   : "is decode_sampled and carries token_ids; send one or the other");
    }
    Entry e{.id = s.seq_id, .cont = &s, .tokens = s.token_ids, .table = held.block_table,
            .num_computed = held.num_computed, .sample = s.sample,
            .input = s.decode_sampled ? held.next_input : -1};
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
  std::vector<Entry> ordered;  // [S]
  ordered.reserve(entries.size());
  for (uint64_t id : plan.order) {
    auto it = entries.find(id);
    if (it == entries.end()) {
      const bool listed = std::any_of(ordered.begin(), ordered.end(), [&](const Entry& e) { return e.id == id; });
      return Invalid(id, listed ? "appears twice in order" : "is in order but neither new nor continuing");
    }
    ordered.push_back(std::move(it->second));
    entries.erase(it);
  }
  for (Entry& e : ordered) {  // `ordered` no longer moves: point at each input
    if (e.input >= 0) e.tokens = std::span<const int32_t>(&e.input, 1);
  }
  for (const Entry& e : ordered) TPSERVE_RETURN_IF_ERROR(CheckEntry(e));
  TPSERVE_RETURN_IF_ERROR(CheckLimits(ordered));
  return ordered;
}

absl::Status StepRunner::CheckEntry(const Entry& e) const {
  const int32_t vocab = model_.config().vocab_size, bs = cache_.block_size();
  const int64_t n = std::ssize(e.tokens), num_blocks = cache_.num_blocks();
  if (n == 0) return Invalid(e.id, "has no tokens to compute; every scheduled sequence needs at least one");
  for (int32_t t : e.tokens) {
    if (t < 0 || t >= vocab) return Invalid(e.id, "token id ", t, " is outside the vocabulary [0, ", vocab, ")");
  }
  if (e.added != nullptr) TPSERVE_RETURN_IF_ERROR(CheckNewSequence(*e.added));
  const int64_t seq_len = e.num_computed + n;
  if (seq_len > model_.max_position()) {
    return Invalid(e.id, "reaches ", seq_len, " tokens, beyond the model's ", model_.max_position(), " positions");
  }
  if (seq_len > std::ssize(e.table) * bs) {
    return Invalid(e.id, "has ", seq_len, " tokens after this step but its ", e.table.size(), " blocks of ", bs,
                   " tokens hold only ", std::ssize(e.table) * bs, "; send the missing block ids");
  }
  for (int32_t b : e.table) {
    if (b < 0 || b >= num_blocks) {
      return Invalid(e.id, "block id ", b, " is outside the KV cache's [0, ", num_blocks, ") blocks");
    }
  }
  return absl::OkStatus();
}

absl::Status StepRunner::CheckLimits(const std::vector<Entry>& entries) const {
  int64_t total_tokens = 0;
  for (const Entry& e : entries) total_tokens += std::ssize(e.tokens);
  const int64_t num_seqs = std::ssize(entries);
  const ModelOptions& o = model_.options();
  if (total_tokens > o.max_num_tokens || num_seqs > o.max_num_seqs) {
    return absl::InvalidArgumentError(absl::StrCat(
        "step: ", total_tokens, " tokens in ", num_seqs, " sequences exceed the worker's limits of ",
        o.max_num_tokens, " tokens (max_num_batched_tokens) and ", o.max_num_seqs,
        " sequences (max_num_seqs) given at Load"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::optional<Logits>> StepRunner::Forward(bool on_device) {
  const StepMetadata step = batch_.view();
  if (on_device) {  // the logits stay on the device for the sampler
    TPSERVE_RETURN_IF_ERROR(graphs_ ? graphs_->Run(step) : model_.Compute(step, cache_));
    return std::optional<Logits>();
  }
  TPSERVE_ASSIGN_OR_RETURN(std::optional<Logits> logits,
                           graphs_ ? graphs_->Forward(step) : model_.Forward(step, cache_));
  if (rank_ == 0 && (!logits || logits->num_seqs != step.num_seqs())) {
    return absl::InternalError(absl::StrCat("step: rank 0 got ", logits ? logits->num_seqs : 0,
                                            " logits rows for ", step.num_seqs(), " sequences"));
  }
  return logits;
}

void StepRunner::Commit(const StepPlan& plan, const std::vector<Entry>& entries) {
  for (uint64_t id : plan.finished) seqs_.erase(id);
  for (const Entry& e : entries) {
    const int64_t n = std::ssize(e.tokens);
    if (e.added == nullptr) {
      Sequence& seq = seqs_.at(e.id);
      seq.block_table = e.table;
      seq.num_computed += n;
      seq.next_input = -1;  // consumed; ShareTokens sets the next one
      continue;
    }
    const NewSequencePlan& s = *e.added;
    Sequence seq;
    seq.block_table = e.table;
    seq.num_computed = e.num_computed + n;
    if (rank_ == 0) {
      seq.sampling = std::make_unique<SequenceSamplingState>(s.sampling, s.prompt, s.output);
      // The RNG draws once per sampled token: after a preemption it resumes
      // where the first run stopped, so a seeded request gives the same tokens.
      for (size_t i = 0; i < s.output.size(); ++i) seq.sampling->NextUniform();
    }
    seqs_[e.id] = std::move(seq);
  }
}

std::vector<StepToken> StepRunner::SampleOnDevice(const std::vector<Entry>& entries) {
  std::vector<SequenceSamplingState*> states(entries.size(), nullptr);  // nullptr: not sampled
  for (size_t s = 0; s < entries.size(); ++s) {
    if (entries[s].sample) states[s] = seqs_.at(entries[s].id).sampling.get();
  }
  std::vector<SampledToken> got =
      options_.sampler->Sample(model_.device_logits(), model_.config().vocab_size, states);
  std::vector<StepToken> tokens;
  for (size_t s = 0; s < entries.size(); ++s) {
    if (states[s] != nullptr) tokens.push_back(StepToken{.seq_id = entries[s].id, .sampled = std::move(got[s])});
  }
  return tokens;
}

std::vector<StepToken> StepRunner::SampleOnHost(const std::vector<Entry>& entries, const Logits& logits) {
  const int64_t vocab = logits.vocab_size;
  std::vector<StepToken> tokens;
  for (size_t s = 0; s < entries.size(); ++s) {
    const Entry& e = entries[s];
    if (!e.sample) continue;
    SequenceSamplingState* state = seqs_.at(e.id).sampling.get();
    const std::span<const float> row = logits.row(static_cast<int64_t>(s));
    std::vector<SampledToken> got = tpserve::Sample(row, vocab, vocab, std::span<SequenceSamplingState* const>(&state, 1));
    StepToken token{.seq_id = e.id, .sampled = std::move(got[0])};
    if (options_.keep_logits) token.logits.assign(row.begin(), row.end());
    tokens.push_back(std::move(token));
  }
  return tokens;
}

std::vector<StepToken> StepRunner::SampleSimulated(const std::vector<Entry>& entries) const {
  std::vector<StepToken> tokens;
  for (const Entry& e : entries) {
    if (!e.sample) continue;
    const int32_t id = SimulatedToken(e.id, e.num_computed + std::ssize(e.tokens), model_.config().vocab_size);
    tokens.push_back(StepToken{.seq_id = e.id, .sampled = {.token = id, .logprob = 0.0f, .top = {}}});
  }
  return tokens;
}

std::vector<StepToken> StepRunner::Sample(const std::vector<Entry>& entries, const std::optional<Logits>& logits) {
  if (options_.simulated_step > absl::ZeroDuration()) return SampleSimulated(entries);
  return logits ? SampleOnHost(entries, *logits) : SampleOnDevice(entries);
}

absl::Status StepRunner::ShareTokens(const std::vector<Entry>& entries, std::vector<StepToken>& tokens) {
  const size_t n = static_cast<size_t>(std::count_if(entries.begin(), entries.end(), [](const Entry& e) { return e.sample; }));
  if (rank_ == 0 && tokens.size() != n) {
    return absl::InternalError(absl::StrCat("step: rank 0 sampled ", tokens.size(), " tokens for ", n, " sequences"));
  }
  Communicator& comm = model_.comm();
  if (comm.world_size() > 1 && n > 0) {
    Backend& backend = model_.backend();
    if (shared_tokens_.empty()) {
      shared_tokens_ = backend.Allocate(DType::kF32, {std::max<int64_t>(1, model_.options().max_num_seqs)});
    }
    const Tensor staged = shared_tokens_.tensor().Rows(0, static_cast<int64_t>(n));
    shared_host_.resize(n);
    if (rank_ == 0) {
      for (size_t k = 0; k < n; ++k) shared_host_[k] = static_cast<float>(tokens[k].sampled.token);
      backend.CopyFromHost(shared_host_.data(), DType::kF32, staged);
    }
    TPSERVE_RETURN_IF_ERROR(comm.Broadcast(staged, 0));
    if (rank_ != 0) {
      backend.CopyToHostF32(staged, shared_host_.data());
      size_t k = 0;
      for (const Entry& e : entries) {
        if (e.sample) tokens.push_back(StepToken{.seq_id = e.id, .sampled = {.token = static_cast<int32_t>(shared_host_[k++])}});
      }
    }
  }
  size_t k = 0;
  for (const Entry& e : entries) {
    if (e.sample && k < tokens.size()) seqs_.at(e.id).next_input = tokens[k++].sampled.token;
  }
  return absl::OkStatus();
}

absl::Status StepRunner::Compute(const std::vector<Entry>& entries, std::optional<Logits>& logits) {
  if (options_.simulated_step > absl::ZeroDuration()) {
    if (!timer_slack_set_) {  // the default 50 us of slack would stretch every sleep
      prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
      timer_slack_set_ = true;
    }
    absl::SleepFor(options_.simulated_step);
    return absl::OkStatus();
  }
  std::vector<StepSequence> seqs;
  seqs.reserve(entries.size());
  for (const Entry& e : entries) seqs.push_back({e.tokens, e.num_computed, e.table});
  TPSERVE_RETURN_IF_ERROR(batch_.Assign(seqs, cache_.block_size()));
  TPSERVE_ASSIGN_OR_RETURN(logits, Forward(rank_ == 0 && options_.sampler != nullptr));
  return absl::OkStatus();
}

absl::StatusOr<std::vector<StepToken>> StepRunner::Run(const StepPlan& plan) {
  TPSERVE_RETURN_IF_ERROR(Reserve());
  TPSERVE_ASSIGN_OR_RETURN(const std::vector<Entry> entries, CheckPlan(plan));
  std::optional<Logits> logits;
  if (!entries.empty()) TPSERVE_RETURN_IF_ERROR(Compute(entries, logits));
  Commit(plan, entries);
  std::vector<StepToken> tokens;
  if (entries.empty()) return tokens;
  if (rank_ == 0) tokens = Sample(entries, logits);
  TPSERVE_RETURN_IF_ERROR(ShareTokens(entries, tokens));
  return tokens;
}

}  // namespace tpserve
