#include "coordinator/startup.h"

#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"
#include "coordinator/log.h"

namespace tpserve {

namespace iv1 = tpserve::internal::v1;

namespace {

absl::Status InPhase(absl::string_view phase, const absl::Status& s) {
  return absl::Status(s.code(), absl::StrCat(phase, ": ", s.message()));
}

}  // namespace

absl::StatusOr<StartupResult> StartWorkers(WorkerPool& pool, const StartupOptions& options) {
  StartupResult result;
  iv1::CoordinatorMessage load;
  iv1::Load* l = load.mutable_load();
  l->set_model_dir(options.model_dir);
  l->set_backend(options.backend);
  l->set_tensor_parallel_size(options.tensor_parallel_size);
  l->set_store_prefix(options.store_prefix);
  l->set_block_size(options.block_size);
  l->set_max_num_batched_tokens(options.max_num_batched_tokens);
  l->set_max_num_seqs(options.max_num_seqs);
  l->set_max_model_len(options.max_model_len);
  l->set_enforce_eager(options.enforce_eager);
  l->set_simulated_step_us(options.simulated_step_us);
  l->set_max_num_draft_tokens(options.max_num_draft_tokens);
  l->set_num_speculative_tokens(options.num_speculative_tokens);
  l->set_speculative_method(options.speculative_method);
  l->set_prompt_lookup_min(options.prompt_lookup_min);
  l->set_prompt_lookup_max(options.prompt_lookup_max);
  l->set_collective_timeout_ms(options.collective_timeout_ms);
  auto loaded = pool.RunOnAll(load);
  if (!loaded.ok()) return InPhase("loading the model on the workers", loaded.status());
  result.weight_bytes = (*loaded)[0].loaded().weight_bytes();
  CoordinatorLog(absl::StrCat("workers loaded ", options.model_dir, " (rank 0 holds ",
                              result.weight_bytes, " bytes of weights)"));

  iv1::CoordinatorMessage profile;
  profile.mutable_profile()->set_gpu_memory_utilization(options.gpu_memory_utilization);
  auto profiled = pool.RunOnAll(profile);
  if (!profiled.ok()) return InPhase("profiling the workers' memory", profiled.status());
  uint64_t min_blocks = std::numeric_limits<uint64_t>::max();
  for (const auto& reply : *profiled) min_blocks = std::min(min_blocks, reply.profile().max_num_blocks());
  result.profiled_blocks = static_cast<int64_t>(min_blocks);
  result.num_blocks = options.num_blocks_override > 0 ? options.num_blocks_override
                                                      : result.profiled_blocks;
  if (result.num_blocks <= 0) {
    return absl::ResourceExhaustedError(
        "profiling the workers' memory: no KV block fits after the weights and activations; raise "
        "--gpu-memory-utilization, lower --max-num-batched-tokens, or use more ranks (--tp)");
  }
  CoordinatorLog(absl::StrCat("KV cache: ", result.num_blocks, " blocks of ", options.block_size,
                              " tokens on every rank (profiled minimum ", result.profiled_blocks,
                              ")"));

  iv1::CoordinatorMessage allocate;
  allocate.mutable_allocate_kv()->set_num_blocks(static_cast<uint64_t>(result.num_blocks));
  if (auto s = pool.RunOnAll(allocate); !s.ok()) return InPhase("allocating the KV cache", s.status());

  iv1::CoordinatorMessage warm_up;
  warm_up.mutable_warm_up();
  if (auto s = pool.RunOnAll(warm_up); !s.ok()) return InPhase("warming up the workers", s.status());
  return result;
}

}  // namespace tpserve
