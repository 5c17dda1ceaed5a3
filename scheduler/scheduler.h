// Continuous batching (docs/architecture.md, "Steps"): each iteration builds one step of at
// most max_num_batched_tokens new tokens over at most max_num_seqs sequences.
//
// Order within an iteration, first come first served:
//   1. running sequences in arrival order: one token for a decode, the next
//      chunk of the prompt for a sequence still in prefill (chunked prefill, so
//      a long prompt never stalls the running decodes for more than a step);
//      when KV blocks run out the most recently arrived running sequence is
//      preempted by recompute (its blocks freed, it goes back to the front of
//      the queue and later recomputes prompt + output, mostly from the prefix
//      cache), so greedy outputs never change;
//   2. waiting sequences, while budget, sequence slots and blocks last: a
//      preempted one first, else the earliest arrival of the group (client)
//      with the fewest running sequences, so that one client's backlog
//      cannot keep the others waiting (with a single group: arrival order);
//      a sequence that cannot be admitted blocks those behind it.
// Parallel sampling (n > 1): a request's choices share one prefill. The
// first choice is admitted like any sequence (with sequence slots for all of
// them); once it has scheduled its whole prompt, the others fork from it at
// the start of the next Schedule (or when it finishes or is preempted): each
// shares its prompt blocks (reference counts) and computes only the last
// prompt token itself, whose logits give it its first token. A write to a
// shared block copies it first (copy-on-write, BlockManager::PrepareWrite):
// the step carries the copies, which the workers make before its forward.
// After the fork every choice is a sequence like any other (preempted,
// finished and aborted alone).
// Sequences are listed with prefills (including chunks) before decodes, the
// order the workers' step metadata wants.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "scheduler/block_manager.h"
#include "scheduler/sequence.h"

