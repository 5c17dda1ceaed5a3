// CommandHandler: what a worker does with each coordinator command
// (worker.proto), without the networking: Load creates the backend, the
// communicator (gloo over the rendezvous store when world > 1) and the model;
// with backend "cuda" the GPU of its local rank and NCCL (gloo when ranks share
// a GPU, see comm/gpu_placement.h); Profile answers how many KV blocks fit (on a GPU
// measured after a forward of the largest step); AllocateKv allocates them; WarmUp;
// Step runs the StepRunner; Shutdown ends the worker.
//
// Every command gets exactly one reply with the command's seq; a command that
// failed carries the reason in `error` and the worker goes on, except when the
// failure leaves the ranks out of step (a failed collective or rendezvous):
// then the reply says so and `exit_code` tells the process to end.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "backend/backend.h"
#include "comm/communicator.h"
#include "comm/rank_env.h"
#include "comm/store.h"
#include "proto/protocol_version.h"
#include "sampling/limits.h"
#include "tpserve/internal/v1/worker.pb.h"
#include "sampling/device_sampler.h"
#include "worker/kv_cache.h"
#include "worker/model.h"
#include "worker/step_runner.h"
#include "comm/gpu_placement.h"

namespace tpserve {


struct WorkerOptions {
  RankEnv rank;                        // rank, world size, local rank / world size
  std::string comm_host = "127.0.0.1"; // address gloo listens on (peers connect to it)
  int cpu_threads = 0;                 // GEMM threads; 0 = cores / local ranks
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
  absl::Status Load(const tpserve::internal::v1::Load& load, tpserve::internal::v1::Loaded& out, bool& fatal);
  absl::Status Profile(const tpserve::internal::v1::Profile& profile, tpserve::internal::v1::ProfileResult& out);
  absl::Status AllocateKv(const tpserve::internal::v1::AllocateKv& allocate);
  // Memory this worker's device holds now: GPU memory in use with the CUDA
  // backend (every process on the GPU), else this process's resident set.
  uint64_t UsedBytes() const;
  absl::Status Step(const tpserve::internal::v1::Step& step, tpserve::internal::v1::StepResult& out, bool& fatal);

  WorkerOptions options_;
  Store& store_;
  int32_t block_size_ = 16;
  bool enforce_eager_ = false;  // Load's enforce_eager: no CUDA graphs
  bool cuda_ = false;          // Load chose the CUDA backend
  GpuPlacement placement_;     // its device and communicator, when cuda_
  // Destroyed in reverse order: the runner and cache before the model, the
  // model before the communicator and backend.
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Store> prefix_store_;
  std::unique_ptr<Communicator> comm_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<DeviceSampler> sampler_;  // rank 0 with the CUDA backend: sampling on the GPU
  std::unique_ptr<KvCache> cache_;
  std::unique_ptr<StepRunner> runner_;
};

}  // namespace tpserve
