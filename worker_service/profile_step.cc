#include "worker_service/profile_step.h"

#include <algorithm>
#include <span>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backend/step_batch.h"
#include "base/status_macros.h"
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
  // Sequence s gets T / S tokens (all 0) from position 0, the first T % S one
  // more; every block-table entry is block 0 and nothing is stored.
  const int64_t longest = T / S + (T % S != 0 ? 1 : 0);
  const std::vector<int32_t> tokens(static_cast<size_t>(longest), 0);
  const std::vector<int32_t> table(static_cast<size_t>((longest + block_size - 1) / block_size), 0);
  std::vector<StepSequence> seqs;
  for (int64_t s = 0; s < S; ++s) {
    const size_t n = static_cast<size_t>(T / S + (s < T % S ? 1 : 0));
    seqs.push_back({std::span(tokens).first(n), 0, table});
  }
  TPSERVE_ASSIGN_OR_RETURN(const StepBatch step, StepBatch::Build(seqs, block_size, StepBatch::StoreKv::kNo));

  absl::StatusOr<KvCache> cache = KvCache::Allocate(backend, model.kv_cache_shape(1, block_size));
  if (!cache.ok()) return cache.status();
  absl::StatusOr<std::optional<Logits>> logits = model.Forward(step.view(), *cache);
  if (!logits.ok()) {
    return absl::Status(logits.status().code(),
                        absl::StrCat("profile step of ", T, " tokens in ", S, " sequences: ", logits.status().message()));
  }
  backend.Synchronize();
  return absl::OkStatus();
}

}  // namespace tpserve
