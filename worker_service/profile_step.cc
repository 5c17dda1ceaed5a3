#include "worker_service/profile_step.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "worker/kv_cache.h"

namespace tpserve {

ProfileStepShape ProfileShape(const Model& model) {
  const ModelOptions& o = model.options();
  ProfileStepShape shape;
  shape.num_seqs = std::max<int64_t>(1, std::min(o.max_num_seqs, o.max_num_tokens));
  shape.num_tokens = std::min(o.max_num_tokens, shape.num_seqs * model.max_position());
  shape.num_tokens = std::max(shape.num_tokens, shape.num_seqs);
  return shape;
}

absl::Status RunProfileStep(Model& model, Backend& backend, int32_t block_size) {
  if (block_size <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("profile step: block_size ", block_size, " must be positive"));
  }
  const ProfileStepShape shape = ProfileShape(model);
  const int64_t S = shape.num_seqs, T = shape.num_tokens;
  // Sequence s gets T / S tokens, the first T % S one more.
  std::vector<int32_t> query_start(static_cast<size_t>(S) + 1, 0), seq_lens(static_cast<size_t>(S));
  int32_t longest = 0;
  for (int64_t s = 0; s < S; ++s) {
    const int32_t n = static_cast<int32_t>(T / S + (s < T % S ? 1 : 0));
    seq_lens[static_cast<size_t>(s)] = n;
    query_start[static_cast<size_t>(s) + 1] = query_start[static_cast<size_t>(s)] + n;
    longest = std::max(longest, n);
  }
  const int32_t max_blocks = (longest + block_size - 1) / block_size;
  std::vector<int32_t> token_ids(static_cast<size_t>(T), 0), positions(static_cast<size_t>(T));
  std::vector<int64_t> slots(static_cast<size_t>(T), -1);
  std::vector<int32_t> tables(static_cast<size_t>(S * max_blocks), 0), logits_indices(static_cast<size_t>(S));
  for (int64_t s = 0; s < S; ++s) {
    const int32_t begin = query_start[static_cast<size_t>(s)], end = query_start[static_cast<size_t>(s) + 1];
    for (int32_t t = begin; t < end; ++t) positions[static_cast<size_t>(t)] = t - begin;
    logits_indices[static_cast<size_t>(s)] = end - 1;
  }
  StepMetadata step;
  step.num_prefill_seqs = static_cast<int32_t>(S);
  step.num_decode_seqs = 0;
  step.token_ids = token_ids;
  step.positions = positions;
  step.slot_mapping = slots;
  step.query_start = query_start;
  step.seq_lens = seq_lens;
  step.block_tables = tables;
  step.max_blocks_per_seq = max_blocks;
  step.logits_indices = logits_indices;

  absl::StatusOr<KvCache> cache = KvCache::Allocate(backend, model.kv_cache_shape(1, block_size));
  if (!cache.ok()) return cache.status();
  absl::StatusOr<std::optional<Logits>> logits = model.Forward(step, *cache);
  if (!logits.ok()) {
    return absl::Status(logits.status().code(),
                        absl::StrCat("profile step of ", T, " tokens in ", S, " sequences: ", logits.status().message()));
  }
  backend.Synchronize();
  return absl::OkStatus();
}

}  // namespace tpserve
