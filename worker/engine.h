// Engine: offline generation on one tensor-parallel rank, without the
// coordinator (tests, benchmarks, tpserve-generate).
//
// The engine is the serving path without the network: the coordinator's
// Scheduler and BlockManager (scheduler/, with the prefix cache) decide every
// step, BuildStepPlan turns it into a StepPlan, and the StepRunner the workers
// run (worker/step_runner.h) computes it. Every rank of the model creates an
// Engine over its Communicator and calls Generate with the same requests; the
// scheduler is deterministic, so all ranks build the same steps. Rank 0
// samples and the step runner broadcasts the chosen tokens to every rank,
// which applies them (Scheduler::OnStepDone) and the stop rules:
// EOS unless ignore_eos, max_tokens. When KV blocks run out the most recently
// admitted sequence is preempted and later recomputed (prompt + its output,
// mostly from the prefix cache), which never changes what is generated.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "backend/backend.h"
#include "comm/communicator.h"
#include "sampling/device_sampler.h"
#include "sampling/sampler.h"
#include "scheduler/block_manager.h"
#include "scheduler/scheduler.h"
#include "worker/kv_cache.h"
#include "worker/model.h"
#include "worker/step_runner.h"

namespace tpserve {

struct EngineOptions {
  // model.max_num_tokens is the token budget of a step (max_num_batched_tokens),
  // model.max_num_seqs the most sequences running at once (so also in a step),
  // as the coordinator's --max-num-seqs.
  ModelOptions model;
  int32_t block_size = 16;
  // Reuse the KV blocks of identical prompt prefixes (scheduler/block_manager.h),
  // within a Generate call and across calls while the cache keeps its size.
  bool enable_prefix_caching = true;
  // KV blocks to allocate; 0 = enough for every request of a Generate call at
  // once (the cache grows when a later call needs more).
  int64_t num_blocks = 0;
  // Keep each sampled token's full logits row (rank 0), for tests.
  bool return_logits = false;
  // Never run decode steps as CUDA graphs (worker/decode_graphs.h); graphs are
  // used only where the backend and communicator can capture them.
  bool enforce_eager = false;
  // Rank 0: sample on the device (StepRunnerOptions::sampler); not owned.
  // Ignored when return_logits asks for the rows on the host.
  DeviceSampler* sampler = nullptr;
};

struct GenerationRequest {
  std::vector<int32_t> prompt;  // token ids, at least one
  SamplingParams sampling;
  int64_t max_tokens = 16;      // tokens to generate, at least one
  bool ignore_eos = false;      // keep going past config's eos_token_ids
  // Choices (parallel sampling, n >= 1, at most model.max_num_seqs): one
  // prefill whose blocks they share (scheduler/scheduler.h); choice i samples
  // with ChoiceSampling(sampling, i) (seed + i when seeded).
  int32_t n = 1;
};

enum class FinishReason { kLength, kEos };

struct GenerationResult {
  std::vector<int32_t> tokens;               // generated ids (every rank)
  std::vector<float> logprobs;               // rank 0, when sampling.logprobs >= 0: one per token
  FinishReason finish_reason = FinishReason::kLength;
  std::vector<std::vector<float>> logits;    // rank 0, with return_logits: [tokens][V]
  int64_t cached_tokens = 0;                 // prompt tokens served by the prefix cache
  // Rank 0, when sampling.prompt_logprobs >= 0 (the first choice of a
  // request): [prompt - 1] entry i scores prompt token i + 1 (the first has
  // none). Such a request computes its whole prompt (no cached prefix).
  std::vector<ScoredToken> prompt_logprobs;
};

struct GenerationStats {
  int64_t steps = 0;
  int64_t prefill_tokens = 0;    // tokens computed in steps that held a prefill
  double prefill_seconds = 0;    // wall time of those steps
  int64_t decode_tokens = 0;     // tokens of steps that held only decodes
  double decode_seconds = 0;
  int64_t preemptions = 0;
  int64_t cached_tokens = 0;     // prompt tokens served by the prefix cache, all requests
  int64_t prompt_tokens_computed = 0;  // tokens computed at positions inside their prompt
  int64_t peak_blocks_used = 0;        // most KV blocks held at once (after a step was scheduled)
};

class Engine {
 public:
  static absl::StatusOr<std::unique_ptr<Engine>> Create(const std::filesystem::path& model_dir,
                                                        Backend& backend, Communicator& comm,
                                                        const EngineOptions& options = {});

  // Generates for every request: one result per choice, a request's n
  // choices in a row, in request order. INVALID_ARGUMENT
  // naming the request and field for a bad request (empty prompt, id outside the
  // vocab, too long for the RoPE table or the KV cache, bad sampling params);
  // a failed step or collective as it came.
  absl::StatusOr<std::vector<GenerationResult>> Generate(std::span<const GenerationRequest> requests);

  Model& model() { return *model_; }
  const GenerationStats& last_stats() const { return stats_; }
  // Whether decode steps run as captured graphs (after the first Generate,
  // which allocates the cache and warms the step runner up).
  bool uses_graphs() const { return runner_ != nullptr && runner_->uses_graphs(); }

 private:
  Engine(Backend& backend, Communicator& comm, const EngineOptions& options)
      : backend_(backend), comm_(comm), options_(options) {}
  absl::Status Validate(std::span<const GenerationRequest> requests) const;
  // Allocates the KV cache (or a bigger one) with its block manager and step
  // runner when `requests` need more blocks than there are.
  absl::Status EnsureCache(std::span<const GenerationRequest> requests);
  // Schedules and runs steps until every request has finished.
  absl::StatusOr<std::vector<GenerationResult>> RunAll(std::span<const GenerationRequest> requests);
  // Runs one step, shares rank 0's tokens and applies them; finished
  // sequences leave the scheduler.
  absl::Status RunStep(const ScheduledStep& step, std::span<const GenerationRequest> requests,
                       Scheduler& scheduler, std::vector<GenerationResult>& results);
  // Appends `token` to its result; true when the request stops there.
  bool Append(const GenerationRequest& request, int64_t num_output, int32_t token,
              const StepToken* sampled, GenerationResult& result) const;
  void Account(const ScheduledStep& step, double seconds);

  // The running call's choices by sequence id (= result index): its request and sampling.
  struct Choice {
    size_t request = 0;
    SamplingParams sampling;
  };
  std::vector<Choice> choices_;

  Backend& backend_;
  Communicator& comm_;
  EngineOptions options_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<KvCache> cache_;
  std::unique_ptr<BlockManager> blocks_;  // over cache_; its prefix cache outlives a Generate call
  std::unique_ptr<StepRunner> runner_;    // over cache_; recreated with it
  GenerationStats stats_;
};

}  // namespace tpserve
