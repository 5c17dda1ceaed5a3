#include "tests/testing/step_runner_fixture.h"

#include <algorithm>
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

StepPlan ChunkPlanner::Plan(std::span<const Chunk> chunks, std::vector<uint64_t> finished) {
  StepPlan plan;
  plan.finished = std::move(finished);
  std::vector<Chunk> order(chunks.begin(), chunks.end());
  std::stable_partition(order.begin(), order.end(), [](const Chunk& c) { return c.second > 1; });
  for (auto& [seq, n] : order) {
    const int64_t end = seq->computed + n;
    AllocateBlocks(*seq, end);
    std::vector<int32_t> tokens;
    for (int64_t p = seq->computed; p < end; ++p) tokens.push_back(seq->at(p));
    const bool sample = end == seq->all_size();
    if (!seq->known) {
      plan.new_sequences.push_back(NewSequencePlan{.seq_id = seq->id, .prompt = seq->prompt, .output = seq->output,
                                                   .token_ids = std::move(tokens),
                                                   .num_computed_tokens = seq->computed, .block_ids = seq->blocks,
                                                   .sampling = seq->sampling, .sample = sample});
    } else {
      ContinuingSequencePlan s;
      s.seq_id = seq->id;
      s.new_block_ids.assign(seq->blocks.begin() + static_cast<std::ptrdiff_t>(seq->blocks_sent), seq->blocks.end());
      s.decode_sampled = decode_sampled && seq->sampled_last;
      if (!s.decode_sampled) s.token_ids = std::move(tokens);
      s.sample = sample;
      plan.continuing.push_back(std::move(s));
    }
    plan.order.push_back(seq->id);
  }
  return plan;
}

void ChunkPlanner::Commit(std::span<const Chunk> chunks) {
  for (const auto& [seq, n] : chunks) {
    seq->known = true;
    seq->blocks_sent = seq->blocks.size();
    seq->computed += n;
    seq->sampled_last = seq->computed == seq->all_size();
  }
}

void ChunkPlanner::AllocateBlocks(ChunkedSequence& seq, int64_t positions) {
  while (std::ssize(seq.blocks) * block_size_ < positions) seq.blocks.push_back(next_block_++);
}

std::vector<std::vector<int32_t>> EngineTokens(const std::filesystem::path& model_dir, Backend& backend,
                                               Communicator& comm, std::span<const ChunkedSequence> seqs,
                                               const EngineOptions& options) {
  std::vector<GenerationRequest> reqs;
  for (const ChunkedSequence& s : seqs) {
    GenerationRequest r;
    r.prompt = s.prompt;
    r.sampling = s.sampling;
    r.max_tokens = s.max_tokens;
    r.ignore_eos = true;
    reqs.push_back(r);
  }
  absl::StatusOr<std::unique_ptr<Engine>> engine = Engine::Create(model_dir, backend, comm, options);
  EXPECT_TRUE(engine.ok()) << engine.status();
  if (!engine.ok()) return {};
  absl::StatusOr<std::vector<GenerationResult>> out = (*engine)->Generate(reqs);
  EXPECT_TRUE(out.ok()) << out.status();
  std::vector<std::vector<int32_t>> tokens;
  if (out.ok()) {
    for (const GenerationResult& r : *out) tokens.push_back(r.tokens);
  }
  return tokens;
}

}  // namespace tpserve::testing_util
