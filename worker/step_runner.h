// StepRunner: the worker's side of the coordinator's steps (docs/architecture.md).
//
// The coordinator owns scheduling and block allocation; every rank keeps the
// per-sequence state a step needs (block table, tokens already in the KV cache,
// and on rank 0 the sampling state) and applies each step as a diff:
//
//   1. drop `finished` (finished, aborted or preempted sequences), then make
//      `block_copies` (copy-on-write of blocks sequences shared: device
//      copies before the forward, KvCache::CopyBlock);
//   2. add `new_sequences` (first scheduled, or recomputed after a preemption:
//      prompt + output so far, of which num_computed_tokens are already cached,
//      e.g. a prefix-cache hit), and append `new_block_ids` of `continuing` ones
//      (and point the entries in their `replaced_blocks` at the copies);
//   3. run one forward over the tokens to compute of every sequence in `order`;
//   4. on rank 0, sample one token for every sequence with sample = true
//      (a constrained one, SamplingParams::constraint, among the tokens its
//      grammar allows: the masks are computed on a thread of their own while
//      the forward runs, see "Constrained output" below);
//      rank 0 broadcasts the sampled ids (Communicator::Broadcast) and every
//      rank keeps each one as its sequence's next input: a later
//      `decode_sampled` step computes it without the plan carrying it, so the
//      coordinator can send that step before it has the token;
//   5. for the sequences that asked for prompt log-probs, score the prompt
//      positions this step's tokens give (every rank: the LM head over those
//      rows in bounded passes, worker/prompt_logprobs.h); rank 0 keeps them
//      for prompt_logprobs().
//
// Speculative decoding: rank 0 holds a proposer for each sequence sent with
// speculate (options.proposers: prompt lookup or suffix decoding, one
// ProposerSet with the suffix cache), fed its prompt and output when it
// arrives and every token sampled for it; dropped with `finished` (its output
// joins the suffix cache unless it was `preempted`). When a step samples such
// a sequence and its plan asks num_proposals, rank 0 proposes up to that many
// tokens to follow, and every rank holds them (shared with the sampled
// tokens: ShareVerified) for the sequence's next step. A continuing
// decode_sampled sequence with num_draft_slots computes its input and the
// first p <= slots of those proposals (a multi-token sequence of the prefill
// group) with p + 1 logits rows; rank 0 samples them on the host row by row
// with the sequence's own sampling state (SampleVerified: a proposal is kept
// while it equals the token sampled at the row before it), every rank learns
// how many tokens each such sequence got (ShareVerified) and keeps the
// accepted positions computed (KeepAccepted), as the coordinator's
// Scheduler::OnStepDone does; the blocks the slots held past them stay in its
// table (the coordinator may have planned the next step on them already)
// until a plan's keep_blocks cuts it.
//
// Step layout (backend/step_batch.h): sequences in `order`; those up to and including
// the last one with more than one token to compute form the prefill group, the
// rest are one-token decodes. Any order therefore gives a valid step; the
// coordinator lists multi-token sequences first (worker.proto).
//
// The LM head produces one logits row per sequence (StepMetadata wants one
// logits index per sequence), so a non-final prefill chunk (sample = false)
// still gets a row: it is computed and ignored.
//
// Constrained output (rank 0, with StepRunnerOptions::constraints): a new
// sequence with a constraint gets its SequenceConstraint when the plan is
// checked (compiled, or from the cache; after a preemption replayed over the
// output so far, so a recompute continues where the first run stopped; a
// constraint that does not compile, or output it refuses, is INVALID_ARGUMENT
// like any bad plan). Each step then fills the masks of its sampled
// constrained sequences on BackgroundTasks while this thread runs the
// forward (and then takes those no task has begun), applies them to the
// logits (host: CopyMaskedRow, the masked row in one pass; device:
// DeviceSampler::MaskRows), samples, and Accepts each token into
// its matcher. The coordinator needs nothing of this: a grammar that is
// complete allows its stop ids and, terminated, only them, so the output ends
// with EOS like any other, and the overlapped pipeline (decode_sampled) stays
// as it is.
//
// A plan is checked completely before anything changes: a bad plan is
// INVALID_ARGUMENT naming the sequence and field, and leaves the state as it
// was, so the worker can report it and go on. A failed forward (a collective)
// is returned as it came, also without changing the state.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "backend/step_batch.h"
#include "constrained/constraint_compiler.h"
#include "constrained/sequence_constraint.h"
#include "worker/background_task.h"
#include "worker/decode_graphs.h"
#include "sampling/device_sampler.h"
#include "worker/kv_cache.h"
#include "worker/model.h"
#include "worker/prompt_logprobs.h"
#include "sampling/sampler.h"
#include "scheduler/step_plan.h"
#include "speculative/proposer_set.h"

