// CommandHandler: what a worker does with each coordinator command
// (worker.proto), without the networking: Load starts the rank
// (rank/rank_start.h: the backend, the communicator over the rendezvous store
// and, on rank 0 of the CUDA backend, the device sampler) and loads the model;
// Profile answers how many KV blocks fit (on a GPU measured after a forward of
// the largest step); AllocateKv allocates them; WarmUp; Step runs the
// StepRunner; Shutdown ends the worker.
//
// Every command gets exactly one reply with the command's seq; a command that
// failed carries the reason in `error` and the worker goes on, except when the
// failure leaves the ranks out of step (a failed collective or rendezvous; its
// status carries rank/out_of_step.h's mark): then the reply says so and
// `exit_code` tells the process to end.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "comm/rank_env.h"
#include "comm/store.h"
#include "constrained/constraint_compiler.h"
#include "proto/protocol_version.h"
#include "rank/rank_start.h"
#include "tpserve/internal/v1/worker.pb.h"
#include "worker/kv_cache.h"
#include "worker/model.h"
#include "worker/step_runner.h"

namespace tpserve {

struct WorkerOptions {
  RankEnv rank;                        // rank, world size, local rank / world size
  std::string comm_host = "127.0.0.1"; // address gloo listens on (peers connect to it)
  int cpu_threads = 0;                 // GEMM threads; 0 = cores / local ranks
  bool deterministic = false;          // CUDA: batch-invariant kernels (rank/rank_start.h); or Load's
};

class CommandHandler {
 public:
  struct Outcome {
    tpserve::internal::v1::WorkerMessage reply;
    std::optional<int> exit_code;  // set: reply, then end the process with this code
  };

  // `store` is the rendezvous store (the coordinator's in production); it must
  // outlive the handler.
  CommandHandler(const WorkerOptions& options, Store& store) : options_(options), store_(store) {}
  ~CommandHandler();

  // The Hello this worker opens its session with.
  tpserve::internal::v1::Hello MakeHello() const;

  Outcome Handle(const tpserve::internal::v1::CoordinatorMessage& command);

 private:
  // Each returns what the reply's `error` says; a status marked out of step
  // (rank/out_of_step.h) also ends the process.
  absl::Status Load(const tpserve::internal::v1::Load& load, tpserve::internal::v1::Loaded& out);
  absl::Status Profile(const tpserve::internal::v1::Profile& profile, tpserve::internal::v1::ProfileResult& out);
  absl::Status AllocateKv(const tpserve::internal::v1::AllocateKv& allocate);
  absl::Status WarmUp();
  absl::Status Step(const tpserve::internal::v1::Step& step, tpserve::internal::v1::StepResult& out);
  // KV blocks of block_bytes that fit now: on the GPU after a forward of the
  // largest step (memory_budget.h GpuKvBlocks), on the host in MemAvailable.
  absl::StatusOr<int64_t> GpuKvBlocksNow(int64_t block_bytes, double utilization);
  absl::StatusOr<int64_t> CpuKvBlocksNow(int64_t block_bytes, double utilization) const;
  // Memory this worker's device holds now: GPU memory in use with the CUDA
  // backend (every process on the GPU), else this process's resident set.
  uint64_t UsedBytes() const;

  WorkerOptions options_;
  Store& store_;
  int32_t block_size_ = 16;
  bool enforce_eager_ = false;  // Load's enforce_eager: no CUDA graphs
  absl::Duration simulated_step_ = absl::ZeroDuration();  // Load's simulated_step_us (benchmarks)
  // Load's speculative decoding: rank 0's proposers (method "off": none);
  // their k is the verification graphs' largest (0: the extra rows bound them).
  speculative::ProposerConfig proposers_{.method = "off", .num_speculative_tokens = 0};
  // Destroyed in reverse order: the runner and cache before the model, the
  // model before the rank's sampler, communicator and backend.
  RankResources rank_;
  // Rank 0: the grammars of constrained sequences, compiled against the
  // model's vocabulary (its tokenizer, loaded at the first one) and cached.
  std::unique_ptr<ConstraintCompiler> constraints_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<KvCache> cache_;
  std::unique_ptr<StepRunner> runner_;
};

}  // namespace tpserve
