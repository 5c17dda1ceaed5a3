#include "worker/step_runner.h"

#include <sys/prctl.h>

#include <algorithm>
#include <span>

#include "absl/strings/str_cat.h"
#include "base/check.h"
#include "base/status_macros.h"
#include "sampling/token_mask.h"

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

StepRunner::StepRunner(Model& model, KvCache& cache, int rank, StepRunnerOptions options)
    : model_(model), cache_(cache), rank_(rank), options_(std::move(options)) {
  if (rank_ == 0 && options_.proposers.method != "off") {
    absl::StatusOr<speculative::ProposerSet> set = speculative::ProposerSet::Create(options_.proposers, options_.make_proposer);
    TPSERVE_CHECK(set.ok(), "StepRunner: ", set.status().message());  // the worker's Load checked the config
    proposers_.emplace(*std::move(set));
  }
}

absl::Status StepRunner::Reserve() {
  if (reserved_) return absl::OkStatus();
  TPSERVE_RETURN_IF_ERROR(model_.backend().Reserve(ReservedCapacityFor(model_, cache_.block_size())));
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
                                               StepCapacityFor(model_, cache_.block_size()),
                                               VerifyGraphProposals(model_, options_.num_speculative_tokens));
  TPSERVE_RETURN_IF_ERROR(graphs->Capture(rank_ == 0 ? options_.sampler : nullptr));
  graphs_ = std::move(graphs);
  return absl::OkStatus();
}

absl::Status StepRunner::CheckPlan(const StepPlan& plan) {
  const size_t scheduled = plan.new_sequences.size() + plan.continuing.size();
  if (plan.order.size() != scheduled) {
    return absl::InvalidArgumentError(absl::StrCat(
        "step: order lists ", plan.order.size(), " sequences but the step schedules ", scheduled,
        " (new + continuing); list every scheduled sequence once"));
  }
  auto known = [&](uint64_t id) {
    return seqs_.contains(id) && std::find(plan.finished.begin(), plan.finished.end(), id) == plan.finished.end();
  };
  for (const NewSequencePlan& s : plan.new_sequences) {
    if (known(s.seq_id)) {
      return Invalid(s.seq_id, "sent as new but the worker already holds it; send it in "
                               "`continuing`, or in `finished` first to restart it");
    }
  }
  for (const ContinuingSequencePlan& s : plan.continuing) {
    if (!known(s.seq_id)) {
      return Invalid(s.seq_id, seqs_.contains(s.seq_id) ? "is continuing and finished in the same step"
                                                        : "is continuing but the worker does not hold it; "
                                                          "send it as a new sequence");
    }
    if (s.num_draft_slots > 0 && (!s.decode_sampled || !s.sample)) {
      return Invalid(s.seq_id, "has num_draft_slots without decode_sampled and sample; proposals follow "
                               "the token its last step sampled");
    }
    const Sequence& held = seqs_.at(s.seq_id);
    if (s.keep_blocks >= 0 && (s.keep_blocks > std::ssize(held.block_table) ||
                               s.keep_blocks * cache_.block_size() < held.num_computed)) {
      return Invalid(s.seq_id, "keep_blocks ", s.keep_blocks, " must lie within its ", held.block_table.size(),
                     " blocks and keep its ", held.num_computed, " computed positions");
    }
    const int32_t next_input = held.next_input;
    if (s.decode_sampled && (next_input < 0 || !s.token_ids.empty())) {
      return Invalid(s.seq_id, next_input < 0 ? "is decode_sampled but its last step sampled no token; "
                                                "send its token in token_ids"
                                              : "is decode_sampled and carries token_ids; send one or the other");
    }
  }
  TPSERVE_RETURN_IF_ERROR(FillEntries(plan));
  num_drafts_ = 0;
  num_proposals_ = 0;
  const int32_t max_proposals = std::max(options_.proposers.num_speculative_tokens, 0);
  for (Entry& e : entries_) {  // entries_ no longer moves: point at each input
    if (e.num_proposals > max_proposals) {
      return Invalid(e.id, "asks num_proposals ", e.num_proposals, " but Load's num_speculative_tokens is ",
                     max_proposals, "; ask at most that many");
    }
    if (e.sample) num_proposals_ += e.num_proposals;
    if (e.input >= 0) e.tokens = std::span<const int32_t>(&e.input, 1);
    if (!e.drafts.empty()) {  // its input, then the proposals: one logits row each
      e.verified.assign(e.tokens.begin(), e.tokens.end());
      e.verified.insert(e.verified.end(), e.drafts.begin(), e.drafts.end());
      e.tokens = e.verified;
      num_drafts_ += std::ssize(e.drafts);
    }
    TPSERVE_RETURN_IF_ERROR(CheckEntry(e));
  }
  TPSERVE_RETURN_IF_ERROR(CheckCopies(plan));
  TPSERVE_RETURN_IF_ERROR(CheckLimits());
  return PrepareConstraints(plan);  // rank 0's grammars (step_runner_masks.cc)
}

