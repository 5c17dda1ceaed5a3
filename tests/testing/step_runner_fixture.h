// What the tests that drive a StepRunner as the coordinator does share
// (tests/worker step_runner, speculative_step_runner and
// speculative_distribution; tests/worker_service worker_process): the runner
// and what it runs on, the coordinator's KV blocks, and the plans of a
// sequence's steps. Tensor shapes are the model's
// and the cache's (worker/model.h, worker/kv_cache.h); here only counts.
//
//   StepRunnerStack     a rank-0 StepRunner, its backend, solo communicator,
//                       model and KV cache, owned together and destroyed
//                       runner first, backend last.
//   BlockPool           the coordinator's free blocks (ids 0 .. num_blocks - 1)
//                       and a block table that grows and shrinks with them.
//   PlannedSequence     one sequence generated on rank 0: its prefill plan (the
//                       whole prompt), then decode plans (decode_sampled, draft
//                       slots, keep_blocks after its table was cut).
//   ChunkedSequence,    the coordinator's view of sequences scheduled in
//   ChunkPlanner        chunks (chunked prefill, cached prefix, preemption):
//                       the plan of a step computing n more tokens of each.
//   EngineTokens        the offline engine's tokens for such sequences.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "backend/backend.h"
#include "comm/communicator.h"
#include "sampling/sampler.h"
#include "scheduler/step_plan.h"
#include "worker/engine.h"
#include "worker/kv_cache.h"
#include "worker/model.h"
#include "worker/step_runner.h"

namespace tpserve::testing_util {

// A rank-0 StepRunner and everything it runs on. Set `backend`, then Load,
// then MakeRunner. Members are destroyed in reverse order: the runner before
// the cache and model it holds, the backend last.
struct StepRunnerStack {
  std::unique_ptr<Backend> backend;
  std::unique_ptr<Communicator> comm = MakeSoloCommunicator();  // tp 1
  std::unique_ptr<Model> model;
  std::unique_ptr<KvCache> cache;  // num_blocks blocks of block_size positions (Model::kv_cache_shape)
  std::unique_ptr<StepRunner> runner;

  // Loads the model in `dir` with `options` on `backend` and allocates the
  // cache. The error names what failed (Model::Load's or KvCache::Allocate's).
  absl::Status Load(const std::filesystem::path& dir, const ModelOptions& options, int64_t num_blocks,
                    int32_t block_size);
  // A fresh rank-0 runner over model and cache (replacing the one before,
  // which is destroyed after the new one is made).
  StepRunner& MakeRunner(StepRunnerOptions options = {});
};

// The coordinator's free KV blocks in miniature: ids 0 .. num_blocks - 1 on a
// stack, num_blocks - 1 handed out first and the last returned reused first.
class BlockPool {
 public:
  BlockPool(int64_t num_blocks, int32_t block_size);

  int32_t block_size() const { return block_size_; }
  // Blocks appended to `table` until it holds `positions` positions; the ids
  // added, in order. A pool that runs dry fails the calling test (ADD_FAILURE)
  // and returns what it could add.
  std::vector<int32_t> Grow(std::vector<int32_t>& table, int64_t positions);
  // As Scheduler::OnStepDone: the blocks of `table` past the first `positions`
  // positions go back, its last first. Whether any did.
  bool Trim(std::vector<int32_t>& table, int64_t positions);
  // Every block of `table` back, in its order; `table` is left empty.
  void Release(std::vector<int32_t>& table);

 private:
  int32_t block_size_;
  std::vector<int32_t> free_;  // [free blocks] ids; back() is handed out next
};

// One sequence generated on rank 0's StepRunner, planned as the coordinator
// plans it: the whole prompt in its first step, then one decode a step (its
// last sampled token by decode_sampled, plus draft slots for rank 0's
// proposals), its table cut after each step to the positions computed.
struct PlannedSequence {
  uint64_t id = 0;
  std::vector<int32_t> table;  // [blocks] its block table, from the pool
  int64_t computed = 0;        // positions in the KV cache (not the last sampled token's)
  int64_t keep = -1;           // the next decode's keep_blocks: its table was cut since the last plan; else -1

