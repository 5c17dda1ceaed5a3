#include "tests/testing/step_runner_fixture.h"

#include <iterator>

#include "gtest/gtest.h"
#include "scheduler/block_manager.h"

namespace tpserve::testing_util {

absl::Status StepRunnerStack::Load(const std::filesystem::path& dir, const ModelOptions& options, int64_t num_blocks,
                                   int32_t block_size) {
  if (backend == nullptr) return absl::FailedPreconditionError("StepRunnerStack::Load: set backend first");
  absl::StatusOr<std::unique_ptr<Model>> loaded = Model::Load(dir, *backend, *comm, options);
  if (!loaded.ok()) return loaded.status();
  model = *std::move(loaded);
  absl::StatusOr<KvCache> allocated = KvCache::Allocate(*backend, model->kv_cache_shape(num_blocks, block_size));
  if (!allocated.ok()) return allocated.status();
  cache = std::make_unique<KvCache>(*std::move(allocated));
  return absl::OkStatus();
}

StepRunner& StepRunnerStack::MakeRunner(StepRunnerOptions options) {
  runner = std::make_unique<StepRunner>(*model, *cache, /*rank=*/0, std::move(options));
  return *runner;
}

BlockPool::BlockPool(int64_t num_blocks, int32_t block_size) : block_size_(block_size) {
  for (int32_t b = 0; b < num_blocks; ++b) free_.push_back(b);
}

std::vector<int32_t> BlockPool::Grow(std::vector<int32_t>& table, int64_t positions) {
  std::vector<int32_t> added;
  while (std::ssize(table) < BlockManager::BlocksFor(positions, block_size_)) {
    if (free_.empty()) {
      ADD_FAILURE() << "the block pool ran dry: " << positions << " positions need "
                    << BlockManager::BlocksFor(positions, block_size_) << " blocks, the table has " << table.size();
      break;
    }
    added.push_back(free_.back());
    table.push_back(free_.back());
    free_.pop_back();
  }
  return added;
}

bool BlockPool::Trim(std::vector<int32_t>& table, int64_t positions) {
  const bool cut = std::ssize(table) > BlockManager::BlocksFor(positions, block_size_);
  while (std::ssize(table) > BlockManager::BlocksFor(positions, block_size_)) {
    free_.push_back(table.back());
    table.pop_back();
  }
  return cut;
}

void BlockPool::Release(std::vector<int32_t>& table) {
  free_.insert(free_.end(), table.begin(), table.end());
  table.clear();
}

NewSequencePlan PlannedSequence::Prefill(BlockPool& pool, const std::vector<int32_t>& prompt,
                                         const SamplingParams& sampling, bool speculate, int32_t num_proposals) {
  computed = std::ssize(prompt);
  return NewSequencePlan{.seq_id = id, .prompt = prompt, .token_ids = prompt,
                         .block_ids = pool.Grow(table, std::ssize(prompt)), .sampling = sampling, .sample = true,
                         .speculate = speculate, .num_proposals = num_proposals};
}

ContinuingSequencePlan PlannedSequence::Decode(BlockPool& pool, int32_t num_draft_slots, int32_t num_proposals) {
  ContinuingSequencePlan c{.seq_id = id, .sample = true, .decode_sampled = true, .num_draft_slots = num_draft_slots,
                           .num_proposals = num_proposals};
  c.keep_blocks = std::exchange(keep, -1);
  c.new_block_ids = pool.Grow(table, computed + 1 + num_draft_slots);
  return c;
}

void PlannedSequence::Computed(BlockPool& pool, int64_t n) {
  computed += n;
  if (pool.Trim(table, computed)) keep = std::ssize(table);
}

}  // namespace tpserve::testing_util