absl::Status StepRunner::CheckCopies(const StepPlan& plan) const {
  const int64_t num_blocks = cache_.num_blocks();
  auto in_cache = [&](int32_t b) { return b >= 0 && b < num_blocks; };
  for (const BlockCopyPlan& c : plan.block_copies) {
    if (!in_cache(c.src) || !in_cache(c.dst) || c.src == c.dst) {
      return absl::InvalidArgumentError(absl::StrCat(
          "step: block copy ", c.src, " -> ", c.dst, " must name two different blocks in [0, ", num_blocks, ")"));
    }
  }
  for (const ContinuingSequencePlan& s : plan.continuing) {
    const int64_t held = s.keep_blocks >= 0 ? s.keep_blocks : std::ssize(seqs_.at(s.seq_id).block_table);
    for (const BlockReplacement& r : s.replaced_blocks) {
      if (r.index < 0 || r.index >= held || !in_cache(r.block_id)) {
        return Invalid(s.seq_id, "replaced block entry ", r.index, " -> ", r.block_id, " must name one of its ", held,
                       " table entries and a block in [0, ", num_blocks, ")");
      }
    }
  }
  return absl::OkStatus();
}

absl::Status StepRunner::FillEntries(const StepPlan& plan) {
  entries_.clear();
  index_.clear();
  for (uint64_t id : plan.order) {
    if (!index_.emplace(id, static_cast<int32_t>(entries_.size())).second) return Invalid(id, "appears twice in order");
    entries_.push_back(Entry{.id = id});
  }
  // The entry of `id` in order; nullptr when order does not list it or it was filled already.
  auto slot = [&](uint64_t id) -> Entry* {
    const auto it = index_.find(id);
    if (it == index_.end()) return nullptr;
    Entry& e = entries_[static_cast<size_t>(it->second)];
    return e.added == nullptr && e.cont == nullptr ? &e : nullptr;
  };
  for (const NewSequencePlan& s : plan.new_sequences) {
    Entry* e = slot(s.seq_id);
    if (e == nullptr) return Invalid(s.seq_id, "is new but not in order, or appears twice");
    *e = Entry{.id = s.seq_id, .added = &s, .tokens = s.token_ids, .table = s.block_ids,
               .num_computed = s.num_computed_tokens, .sample = s.sample, .num_proposals = s.num_proposals};
  }
  for (const ContinuingSequencePlan& s : plan.continuing) {
    const Sequence& held = seqs_.at(s.seq_id);
    Entry* e = slot(s.seq_id);
    if (e == nullptr) return Invalid(s.seq_id, "is continuing but not in order, or is both new and continuing");
    // Draft slots take the proposals rank 0 made when its last step sampled it (fewer, or none).
    const size_t p = s.decode_sampled ? std::min(held.drafts.size(), static_cast<size_t>(std::max(s.num_draft_slots, 0))) : 0;
    *e = Entry{.id = s.seq_id, .cont = &s, .tokens = s.token_ids,
               .table_before = s.keep_blocks >= 0 ? s.keep_blocks : std::ssize(held.block_table),
               .num_computed = held.num_computed,
               .sample = s.sample, .input = s.decode_sampled ? held.next_input : -1,
               .slots = s.num_draft_slots, .drafts = {held.drafts.begin(), held.drafts.begin() + static_cast<ptrdiff_t>(p)},
               .num_proposals = s.num_proposals};
  }
  return absl::OkStatus();
}