namespace tpserve {

struct StepRunnerOptions {
  // Never run decode steps as CUDA graphs (--enforce-eager).
  bool enforce_eager = false;
  // Rank 0: sample on the device from the model's device_logits() (the CUDA
  // backend's CudaSampler) instead of copying [S, V] logits to the host for
  // tpserve::Sample. Same tokens for the same seeds (sampling/device_sampler.h).
  // Not owned; must outlive the runner. nullptr: host sampling.
  DeviceSampler* sampler = nullptr;
  // Rank 0, host sampling only: every StepToken carries the logits row it was
  // sampled from (tests and --logits of tpserve-generate).
  bool keep_logits = false;
  // Benchmarks only (worker.proto Load.simulated_step_us): > 0 replaces each
  // forward by a sleep this long, a stand-in for a GPU that costs no CPU, and
  // rank 0 "samples" SimulatedToken instead of running the sampler. Sampled
  // ids are still broadcast, so everything but the model runs.
  absl::Duration simulated_step = absl::ZeroDuration();
  // Rank 0: compiles the constraints of constrained sequences (against this
  // model's vocabulary). Not owned; must outlive the runner. nullptr: a
  // constrained sequence is INVALID_ARGUMENT.
  ConstraintCompiler* constraints = nullptr;
  // Rank 0: threads that fill a step's grammar masks while the forward runs,
  // each taking the step's next constrained sequence not taken yet (a
  // sequence's matcher is on one thread within a step; the compiled grammars
  // and their caches are shared and thread-safe); the step's own thread takes
  // those left once the forward is done. 0: DefaultMaskThreads().
  int mask_threads = 0;
  // Rank 0, jump-forward: a constrained sequence whose mask allows exactly
  // one token gets it without the sampler's pass over its row (nor its row
  // masked on the device), its RNG advanced as sampling would; so the same
  // tokens as sampling it (docs/architecture.md, "Constrained output").
  // Not for a sequence with log-probs or token-level controls
  // (ForcedTokenSamplesAlike). false: every token sampled (tests).
  bool jump_forward = true;
  // Speculative decoding: the most proposals one sequence carries in a step
  // (worker.proto Load.num_speculative_tokens, the coordinator's k). WarmUp
  // captures verification graphs for k up to it (VerifyGraphProposals);
  // 0: up to the model's extra logits rows.
  int32_t num_speculative_tokens = 0;
  // Rank 0: the proposers of speculating sequences (NewSequencePlan::speculate),
  // method "off": none (a plan's num_proposals then gets no proposals).
  // Checked by the worker's Load (speculative::ValidateProposerConfig).
  speculative::ProposerConfig proposers{.method = "off", .num_speculative_tokens = 0};
  // Tests: each speculating sequence's proposer (speculative::ProposerSet::Create),
  // for proposals they choose; proposers' method (not "off") and k still apply.
  speculative::ProposerFactory make_proposer;
};

// One mask thread per 4 cores of this machine, 1 to 4: a 2-core CPU worker
// keeps its cores for the forward, a GPU host's idle cores fill the masks of
// a large constrained batch within a fast step.
int DefaultMaskThreads();

// The token a simulated step (StepRunnerOptions::simulated_step) gives the
// sequence at `position`: a hash, in [0, vocab_size).
int32_t SimulatedToken(uint64_t seq_id, int64_t position, int32_t vocab_size);

class StepRunner {
 public:
  // `model` and `cache` must outlive the runner. `rank` 0 samples.
  StepRunner(Model& model, KvCache& cache, int rank, StepRunnerOptions options = {});

  // Sizes the backend's step buffers for the model and cache once
  // (Backend::Reserve) and, unless enforce_eager or the backend or
  // communicator cannot capture, captures the decode graphs
  // (worker/decode_graphs.h). Every rank calls it together (the worker's
  // WarmUp command). Run reserves by itself when WarmUp was not called, and
  // then runs eagerly. RESOURCE_EXHAUSTED / INTERNAL from Reserve or a capture.
  absl::Status WarmUp();
  // Whether decode steps run as graphs (after a successful WarmUp).
  bool uses_graphs() const { return graphs_ != nullptr && graphs_->captured(); }
  // Steps that ran as a graph so far.
  int64_t graph_replays() const { return graphs_ ? graphs_->replays() : 0; }
  // Of those, verification steps (up to 8 sequences with proposals, worker/decode_graphs.h).
  int64_t verify_graph_replays() const { return graphs_ ? graphs_->verify_replays() : 0; }
  // The k of the verification graphs captured, ascending (empty without graphs).
  std::vector<int32_t> verify_graph_proposals() const {
    return uses_graphs() ? graphs_->verify_proposals() : std::vector<int32_t>{};
  }

