// StepRunner's constrained output on rank 0 (step_runner.h, "Constrained
// output"): each new constrained sequence's matcher, the step's masks filled
// on a thread of their own while the forward runs, the device masks, and the
// sampled tokens accepted into the matchers.
#include <algorithm>
#include <span>
#include <thread>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "sampling/token_mask.h"
#include "worker/step_runner.h"

namespace tpserve {
namespace {

// mask_on_'s value for a sequence whose deferred token the grammar refused,
// and for one whose grammar gave up on its mask (SequenceConstraint::status():
// it samples unmasked, and its token carries the error).
constexpr uint8_t kMaskRefusedToken = 2;
constexpr uint8_t kMaskGaveUp = 3;

template <typename... Parts>
absl::Status Invalid(uint64_t seq_id, const Parts&... parts) {
  return absl::InvalidArgumentError(absl::StrCat("step: sequence ", seq_id, ": ", parts...));
}

}  // namespace

int DefaultMaskThreads() {
  return std::clamp(static_cast<int>(std::thread::hardware_concurrency() / 4), 1, 4);
}

absl::Status StepRunner::PrepareConstraints(const StepPlan& plan) {
  pending_.clear();
  if (rank_ != 0) return absl::OkStatus();
  const int32_t vocab = model_.config().vocab_size;
  for (const NewSequencePlan& s : plan.new_sequences) {
    if (s.sampling.constraint == nullptr) continue;
    if (options_.constraints == nullptr) {
      return Invalid(s.seq_id, "is constrained (structured output or a required tool call) but this rank 0 has "
                               "no grammar engine (StepRunnerOptions::constraints); send it unconstrained");
    }
    absl::StatusOr<std::shared_ptr<const grammar::CompiledGrammar>> compiled =
        options_.constraints->Compile(*s.sampling.constraint);
    if (!compiled.ok()) return Invalid(s.seq_id, "its constraint: ", compiled.status().message());
    absl::StatusOr<std::shared_ptr<const grammar::Vocabulary>> words = options_.constraints->vocabulary();
    if (!words.ok()) return Invalid(s.seq_id, "its constraint: ", words.status().message());
    if ((*words)->size() != vocab) {
      return Invalid(s.seq_id, "its constraint's vocabulary has ", (*words)->size(), " ids but the model's logits ",
                     vocab, "; give the grammar engine the model's vocabulary (config.json vocab_size)");
    }
    absl::StatusOr<std::unique_ptr<SequenceConstraint>> made =
        SequenceConstraint::Create(*std::move(compiled), *std::move(words), *s.sampling.constraint, s.output);
    if (!made.ok()) return Invalid(s.seq_id, "its constraint: ", made.status().message());
    pending_[s.seq_id] = *std::move(made);
  }
  for (Entry& e : entries_) {
    if (e.added != nullptr) {
      const auto it = pending_.find(e.id);
      e.constraint = it == pending_.end() ? nullptr : it->second.get();
    } else {
      e.constraint = seqs_.at(e.id).constraint.get();
    }
  }
  return absl::OkStatus();
}

void StepRunner::StartMasks() {
  int32_t n = 0;
  for (Entry& e : entries_) e.mask = e.sample && e.constraint != nullptr ? n++ : -1;
  mask_jobs_.clear();
  next_mask_.store(0, std::memory_order_relaxed);
  if (n == 0) return;
  words_per_mask_ = TokenMaskWords(model_.config().vocab_size);
  if (mask_ranges_.size() < static_cast<size_t>(n)) {  // new rows come zeroed
    mask_words_.resize(static_cast<size_t>(n * words_per_mask_));
    mask_ranges_.resize(static_cast<size_t>(n));
  }
  mask_on_.assign(static_cast<size_t>(n), 0);
  mask_picks_.clear();
  mask_forced_.clear();
  const int32_t vocab = model_.config().vocab_size;
  const bool simulated = options_.simulated_step > absl::ZeroDuration();
  for (const Entry& e : entries_) {
    if (e.mask < 0) continue;
    mask_jobs_.push_back(e.constraint);
    mask_picks_.push_back(simulated ? SimulatedToken(e.id, e.num_computed + std::ssize(e.tokens), vocab) : -1);
    const SamplingParams& params = e.added != nullptr ? e.added->sampling : seqs_.at(e.id).sampling->params();
    // 0: FillMasks looks for a sole allowed token; -1: sampled whatever the mask.
    mask_forced_.push_back(options_.jump_forward && !simulated && ForcedTokenSamplesAlike(params) ? 0 : -1);
  }
  if (mask_tasks_.empty()) {
    const int threads = options_.mask_threads > 0 ? options_.mask_threads : DefaultMaskThreads();
    for (int t = 0; t < threads; ++t) {
      mask_tasks_.push_back(std::make_unique<BackgroundTask>(absl::StrCat("tpserve-mask-", t)));
    }
  }
  // The tasks read mask_jobs_ and write the rows they take (each row once,
  // next_mask_); this thread touches neither until the forward is done.
  const size_t tasks = std::min(mask_tasks_.size(), mask_jobs_.size());
  for (size_t t = 0; t < tasks; ++t) mask_tasks_[t]->Start([this, simulated, vocab] { FillMasks(simulated, vocab); });
}

void StepRunner::FillMasks(bool simulated, int32_t vocab) {
  for (size_t k; (k = next_mask_.fetch_add(1, std::memory_order_relaxed)) < mask_jobs_.size();) {
    FillMask(k, simulated, vocab);
  }
}

// The matcher first takes the token its last step sampled (AcceptTokens
// deferred it), then gives the next mask.
void StepRunner::FillMask(size_t k, bool simulated, int32_t vocab) {
  const std::span<uint32_t> words(mask_words_.data() + k * static_cast<size_t>(words_per_mask_),
                                  static_cast<size_t>(words_per_mask_));
  if (!mask_jobs_[k]->AcceptDeferred()) {
    mask_on_[k] = kMaskRefusedToken;
    return;
  }
  grammar::MaskRange& range = mask_ranges_[k];  // in: the row's dirty words; out: this mask's
  mask_on_[k] = mask_jobs_[k]->FillMask(words, range) ? 1 : mask_jobs_[k]->status().ok() ? 0 : kMaskGaveUp;
  const auto lo = static_cast<int64_t>(range.begin), hi = static_cast<int64_t>(range.end);
  if (mask_forced_[k] == 0) mask_forced_[k] = mask_on_[k] == 1 ? SoleAllowedToken(words, vocab, lo, hi) : -1;
  if (simulated && mask_on_[k] == 1) {  // SampleSimulated's pick, here rather than on the critical path
    mask_picks_[k] = std::max(NextAllowedToken(words, mask_picks_[k], vocab, lo, hi), 0);
  }
}

// The forward is done: this thread takes the masks no task has taken yet,
// and a task the scheduler has not run by then is dropped, not waited for
// (on a busy machine its wake-up can outlast the masks themselves).
absl::Status StepRunner::WaitMasks() {
  FillMasks(options_.simulated_step > absl::ZeroDuration(), model_.config().vocab_size);
  for (const std::unique_ptr<BackgroundTask>& task : mask_tasks_) {
    if (!task->CancelUnstarted()) task->Wait();  // at once when none was started
  }
  for (const Entry& e : entries_) {
    if (e.mask >= 0 && mask_on_[static_cast<size_t>(e.mask)] == kMaskRefusedToken) {
      return absl::InternalError(absl::StrCat("step: sequence ", e.id, ": the token its last step sampled is one its "
                                              "grammar's mask did not allow (a sampler bug)"));
    }
  }
  return absl::OkStatus();
}

std::span<const uint32_t> StepRunner::MaskOf(const Entry& e) const {
  if (e.mask < 0 || mask_on_[static_cast<size_t>(e.mask)] != 1) return {};
  return std::span<const uint32_t>(mask_words_.data() + static_cast<size_t>(e.mask * words_per_mask_),
                                   static_cast<size_t>(words_per_mask_));
}

int32_t StepRunner::ForcedOf(const Entry& e) const {
  return MaskOf(e).empty() ? -1 : mask_forced_[static_cast<size_t>(e.mask)];
}

// A forced row is masked too, though not sampled: then the masked rows are
// usually mask rows 0, 1, ... in order, and mask_words_ goes to the sampler
// as it is, not copied (64 masks of a 152k vocabulary are 1.2 MB); only a
// step with a sequence in its reasoning (no mask) gathers the others.
absl::Status StepRunner::MaskOnDevice() {
  std::vector<int32_t> rows;
  bool in_place = true;  // rows[k]'s mask is mask row k
  for (size_t s = 0; s < entries_.size(); ++s) {
    if (MaskOf(entries_[s]).empty()) continue;
    in_place = in_place && entries_[s].mask == std::ssize(rows);
    rows.push_back(static_cast<int32_t>(s));
  }
  if (rows.empty()) return absl::OkStatus();
  const int32_t vocab = model_.config().vocab_size;
  if (in_place) {
    const size_t n = rows.size() * static_cast<size_t>(words_per_mask_);
    return options_.sampler->MaskRows(model_.device_logits(), vocab, rows, std::span(mask_words_.data(), n));
  }
  std::vector<uint32_t> words;
  for (int32_t s : rows) {
    const std::span<const uint32_t> mask = MaskOf(entries_[static_cast<size_t>(s)]);
    words.insert(words.end(), mask.begin(), mask.end());
  }
  return options_.sampler->MaskRows(model_.device_logits(), vocab, rows, words);
}

void StepRunner::MarkGivenUpMasks(std::vector<StepToken>& tokens) const {
  for (const Entry& e : entries_) {
    if (e.mask < 0 || mask_on_[static_cast<size_t>(e.mask)] != kMaskGaveUp) continue;
    const std::string error(e.constraint->status().message());
    for (StepToken& t : tokens) {
      if (t.seq_id == e.id) t.error = error;
    }
  }
}

absl::Status StepRunner::AcceptTokens(const std::vector<StepToken>& tokens) {
  size_t k = 0;
  for (const Entry& e : entries_) {
    if (!e.sample || k >= tokens.size()) continue;
    const int32_t token = tokens[k++].sampled.token;
    if (e.constraint != nullptr) e.constraint->Defer(token);  // accepted on the mask thread (StartMasks)
  }
  return absl::OkStatus();
}

}  // namespace tpserve