absl::Status StepRunner::CheckEntry(const Entry& e) const {
  const int32_t vocab = model_.config().vocab_size, bs = cache_.block_size();
  const int64_t n = std::ssize(e.tokens), num_blocks = cache_.num_blocks();
  if (e.added == nullptr && e.cont == nullptr) return Invalid(e.id, "is in order but neither new nor continuing");
  if (n == 0) return Invalid(e.id, "has no tokens to compute; every scheduled sequence needs at least one");
  for (int32_t t : e.tokens) {
    if (t < 0 || t >= vocab) return Invalid(e.id, "token id ", t, " is outside the vocabulary [0, ", vocab, ")");
  }
  if (e.added != nullptr) TPSERVE_RETURN_IF_ERROR(CheckNewSequence(*e.added));
  const int64_t seq_len = e.num_computed + n;
  if (seq_len > model_.max_position()) {
    return Invalid(e.id, "reaches ", seq_len, " tokens, beyond the model's ", model_.max_position(), " positions");
  }
  // The blocks it learns of now; those held were checked when they came.
  const std::span<const int32_t> added = e.added != nullptr ? e.table : std::span<const int32_t>(e.cont->new_block_ids);
  const int64_t table_size = e.table_before + std::ssize(added);
  if (seq_len > table_size * bs) {
    return Invalid(e.id, "has ", seq_len, " tokens after this step but its ", table_size, " blocks of ", bs,
                   " tokens hold only ", table_size * bs, "; send the missing block ids");
  }
  for (int32_t b : added) {
    if (b < 0 || b >= num_blocks) {
      return Invalid(e.id, "block id ", b, " is outside the KV cache's [0, ", num_blocks, ") blocks");
    }
  }
  return absl::OkStatus();
}

void StepRunner::StageBlocks() {
  for (Entry& e : entries_) {
    if (e.cont == nullptr) continue;
    std::vector<int32_t>& table = seqs_.at(e.id).block_table;
    e.cut.assign(table.begin() + e.table_before, table.end());  // keep_blocks: its freed slots' blocks
    table.resize(static_cast<size_t>(e.table_before));
    for (const BlockReplacement& r : e.cont->replaced_blocks) {
      int32_t& entry = table[static_cast<size_t>(r.index)];
      e.replaced_before.push_back(entry);
      entry = r.block_id;
    }
    table.insert(table.end(), e.cont->new_block_ids.begin(), e.cont->new_block_ids.end());
    e.table = table;
  }
}

void StepRunner::UnstageBlocks() {
  for (const Entry& e : entries_) {
    if (e.cont == nullptr) continue;
    std::vector<int32_t>& table = seqs_.at(e.id).block_table;
    table.resize(static_cast<size_t>(e.table_before));
    for (size_t i = e.replaced_before.size(); i-- > 0;) {
      table[static_cast<size_t>(e.cont->replaced_blocks[i].index)] = e.replaced_before[i];
    }
    table.insert(table.end(), e.cut.begin(), e.cut.end());
  }
}

absl::Status StepRunner::CheckLimits() const {
  int64_t total_tokens = 0;
  for (const Entry& e : entries_) total_tokens += std::ssize(e.tokens);
  const int64_t num_seqs = std::ssize(entries_);
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
  if (rank_ == 0 && (!logits || logits->num_seqs != step.num_logits_rows())) {
    return absl::InternalError(absl::StrCat("step: rank 0 got ", logits ? logits->num_seqs : 0,
                                            " logits rows for ", step.num_logits_rows(), " rows of ",
                                            step.num_seqs(), " sequences"));
  }
  return logits;
}