  // Applies `plan` and runs it. Every rank returns one token per sampled
  // sequence, in `order`: with its log-probs (and logits, keep_logits) on
  // rank 0, the id alone elsewhere (broadcast from rank 0).
  absl::StatusOr<std::vector<StepToken>> Run(const StepPlan& plan);

  // Rank 0, after a Run: the prompt log-probs that step computed, one entry
  // per sequence that asked for them and had prompt positions to score, in
  // `order` (worker/prompt_logprobs.h); empty elsewhere. Valid until the next Run.
  const std::vector<PromptLogprobs>& prompt_logprobs() const { return prompt_logprobs_; }

  // Sequences currently held (for tests and the worker's log).
  int64_t num_sequences() const { return static_cast<int64_t>(seqs_.size()); }
  bool contains(uint64_t seq_id) const { return seqs_.contains(seq_id); }
  // Forgets every sequence (and rank 0's proposers of them).
  void Clear() {
    if (proposers_) {
      for (const auto& [id, seq] : seqs_) proposers_->Remove(id);
    }
    seqs_.clear();
  }
  // Rank 0: tokens given without the sampler so far (jump_forward).
  int64_t forced_tokens() const { return forced_tokens_; }
  // Speculative decoding: the proposals held for `seq_id`'s next step (rank 0
  // made them when its last step sampled it; every rank holds them). Tests.
  std::vector<int32_t> drafts(uint64_t seq_id) const {
    const auto it = seqs_.find(seq_id);
    return it == seqs_.end() ? std::vector<int32_t>() : it->second.drafts;
  }

 private:
  struct Sequence {
    std::vector<int32_t> block_table;  // block ids, position p in block_table[p / block_size]
    int64_t num_computed = 0;          // tokens whose K/V are in the cache
    int32_t next_input = -1;           // sampled by its last step: the input of a decode_sampled step
    std::unique_ptr<SequenceSamplingState> sampling;  // rank 0 only
    std::unique_ptr<SequenceConstraint> constraint;   // rank 0, constrained sequences only
    int32_t prompt_logprobs = -1;      // SamplingParams::prompt_logprobs (every rank: the head's passes pair up)
    std::vector<int32_t> prompt;       // with prompt_logprobs >= 0: the prompt, whose tokens are scored
    // Speculative decoding, every rank: the proposals rank 0 made when its
    // last step sampled it, for the draft slots of its next step.
    std::vector<int32_t> drafts;
    std::vector<int32_t> output;       // rank 0, speculating with suffix decoding: for the suffix cache at its end
  };

  // One scheduled sequence of a plan, checked.
  struct Entry {
    uint64_t id = 0;
    const NewSequencePlan* added = nullptr;        // a new sequence, or
    const ContinuingSequencePlan* cont = nullptr;  // a continuing one
    std::span<const int32_t> tokens;               // [n] to compute (into `input` for decode_sampled)
    std::span<const int32_t> table;                // block table after this step (valid once staged)
    int64_t table_before = 0;                      // blocks kept before this step (0 for a new one; cont->keep_blocks)
    std::vector<int32_t> cut;                      // the entries keep_blocks cut off (UnstageBlocks puts them back)
    int64_t num_computed = 0;                      // before this step
    bool sample = false;
    int32_t input = -1;                            // decode_sampled: the token its last step sampled
    std::vector<int32_t> replaced_before;          // [cont->replaced_blocks] the entries they replace (UnstageBlocks)
    SequenceConstraint* constraint = nullptr;      // rank 0: its constraint (held, or new in pending_)
    int32_t mask = -1;                             // its row of mask_words_ this step, -1 = none
    int32_t slots = 0;                             // cont->num_draft_slots
    std::vector<int32_t> drafts;                   // [p <= slots] proposed tokens after its input (its held drafts)
    std::vector<int32_t> verified;                 // [1 + p] with drafts: its input, then the drafts (`tokens`)
    int32_t num_proposals = 0;                     // sample: proposals asked for its next step
    std::vector<int32_t> proposed;                 // [<= num_proposals] made after sampling it (rank 0), or shared
  };