namespace tpserve {

struct SchedulerConfig {
  int64_t max_num_batched_tokens = 2048;  // token budget of one step
  int32_t max_num_seqs = 256;             // running sequences at once
  int32_t max_queue = 1024;               // waiting sequences beyond this are refused
  // Speculative decoding (with a Drafter): most draft slots per step (the
  // workers' extra logits rows, Load.max_num_draft_tokens); per sequence the
  // Drafter's Proposals bound them.
  int32_t max_num_draft_tokens = 0;
};

// Speculative decoding (docs/architecture.md, "Speculative decoding"): which
// sequences speculate and how much. Rank 0 holds their proposers: when a
// step samples a speculating sequence, it proposes up to the number the plan
// asked (Proposals, chosen when that step is planned) for the sequence's next
// step, which then has as many draft slots (fewer when the step's budget,
// rows or free blocks do not hold them): 1 + slots tokens budgeted, blocks
// for them, and the result says how many proposals were used and accepted
// (Scheduler::OnStepDone). Such a step is planned while the step that samples
// its input is still in flight, as any decode is (one step ahead): until that
// step's result, the sequence's length and computed count are the worst case
// (every slot of the step in flight kept, Sequence::num_pending_slots), and so
// are its blocks; the result gives back the positions it did not keep, and the
// blocks past every position a step still in flight may write. Engine thread.
class Drafter {
 public:
  virtual ~Drafter() = default;
  // Whether rank 0 keeps a proposer for sequence `id` (its request speculates).
  virtual bool Holds(uint64_t id) const = 0;
  // The tokens rank 0 is to propose for `seq`'s next step, asked as a step
  // that samples it is planned (seq.length() counts that token): its policy's
  // k at `batch` running sequences, none past its limit; 0: none.
  virtual int32_t Proposals(const Sequence& seq, int32_t batch) = 0;
};

// One sequence of a step. `seq` is valid until the scheduler next changes
// (Add, Schedule, OnStepDone, Finish): a step in flight refers to its
// sequences by `id`, since one may finish before the step's result arrives.
struct ScheduledSequence {
  Sequence* seq = nullptr;
  uint64_t id = 0;
  int64_t start = 0;                // first position computed (num_computed_tokens before)
  int64_t num_tokens = 0;           // tokens computed this step: positions [start, start + num_tokens)
  bool is_new = false;              // the workers do not know it yet: send everything
  std::vector<BlockId> new_blocks;  // block ids the workers do not know yet (all when is_new)
  bool sample = false;              // the step reaches its last token: a new token is sampled
  bool decode_sampled = false;      // computes the token its previous step sampled (workers hold it)
  // Copy-on-write before this step: entry `index` of its block table becomes
  // `dst`, a copy of the shared `src` (BlockManager::PrepareWrite).
  std::vector<BlockCopy> copies;
  int32_t preemptions = 0;          // seq->num_preemptions when scheduled
  // Speculative decoding: room for rank 0's proposals after its last token
  // (decode_sampled), the last draft_slots of num_tokens (their blocks held);
  // the result gives 1 to draft_slots + 1 tokens for it.
  int32_t draft_slots = 0;
  // The workers cut the sequence's table to this many blocks before adding
  // new_blocks (slots' blocks freed since its last step); -1: as it is.
  int64_t keep_blocks = -1;
  // Draft slots planned while a step that samples it was in flight (one step
  // ahead: on that step's worst case).
  bool pipelined = false;
  bool speculate = false;     // is_new and rank 0 keeps a proposer for it (Drafter::Holds)
  int32_t num_proposals = 0;  // sample: rank 0 proposes up to this many for its next step
};

struct ScheduledStep {
  std::vector<ScheduledSequence> sequences;  // prefills (and chunks) first, then decodes
  int32_t num_prefills = 0;
  int64_t num_tokens = 0;
  std::vector<uint64_t> dropped;     // finished, aborted or preempted since the last step
  std::vector<uint64_t> preempted;   // those of `dropped` preempted (they come back)
  std::vector<uint64_t> unservable;  // too long for the whole KV cache: finish them with an error
  bool empty() const { return sequences.empty() && dropped.empty(); }
};

class Scheduler {
 public:
  Scheduler(BlockManager& blocks, SchedulerConfig config);

  // Queues a new sequence (prompt in `tokens`) of `group` (its client; see
  // the order above). RESOURCE_EXHAUSTED when the queue holds max_queue
  // sequences already.
  // `forks`: ids of the request's other choices (parallel sampling, see
  // above), queued with it and counted as one waiting request; INVALID_ARGUMENT
  // when 1 + forks.size() exceeds max_num_seqs (they could never run together).
  // `read_prefix_cache` false: the request computes its whole prompt, even
  // after a preemption (it wants every prompt position's logits: prompt
  // log-probs), never a cached prefix.
  // `block_hashes`: the prompt's full blocks' chained hashes when the caller
  // has them (BlockManager::ExtendBlockHashes; the router needed them first),
  // one per full block (INVALID_ARGUMENT otherwise); empty: hashed here.
  absl::Status Add(uint64_t id, std::vector<int32_t> prompt, uint64_t group = 0,
                   std::span<const uint64_t> forks = {}, bool read_prefix_cache = true,
                   std::vector<uint64_t> block_hashes = {});

  // Builds the next step and counts its tokens as computed. It may be called
  // again before the previous step's result arrives (one step in flight
  // ahead): a token sampled by a step in flight is pending
  // (Sequence::num_pending_tokens) and the next step decodes it with
  // decode_sampled, while a sequence waiting for readmission after a
  // preemption is readmitted only once its tokens are all known.
  ScheduledStep Schedule();