void StepRunner::Commit(const StepPlan& plan) {
  AddProposers(plan);  // rank 0: drops first (their outputs), then the new speculating sequences
  for (uint64_t id : plan.finished) seqs_.erase(id);
  for (const Entry& e : entries_) {
    const int64_t n = std::ssize(e.tokens);
    if (e.added == nullptr) {  // its new blocks are in its table already (StageBlocks)
      Sequence& seq = seqs_.at(e.id);
      seq.num_computed += n;
      seq.next_input = -1;  // consumed; ShareTokens sets the next one
      continue;
    }
    const NewSequencePlan& s = *e.added;
    Sequence seq;
    seq.block_table.assign(e.table.begin(), e.table.end());
    seq.num_computed = e.num_computed + n;
    seq.prompt_logprobs = s.sampling.prompt_logprobs;
    if (seq.prompt_logprobs >= 0) seq.prompt = s.prompt;
    if (rank_ == 0) {
      seq.sampling = std::make_unique<SequenceSamplingState>(s.sampling, s.prompt, s.output);
      // The RNG draws once per sampled token: after a preemption it resumes
      // where the first run stopped, so a seeded request gives the same tokens.
      for (size_t i = 0; i < s.output.size(); ++i) seq.sampling->NextUniform();
      if (auto it = pending_.find(e.id); it != pending_.end()) seq.constraint = std::move(it->second);
      if (proposers_ && s.speculate && proposers_->suffix_cache() != nullptr) seq.output = s.output;
    }
    seqs_[e.id] = std::move(seq);
  }
}

std::vector<StepToken> StepRunner::SampleOnDevice(const std::vector<Entry>& entries) {
  std::vector<SequenceSamplingState*> states(entries.size(), nullptr);  // nullptr: not sampled
  bool any = false;
  for (size_t s = 0; s < entries.size(); ++s) {
    if (!entries[s].sample || ForcedOf(entries[s]) >= 0) continue;  // a forced token: below, not on the device
    states[s] = seqs_.at(entries[s].id).sampling.get();
    any = true;
  }
  std::vector<SampledToken> got;
  if (any) got = options_.sampler->Sample(model_.device_logits(), model_.config().vocab_size, states);
  std::vector<StepToken> tokens;
  for (size_t s = 0; s < entries.size(); ++s) {
    if (const int32_t forced = ForcedOf(entries[s]); entries[s].sample && forced >= 0) {
      tokens.push_back(StepToken{.seq_id = entries[s].id,
                                 .sampled = TakeForcedToken(*seqs_.at(entries[s].id).sampling, forced)});
      ++forced_tokens_;
    } else if (states[s] != nullptr) {
      tokens.push_back(StepToken{.seq_id = entries[s].id, .sampled = std::move(got[s])});
    }
  }
  return tokens;
}

void StepRunner::SampleVerified(const Entry& e, const Logits& logits, int64_t row, std::vector<StepToken>& tokens) {
  SequenceSamplingState* state = seqs_.at(e.id).sampling.get();
  for (size_t i = 0; i <= e.drafts.size(); ++i) {
    const std::span<const float> values = logits.row(row + static_cast<int64_t>(i));
    std::vector<SampledToken> got = tpserve::Sample(values, logits.vocab_size, logits.vocab_size,
                                                    std::span<SequenceSamplingState* const>(&state, 1));
    const int32_t token = got[0].token;
    StepToken out{.seq_id = e.id, .sampled = std::move(got[0])};
    if (i == 0) out.num_proposed = static_cast<int32_t>(e.drafts.size());
    if (options_.keep_logits) out.logits.assign(values.begin(), values.end());
    tokens.push_back(std::move(out));
    if (i == e.drafts.size() || token != e.drafts[i]) break;  // a correction, or the bonus token
  }
}

std::vector<StepToken> StepRunner::SampleOnHost(const std::vector<Entry>& entries, const Logits& logits) {
  const int64_t vocab = logits.vocab_size;
  std::vector<StepToken> tokens;
  int64_t next_row = 0;  // each entry's first logits row: one, or 1 + k verifying drafts
  for (size_t s = 0; s < entries.size(); ++s) {
    const Entry& e = entries[s];
    const int64_t first_row = next_row;
    next_row += 1 + std::ssize(e.drafts);
    if (!e.sample) continue;
    if (!e.drafts.empty()) {  // no constraint: only free sequences speculate
      SampleVerified(e, logits, first_row, tokens);
      continue;
    }
    SequenceSamplingState* state = seqs_.at(e.id).sampling.get();
    const std::span<const float> row = logits.row(first_row);
    if (const int32_t forced = ForcedOf(e); forced >= 0) {  // jump-forward: what sampling the masked row gives
      StepToken token{.seq_id = e.id, .sampled = TakeForcedToken(*state, forced)};
      if (options_.keep_logits) token.logits.assign(row.begin(), row.end());
      tokens.push_back(std::move(token));
      ++forced_tokens_;
      continue;
    }
    std::span<const float> to_sample = row;
    if (const std::span<const uint32_t> mask = MaskOf(e); !mask.empty()) {  // one pass, not a copy and a mask
      const grammar::MaskRange& range = mask_ranges_[static_cast<size_t>(e.mask)];
      CopyMaskedRow(mask, static_cast<int64_t>(range.begin), static_cast<int64_t>(range.end), row, masked_row_);
      to_sample = masked_row_;
    }
    std::vector<SampledToken> got =
        tpserve::Sample(to_sample, vocab, vocab, std::span<SequenceSamplingState* const>(&state, 1));
    StepToken token{.seq_id = e.id, .sampled = std::move(got[0])};
    if (options_.keep_logits) token.logits.assign(row.begin(), row.end());
    tokens.push_back(std::move(token));
  }
  return tokens;
}

