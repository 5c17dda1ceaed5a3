// What the tests that drive a StepRunner as the coordinator does share
// (tests/worker speculative_step_runner and speculative_distribution): the
// runner and what it runs on, the coordinator's KV blocks, and the plans of a
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
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "backend/backend.h"
#include "comm/communicator.h"
#include "sampling/sampler.h"
#include "scheduler/step_plan.h"
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

}  // namespace tpserve::testing_util