  absl::Status Reserve();
  // Fills entries_ with the plan's scheduled sequences in `order`, each
  // checked against the state after the plan's drops (blocks a sequence
  // already holds were checked when they came); INVALID_ARGUMENT names the
  // sequence and field, and nothing else changed.
  absl::Status CheckPlan(const StepPlan& plan);
  // entries_ in `order` from the plan's new and continuing sequences (each
  // listed in order once).
  absl::Status FillEntries(const StepPlan& plan);
  absl::Status CheckEntry(const Entry& e) const;
  absl::Status CheckLimits() const;
  // The plan's block copies and every continuing sequence's replacements
  // name blocks in the cache and entries of its table.
  absl::Status CheckCopies(const StepPlan& plan) const;
  // Rank 0: each new constrained sequence's SequenceConstraint into
  // pending_ (INVALID_ARGUMENT naming the sequence), and every sampled
  // constrained entry's `constraint`.
  absl::Status PrepareConstraints(const StepPlan& plan);
  // Starts filling the masks of the sampled constrained entries (on
  // mask_tasks_), each matcher first accepting the token deferred by the
  // last step's AcceptTokens; WaitMasks waits for them (INTERNAL when a
  // deferred token was one the grammar refused: a sampler bug).
  void StartMasks();
  // On a mask thread, and on this one once the forward is done: the step's
  // masks not taken yet, one at a time (next_mask_), until none is left.
  void FillMasks(bool simulated, int32_t vocab);
  void FillMask(size_t k, bool simulated, int32_t vocab);
  absl::Status WaitMasks();
  // Entry `e`'s mask, when it has one this step.
  std::span<const uint32_t> MaskOf(const Entry& e) const;
  // The one token entry `e`'s mask allows, when jump-forward gives it
  // without sampling (StepRunnerOptions::jump_forward); else -1.
  int32_t ForcedOf(const Entry& e) const;
  // Device sampling: the step's masks onto the device logits (DeviceSampler::MaskRows).
  absl::Status MaskOnDevice();
  // After sampling: each constrained entry's token deferred to its matcher
  // (SequenceConstraint::Defer), which takes it on the mask thread at the
  // sequence's next step: off the critical path.
  absl::Status AcceptTokens(const std::vector<StepToken>& tokens);
  // Rank 0, after sampling: the tokens of each entry whose grammar gave up on
  // its mask this step carry the grammar's error (StepToken::error).
  void MarkGivenUpMasks(std::vector<StepToken>& tokens) const;
  // Appends each continuing entry's new blocks to its table (and points the
  // entry at it); UnstageBlocks takes them off again after a failed forward.
  void StageBlocks();
  void UnstageBlocks();
  // The forward of entries_ (or the simulated step's sleep); `logits` set
  // on rank 0 with host sampling.
  absl::Status Compute(std::optional<Logits>& logits);
  // The forward over batch_; logits on rank 0 with host sampling, else nullopt.
  absl::StatusOr<std::optional<Logits>> Forward(bool on_device);
  // Applies the plan's drops, new sequences and computed counts.
  void Commit(const StepPlan& plan);
  // Rank 0's tokens for the sampled entries, in order.
  std::vector<StepToken> Sample(const std::vector<Entry>& entries, const std::optional<Logits>& logits);
  std::vector<StepToken> SampleOnDevice(const std::vector<Entry>& entries);
  std::vector<StepToken> SampleOnHost(const std::vector<Entry>& entries, const Logits& logits);
  std::vector<StepToken> SampleSimulated(const std::vector<Entry>& entries) const;
  // Rank 0's sampled ids to every rank (other ranks get `tokens` with ids
  // only), then each sampled sequence's next_input. An error leaves the
  // ranks out of step.
  absl::Status ShareTokens(std::vector<Entry>& entries, std::vector<StepToken>& tokens);
  // Speculative decoding: entry `e`'s tokens from its logits rows [row, row + 1 + k):
  // sampled row by row, each proposed token kept while it equals the token
  // sampled at the row before it (for a greedy row the target's argmax; with
  // temperature the rule for a deterministic draft: kept with the target's
  // probability of it, else the token sampled from the rest), then the row
  // after the last kept one. One sampler draw per token, as without drafts.
  void SampleVerified(const Entry& e, const Logits& logits, int64_t row, std::vector<StepToken>& tokens);
  // Rank 0, after sampling: each speculating entry's proposer fed the
  // tokens sampled for it, then its proposals for its next step (`proposed`).
  void Propose(std::vector<Entry>& entries, const std::vector<StepToken>& tokens);
  // ShareTokens when the step verified drafts or made proposals: per sampled
  // entry a count and the tokens, then a count and the proposals, so every
  // rank learns how many each kept and what it computes next.
  absl::Status ShareVerified(std::vector<Entry>& entries, std::vector<StepToken>& tokens);
  // Every rank, once the tokens are shared: each sampled entry's next input
  // (its last token) and proposals and, for one with draft slots, its
  // computed count back to the accepted positions.
  void KeepAccepted(std::vector<Entry>& entries, const std::vector<StepToken>& tokens);
  // Rank 0: a new speculating sequence's proposer (fed its prompt and output),
  // and the drops of `finished` (their output to the suffix cache).
  void AddProposers(const StepPlan& plan);
  bool verifies() const { return num_drafts_ > 0; }
  bool shares_counts() const { return num_drafts_ > 0 || num_proposals_ > 0; }
  // Step 5 above, after Commit: prompt_logprobs_ (rank 0) from the entries
  // of the sequences that asked for them. A failed collective as it came.
  absl::Status ScorePrompts();

