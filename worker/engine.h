// Engine: offline generation on one tensor-parallel rank, without the
// coordinator (tests, benchmarks, tpserve-generate).
//
// Every rank of the model creates an Engine over its Communicator and calls
// Generate with the same requests; all ranks then build the same steps. Each
// step is a continuous batch (backend/step.h): sequences in prefill first
// (a prompt longer than the token budget is computed in chunks), then
// sequences in decode. Rank 0 samples from the gathered logits and broadcasts
// the chosen tokens, so the ranks agree on what comes next. KV blocks come
// from the engine's own BlockAllocator; when they run out, the most recently
// admitted sequence is preempted and later recomputed (prompt + its output).
#pragma once

#include <cstdint>
#include <deque>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "backend/backend.h"
#include "comm/communicator.h"
#include "worker/block_allocator.h"
#include "worker/decode_graphs.h"
#include "sampling/device_sampler.h"
#include "worker/kv_cache.h"
#include "worker/model.h"
#include "sampling/sampler.h"

namespace tpserve {

struct EngineOptions {
  // model.max_num_tokens is the token budget of a step (max_num_batched_tokens),
  // model.max_num_seqs the most sequences in a step.
  ModelOptions model;
  int32_t block_size = 16;
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
};

enum class FinishReason { kLength, kEos };

struct GenerationResult {
  std::vector<int32_t> tokens;               // generated ids (every rank)
  std::vector<float> logprobs;               // rank 0, when sampling.logprobs >= 0: one per token
  FinishReason finish_reason = FinishReason::kLength;
  std::vector<std::vector<float>> logits;    // rank 0, with return_logits: [tokens][V]
};

struct GenerationStats {
  int64_t steps = 0;
  int64_t prefill_tokens = 0;    // tokens computed in steps that held a prefill
  double prefill_seconds = 0;    // wall time of those steps
  int64_t decode_tokens = 0;     // tokens of steps that held only decodes
  double decode_seconds = 0;
  int64_t preemptions = 0;
};

class Engine {
 public:
  static absl::StatusOr<std::unique_ptr<Engine>> Create(const std::filesystem::path& model_dir,
                                                        Backend& backend, Communicator& comm,
                                                        const EngineOptions& options = {});

  // Generates for every request (results in request order). INVALID_ARGUMENT
  // naming the request and field for a bad request (empty prompt, id outside the
  // vocab, too long for the RoPE table or the KV cache, bad sampling params);
  // a failed step or collective as it came.
  absl::StatusOr<std::vector<GenerationResult>> Generate(std::span<const GenerationRequest> requests);

  Model& model() { return *model_; }
  const GenerationStats& last_stats() const { return stats_; }

 private:
  struct Sequence;
  struct Batch;
  Engine(Backend& backend, Communicator& comm, const EngineOptions& options)
      : backend_(backend), comm_(comm), options_(options) {}
  absl::Status Validate(std::span<const GenerationRequest> requests) const;
  absl::Status EnsureCache(std::span<const GenerationRequest> requests);
  // Fills `batch` from the running and waiting sequences; preempts running
  // ones (back to the front of `waiting`) when KV blocks run out.
  void Schedule(std::vector<Sequence*>& running, std::deque<Sequence*>& waiting, Batch& batch);
  void Preempt(Sequence* seq, std::vector<Sequence*>& running, std::deque<Sequence*>& waiting);
  // Runs the batch, samples on rank 0, broadcasts and appends the tokens;
  // finished sequences leave `running` and give their blocks back.
  absl::Status RunStep(const Batch& batch, std::vector<Sequence*>& running,
                       std::vector<GenerationResult>& results);

  Backend& backend_;
  Communicator& comm_;
  EngineOptions options_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<KvCache> cache_;
  bool reserved_ = false;                 // Backend::Reserve ran for the model's capacity
  std::unique_ptr<DecodeGraphs> graphs_;  // over cache_; recaptured when it is reallocated
  std::unique_ptr<BlockAllocator> allocator_;
  GenerationStats stats_;
};

}  // namespace tpserve