  // The prefill: the whole prompt, sampled; blocks for it; computed = its size.
  NewSequencePlan Prefill(BlockPool& pool, const std::vector<int32_t>& prompt, const SamplingParams& sampling,
                          bool speculate, int32_t num_proposals);
  // The next decode: sampled, decode_sampled, `num_draft_slots` slots and
  // asking rank 0 for `num_proposals` after it; blocks for computed + 1 +
  // num_draft_slots positions; the keep_blocks owed.
  ContinuingSequencePlan Decode(BlockPool& pool, int32_t num_draft_slots, int32_t num_proposals);
  // A step computed `n` more positions (a decode: its token and the proposals
  // kept; the prefill: 0, Prefill counted them). The blocks past the computed
  // positions go back, and the next Decode cuts the runner's table to match.
  void Computed(BlockPool& pool, int64_t n);
};

// What the coordinator knows of one sequence scheduled in chunks.
struct ChunkedSequence {
  uint64_t id = 0;
  std::vector<int32_t> prompt;
  std::vector<int32_t> output;
  int64_t computed = 0;         // tokens in the KV cache
  std::vector<int32_t> blocks;  // block table
  size_t blocks_sent = 0;       // entries of `blocks` the workers have
  bool known = false;           // the workers hold it
  bool sampled_last = false;    // its last step sampled: the workers hold output.back()
  SamplingParams sampling;
  int64_t max_tokens = 0;

  int64_t all_size() const { return std::ssize(prompt) + std::ssize(output); }
  int32_t at(int64_t p) const {  // (prompt + output)[p]
    return p < std::ssize(prompt) ? prompt[static_cast<size_t>(p)]
                                  : output[static_cast<size_t>(p - std::ssize(prompt))];
  }
  bool done() const { return std::ssize(output) >= max_tokens; }
};

// (sequence, n): compute n more tokens of it.
using Chunk = std::pair<ChunkedSequence*, int64_t>;

// Plans steps of chunks. Block ids count up from `first_block` (an odd start
// shows they are the coordinator's, not 0 .. n).
class ChunkPlanner {
 public:
  ChunkPlanner(int32_t block_size, int32_t first_block) : block_size_(block_size), next_block_(first_block) {}

  // The step computing each chunk's n tokens, multi-token chunks first (as the
  // scheduler orders them), dropping `finished`. A sequence the workers do not
  // hold is a NewSequencePlan with its prompt, output and cached prefix; one
  // they hold sends its new blocks and, for the token its last step sampled
  // when `decode_sampled` is on, decode_sampled instead of the token. Sampled
  // when the chunk reaches the sequence's end. Only the sequences' block
  // tables change (AllocateBlocks); Commit records that the step ran.
  StepPlan Plan(std::span<const Chunk> chunks, std::vector<uint64_t> finished = {});
  // The step of `chunks` ran: each sequence is known, its blocks sent, n more
  // computed, sampled_last when it reached its end. (Tokens are the caller's.)
  static void Commit(std::span<const Chunk> chunks);
  // Blocks appended to `seq` until they hold `positions` positions.
  void AllocateBlocks(ChunkedSequence& seq, int64_t positions);

  bool decode_sampled = true;  // off: a decode always names its token

 private:
  int32_t block_size_;
  int32_t next_block_;
};

// The offline engine's tokens for `seqs` (prompt, sampling, max_tokens; EOS
// ignored) on `backend`; a failure fails the calling test and returns {}.
std::vector<std::vector<int32_t>> EngineTokens(const std::filesystem::path& model_dir, Backend& backend,
                                               Communicator& comm, std::span<const ChunkedSequence> seqs,
                                               const EngineOptions& options);

}  // namespace tpserve::testing_util