  Model& model_;
  KvCache& cache_;
  int rank_;
  StepRunnerOptions options_;
  bool reserved_ = false;
  bool timer_slack_set_ = false;  // simulated_step: this thread's sleeps are exact
  std::unique_ptr<DecodeGraphs> graphs_;  // after WarmUp, when graphs are on
  StepBatch batch_;                       // the step being run (its arrays are reused)
  // The step being run, reused from step to step so a step allocates nothing
  // once they have grown: its sequences in order, order's index by id, and
  // the view StepBatch is built from.
  std::vector<Entry> entries_;
  absl::flat_hash_map<uint64_t, int32_t> index_;
  std::vector<StepSequence> step_seqs_;
  int64_t num_drafts_ = 0;  // proposed tokens in the current step (its logits rows beyond one per sequence)
  int64_t num_proposals_ = 0;  // proposals the current step asks of rank 0 for the next
  std::optional<speculative::ProposerSet> proposers_;  // rank 0, options_.proposers' method not "off"
  absl::flat_hash_map<uint64_t, Sequence> seqs_;
  // [max_num_seqs] f32 in the backend's memory: the sampled ids travel through
  // it (NCCL broadcasts device buffers; ids as floats, exact below 2^24).
  Buffer shared_tokens_;
  // [(3 + k) max_num_seqs + max_num_tokens] f32: ShareVerified's counts, tokens and proposals
  Buffer shared_verified_;
  std::vector<float> shared_host_;        // its host side, reused
  std::vector<int32_t> run_;              // Propose: one entry's sampled tokens, reused
  // Rank 0, constrained output: the constraints of this plan's new sequences
  // (moved into seqs_ by Commit), the masks of this step ([masks, words])
  // and whether each constrains ([masks]: 0 while its sequence reasons), the
  // thread that fills them, and a logits row to mask (host sampling).
  absl::flat_hash_map<uint64_t, std::unique_ptr<SequenceConstraint>> pending_;
  // [rows, words] the step's masks, row k for its k-th; rows only grow and
  // are reused from step to step, each clear outside mask_ranges_[k], the
  // words its last mask spanned (a fill clears those alone, not V / 32).
  std::vector<uint32_t> mask_words_;
  std::vector<grammar::MaskRange> mask_ranges_;  // [rows]
  std::vector<uint8_t> mask_on_;  // [masks] 1 a mask, 0 free (reasoning), 2 a refused deferred token, 3 gave up
  std::vector<SequenceConstraint*> mask_jobs_;  // [masks] whose mask each row is
  std::vector<int32_t> mask_picks_;             // [masks] simulated steps: the token each samples
  std::vector<int32_t> mask_forced_;            // [masks] jump-forward: the sole allowed token, -1 none (or not wanted)
  int64_t forced_tokens_ = 0;                   // tokens given without the sampler (forced_tokens())
  int64_t words_per_mask_ = 0;
  std::vector<std::unique_ptr<BackgroundTask>> mask_tasks_;  // StepRunnerOptions::mask_threads, made on first use
  std::atomic<size_t> next_mask_{0};                         // the next of mask_jobs_ to take (FillMasks)
  std::vector<float> masked_row_;
  std::vector<PromptRows> prompt_rows_;             // ScorePrompts' rows, reused
  std::vector<PromptLogprobs> prompt_logprobs_;     // rank 0: the last Run's
};

}  // namespace tpserve