std::vector<StepToken> StepRunner::SampleSimulated(const std::vector<Entry>& entries) const {
  std::vector<StepToken> tokens;
  const int32_t vocab = model_.config().vocab_size;
  for (const Entry& e : entries) {
    if (!e.sample) continue;
    // The token after each row: after its input, then after each proposal kept.
    const int64_t first = e.num_computed + std::ssize(e.tokens) - std::ssize(e.drafts);
    for (size_t i = 0; i <= e.drafts.size(); ++i) {
      int32_t id = SimulatedToken(e.id, first + static_cast<int64_t>(i), vocab);
      if (!MaskOf(e).empty()) id = mask_picks_[static_cast<size_t>(e.mask)];  // the next allowed id (StartMasks)
      tokens.push_back(StepToken{.seq_id = e.id, .sampled = {.token = id, .logprob = 0.0f, .top = {}}});
      if (i == 0) tokens.back().num_proposed = static_cast<int32_t>(e.drafts.size());
      if (i == e.drafts.size() || id != e.drafts[i]) break;
    }
  }
  return tokens;
}

std::vector<StepToken> StepRunner::Sample(const std::vector<Entry>& entries, const std::optional<Logits>& logits) {
  if (options_.simulated_step > absl::ZeroDuration()) return SampleSimulated(entries);
  return logits ? SampleOnHost(entries, *logits) : SampleOnDevice(entries);
}

absl::Status StepRunner::ShareTokens(std::vector<Entry>& entries, std::vector<StepToken>& tokens) {
  if (rank_ == 0) Propose(entries, tokens);
  if (shares_counts()) {
    TPSERVE_RETURN_IF_ERROR(ShareVerified(entries, tokens));
    KeepAccepted(entries, tokens);
    return absl::OkStatus();
  }
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
  KeepAccepted(entries, tokens);
  return absl::OkStatus();
}

void StepRunner::Propose(std::vector<Entry>& entries, const std::vector<StepToken>& tokens) {
  if (!proposers_) return;
  size_t k = 0;
  for (Entry& e : entries) {
    if (!e.sample) continue;
    const size_t begin = k;
    while (k < tokens.size() && tokens[k].seq_id == e.id) ++k;
    if (k == begin || !proposers_->contains(e.id)) continue;
    run_.clear();
    for (size_t i = begin; i < k; ++i) run_.push_back(tokens[i].sampled.token);
    proposers_->Append(e.id, run_);
    if (proposers_->suffix_cache() != nullptr) {
      std::vector<int32_t>& output = seqs_.at(e.id).output;
      output.insert(output.end(), run_.begin(), run_.end());
    }
    if (e.num_proposals <= 0) continue;
    e.proposed.assign(static_cast<size_t>(e.num_proposals), 0);
    e.proposed.resize(static_cast<size_t>(std::max(proposers_->Propose(e.id, e.proposed), 0)));
  }
}