  // Applies a completed step; steps complete in the order they were
  // scheduled. `sampled` tokens (by sequence id) are appended, and the full
  // blocks the step completed join the prefix cache. Sequences finished since
  // are skipped, and so are the blocks of those preempted since. A sequence
  // that verified drafts has its tokens consecutive in `sampled` (a + 1 for
  // a accepted): its computed count goes back to start + 1 + a and the
  // blocks past it (held for slots that were not used or not accepted) are
  // freed (the workers drop them the same way, worker/step_runner.h), so
  // rejected proposals leave no trace.
  void OnStepDone(const ScheduledStep& step, std::span<const std::pair<uint64_t, int32_t>> sampled);

  // Ends a sequence (finished, aborted, cancelled): frees its blocks now; the
  // workers drop it with the next step. A first choice whose others have not
  // forked yet hands them on: they fork now when its prompt is scheduled,
  // else the next of them takes its place. False when the id is unknown.
  bool Finish(uint64_t id);

  const Sequence* Find(uint64_t id) const;
  int32_t num_running() const { return static_cast<int32_t>(running_.size()); }
  int32_t num_waiting() const { return static_cast<int32_t>(waiting_.size()); }
  int64_t num_preemptions() const { return num_preemptions_; }  // since construction
  // Tokens (prompt + output so far) of the running and waiting sequences:
  // the work a router weighs (GetLoads). O(sequences).
  int64_t num_tokens_in_flight() const;
  bool idle() const { return running_.empty() && waiting_.empty() && dropped_.empty(); }
  const BlockManager& blocks() const { return blocks_; }
  // Speculative decoding's proposals (null: none); must outlive the scheduler.
  void set_drafter(Drafter* drafter) { drafter_ = drafter; }

 private:
  void Preempt(Sequence* seq);
  void ReleaseBlocks(Sequence* seq);
  ScheduledSequence Plan(Sequence* seq, int64_t num_tokens, std::vector<BlockCopy> copies, int32_t draft_slots = 0);
  // Speculative decoding: the draft slots of a decode of the token its last
  // step samples (known or in flight): what that step asked rank 0 for,
  // within `budget` tokens, the step's draft rows left and the free blocks.
  int32_t DraftSlots(Sequence* seq, int64_t budget);
  // OnStepDone for a sequence that had draft slots: `accepted` proposals kept.
  // The positions of the slots not kept leave the worst case, and the blocks
  // past it go back (no step in flight writes them: its positions lie below).
  void RewindRejected(Sequence* seq, const ScheduledSequence& s, int32_t accepted);
  // Starts `parent`'s forks from its prompt blocks (see above); it must hold them.
  void Fork(Sequence* parent);
  // `parent` (waiting, or running and removed from running_) leaves: the first
  // of its forks takes its place in the queue with the rest as its own forks.
  void PromoteFork(Sequence* parent, bool was_running);
  // Sequence slots `seq` takes when admitted: itself and its forks.
  static int32_t SlotsOf(const Sequence* seq) { return 1 + static_cast<int32_t>(seq->forks.size()); }
  // Whether step 2 (above) may admit another waiting sequence: none after a
  // preemption, and only with queue, budget and a sequence slot left.
  bool MayAdmit(bool preempted, int64_t budget) const;
  // The waiting sequence to admit next (point 2 above); `running` counts the
  // running sequences of each group.
  std::deque<Sequence*>::iterator NextToAdmit(const absl::flat_hash_map<uint64_t, int32_t>& running);

  BlockManager& blocks_;
  SchedulerConfig config_;
  absl::flat_hash_map<uint64_t, std::unique_ptr<Sequence>> sequences_;
  std::vector<Sequence*> running_;  // arrival order
  std::deque<Sequence*> waiting_;   // arrival order; preempted sequences go to the front
  std::vector<uint64_t> dropped_;
  std::vector<uint64_t> preempted_;  // of dropped_, the preempted ones
  int32_t reserved_forks_ = 0;  // forks of running sequences: slots taken before they run
  int64_t num_preemptions_ = 0;
  Drafter* drafter_ = nullptr;
  int32_t draft_rows_left_ = 0;  // this Schedule's: max_num_draft_tokens less those planned
};

}  // namespace tpserve
