// Brings the connected workers from Hello to ready (docs/architecture.md, "Start-up"):
// Load (each rank loads its shard; rendezvous through the pool's store), Profile
// (the KV blocks that fit on each rank; the minimum wins), AllocateKv, WarmUp.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "coordinator/worker_pool.h"

namespace tpserve {

struct StartupOptions {
  std::string model_dir;              // absolute: the workers may run elsewhere
  std::string backend;                // "cpu" or "cuda"
  uint32_t tensor_parallel_size = 1;
  std::string store_prefix;           // rendezvous key prefix of this job
  uint32_t block_size = 16;
  uint32_t max_num_batched_tokens = 2048;
  uint32_t max_num_seqs = 256;
  uint32_t max_model_len = 0;
  float gpu_memory_utilization = 0.9f;
  int64_t num_blocks_override = 0;    // > 0: allocate this many blocks instead of the profiled minimum
  bool enforce_eager = false;         // workers never run decode steps as CUDA graphs
  uint32_t collective_timeout_ms = 0;  // the workers' communicators (worker.proto Load)
  uint32_t simulated_step_us = 0;     // benchmarks: workers sleep instead of computing (worker.proto Load)
  uint32_t max_num_draft_tokens = 0;  // speculative decoding: proposed tokens per step (worker.proto Load)
  uint32_t num_speculative_tokens = 0;  // and per sequence (k): verification graphs up to it (worker.proto Load)
  std::string speculative_method;       // rank 0's proposers: ngram, suffix, or empty (worker.proto Load)
  uint32_t prompt_lookup_min = 0;       // ngram's n range (worker.proto Load)
  uint32_t prompt_lookup_max = 0;
};

struct StartupResult {
  int64_t num_blocks = 0;             // allocated on every rank
  int64_t profiled_blocks = 0;        // the minimum the ranks reported
  uint64_t weight_bytes = 0;          // rank 0's shard
};

// Errors name the phase and carry the workers' messages.
absl::StatusOr<StartupResult> StartWorkers(WorkerPool& pool, const StartupOptions& options);

}  // namespace tpserve