void StepRunner::AddProposers(const StepPlan& plan) {
  if (!proposers_) return;
  for (uint64_t id : plan.finished) {
    const auto it = seqs_.find(id);
    const bool back = std::find(plan.preempted.begin(), plan.preempted.end(), id) != plan.preempted.end();
    proposers_->Remove(id, it == seqs_.end() || back ? std::span<const int32_t>() : it->second.output);
  }
  for (const NewSequencePlan& s : plan.new_sequences) {
    if (!s.speculate) continue;
    proposers_->Add(s.seq_id);
    proposers_->Append(s.seq_id, s.prompt);
    proposers_->Append(s.seq_id, s.output);
  }
}

absl::Status StepRunner::ShareVerified(std::vector<Entry>& entries, std::vector<StepToken>& tokens) {
  // Slots per sampled entry: how many tokens it got and room for 1 + p, then
  // how many proposals it made and room for num_proposals.
  auto slots_of = [](const Entry& e) { return 3 + std::ssize(e.drafts) + e.num_proposals; };
  int64_t slots = 0;
  for (const Entry& e : entries) {
    if (e.sample) slots += slots_of(e);
  }
  Communicator& comm = model_.comm();
  if (comm.world_size() == 1) return absl::OkStatus();
  Backend& backend = model_.backend();
  const ModelOptions& o = model_.options();
  const int64_t max_seqs = std::max<int64_t>(1, o.max_num_seqs);
  const int64_t capacity = (3 + std::max(options_.proposers.num_speculative_tokens, 0)) * max_seqs +
                           std::max<int64_t>(1, o.max_num_tokens);
  if (shared_verified_.empty()) shared_verified_ = backend.Allocate(DType::kF32, {capacity});
  if (slots > capacity) {
    return absl::InternalError(absl::StrCat("step: ", slots, " token slots to share, room for ", capacity));
  }
  const Tensor staged = shared_verified_.tensor().Rows(0, slots);
  shared_host_.assign(static_cast<size_t>(slots), 0.0f);
  if (rank_ == 0) {
    size_t at = 0, k = 0;
    for (const Entry& e : entries) {
      if (!e.sample) continue;
      const size_t begin = k;
      while (k < tokens.size() && tokens[k].seq_id == e.id) ++k;
      shared_host_[at] = static_cast<float>(k - begin);
      for (size_t i = begin; i < k; ++i) shared_host_[at + 1 + i - begin] = static_cast<float>(tokens[i].sampled.token);
      const size_t made = at + 2 + e.drafts.size();  // the proposals' count, then the proposals
      shared_host_[made] = static_cast<float>(e.proposed.size());
      for (size_t i = 0; i < e.proposed.size(); ++i) shared_host_[made + 1 + i] = static_cast<float>(e.proposed[i]);
      at += static_cast<size_t>(slots_of(e));
    }
    backend.CopyFromHost(shared_host_.data(), DType::kF32, staged);
  }
  TPSERVE_RETURN_IF_ERROR(comm.Broadcast(staged, 0));
  if (rank_ != 0) {
    backend.CopyToHostF32(staged, shared_host_.data());
    size_t at = 0;
    for (Entry& e : entries) {
      if (!e.sample) continue;
      const auto got = static_cast<size_t>(shared_host_[at]);
      for (size_t i = 0; i < got; ++i) {
        tokens.push_back(StepToken{.seq_id = e.id, .sampled = {.token = static_cast<int32_t>(shared_host_[at + 1 + i])}});
      }
      const size_t made = at + 2 + e.drafts.size();
      e.proposed.resize(static_cast<size_t>(shared_host_[made]));
      for (size_t i = 0; i < e.proposed.size(); ++i) e.proposed[i] = static_cast<int32_t>(shared_host_[made + 1 + i]);
      at += static_cast<size_t>(slots_of(e));
    }
  }
  return absl::OkStatus();
}

void StepRunner::KeepAccepted(std::vector<Entry>& entries, const std::vector<StepToken>& tokens) {
  size_t k = 0;
  for (Entry& e : entries) {
    if (!e.sample) continue;
    const size_t begin = k;
    while (k < tokens.size() && tokens[k].seq_id == e.id) ++k;
    if (k == begin) continue;  // rank 0 failed to sample: reported already
    Sequence& seq = seqs_.at(e.id);
    seq.next_input = tokens[k - 1].sampled.token;
    seq.drafts = std::move(e.proposed);  // for its next step's draft slots (none when none were asked)
    e.proposed.clear();
    if (e.slots <= 0) continue;
    // Its input and the accepted proposals are computed; the rejected ones'
    // K/V stays unread in slots the next steps write again. The blocks past
    // the accepted positions stay in its table: the coordinator may have
    // planned its next step on them already, and frees them (keep_blocks)
    // once its result says no step in flight needs them.
    seq.num_computed = e.num_computed + static_cast<int64_t>(k - begin);
  }
}

absl::Status StepRunner::ScorePrompts() {
  prompt_logprobs_.clear();
  prompt_rows_.clear();
  if (options_.simulated_step > absl::ZeroDuration()) return absl::OkStatus();  // no forward, no rows
  int64_t row = 0;  // the entry's first new-token row in the step
  for (const Entry& e : entries_) {
    const Sequence& seq = seqs_.at(e.id);
    const int64_t n = std::ssize(e.tokens);
    if (seq.prompt_logprobs >= 0 && e.num_computed + 1 < std::ssize(seq.prompt)) {
      prompt_rows_.push_back(RowsOfChunk(e.id, seq.prompt, e.num_computed, n, row, seq.prompt_logprobs));
    }
    row += n;
  }
  if (prompt_rows_.empty()) return absl::OkStatus();
  TPSERVE_ASSIGN_OR_RETURN(prompt_logprobs_, ScorePromptRows(model_, prompt_rows_));
  return absl::OkStatus();
}

absl::Status StepRunner::Compute(std::optional<Logits>& logits) {
  if (options_.simulated_step > absl::ZeroDuration()) {
    if (!timer_slack_set_) {  // the default 50 us of slack would stretch every sleep
      prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
      timer_slack_set_ = true;
    }
    absl::SleepFor(options_.simulated_step);
    return absl::OkStatus();
  }
  step_seqs_.clear();
  for (const Entry& e : entries_) {
    step_seqs_.push_back({e.tokens, e.num_computed, e.table, 1 + static_cast<int32_t>(e.drafts.size())});
  }
  TPSERVE_RETURN_IF_ERROR(batch_.Assign(step_seqs_, cache_.block_size()));
  // A step that verifies drafts samples on the host, row after row (SampleVerified).
  TPSERVE_ASSIGN_OR_RETURN(logits, Forward(rank_ == 0 && options_.sampler != nullptr && !verifies()));
  return absl::OkStatus();
}

absl::StatusOr<std::vector<StepToken>> StepRunner::Run(const StepPlan& plan) {
  TPSERVE_RETURN_IF_ERROR(Reserve());
  TPSERVE_RETURN_IF_ERROR(CheckPlan(plan));
  std::optional<Logits> logits;
  absl::Status masks = absl::OkStatus();
  // Copy-on-write before the forward writes any of the copies.
  for (const BlockCopyPlan& c : plan.block_copies) cache_.CopyBlock(model_.backend(), c.src, c.dst);
  if (!entries_.empty()) {
    StageBlocks();
    StartMasks();  // rank 0's grammar masks, while the forward runs
    absl::Status computed = Compute(logits);
    masks = WaitMasks();  // reported after the tokens are shared, so that no rank waits for rank 0
    if (!computed.ok()) {
      UnstageBlocks();  // a failed forward leaves the state as it was
      return computed;
    }
  }
  Commit(plan);
  std::vector<StepToken> tokens;
  prompt_logprobs_.clear();
  if (entries_.empty()) return tokens;
  absl::Status masked = absl::OkStatus();
  if (rank_ == 0 && !logits && options_.simulated_step <= absl::ZeroDuration()) masked = MaskOnDevice();
  if (rank_ == 0 && masked.ok()) {
    tokens = Sample(entries_, logits);
    if (!mask_jobs_.empty()) MarkGivenUpMasks(tokens);
  }
  TPSERVE_RETURN_IF_ERROR(ShareTokens(entries_, tokens));
  TPSERVE_RETURN_IF_ERROR(ScorePrompts());
  TPSERVE_RETURN_IF_ERROR(masked);
  TPSERVE_RETURN_IF_ERROR(masks);
  if (rank_ == 0) TPSERVE_RETURN_IF_ERROR(AcceptTokens(tokens));  // deferred to the matchers' next mask
  return tokens;
}

}  // namespace tpserve
