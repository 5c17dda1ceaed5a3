// StartRank: the one place where a tensor-parallel rank gets what it computes
// with, from its place among the ranks (comm/rank_env.h) and a few options.
// tpserve-worker (Load) and tpserve-generate both start their ranks here.
//
//   backend "cpu":   the CPU backend with cpu_threads GEMM threads; the
//                    communicator is solo (world size 1) or gloo over `store`.
//   backend "cuda":  the rank's GPU and communicator by comm/gpu_placement.h:
//                    solo, NCCL on the backend's stream (a GPU per rank), or
//                    gloo staging device buffers through host memory (ranks
//                    sharing a GPU). Rank 0 also gets the device sampler
//                    (cuda::CudaSampler for max_seqs rows of vocab_size logits
//                    and sampling/limits.h's kMaxLogprobs).
//                    Deterministic (options.deterministic, or
//                    TPSERVE_DETERMINISTIC=1 in the environment): the
//                    backend's batch-invariant kernels (cuda/cuda_backend.h),
//                    the one-block-per-row sampler, and NCCL's all-reduce
//                    replaced by an all-gather summed in rank order
//                    (cuda/rank_order_all_reduce.h; gloo already sums so).
//                    The CPU backend is batch-invariant always.
//
// Errors, each naming the option and the fix: INVALID_ARGUMENT for an unknown
// backend name, a missing store when world_size > 1, or a missing vocab_size
// where a sampler is made; FAILED_PRECONDITION for "cuda" in a build without
// CUDA or on a host without a visible GPU (rank/gpu_query.h), or for CUDA ranks
// without the communicator they need (comm/gpu_placement.h); UNIMPLEMENTED for
// several CPU ranks in a build without gloo. A communicator
// that could not be made (a rendezvous timeout, a peer gone) is returned with
// rank/out_of_step.h's mark: the other ranks cannot go on without this one.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "backend/backend.h"
#include "comm/communicator.h"
#include "comm/gpu_placement.h"
#include "comm/rank_env.h"
#include "comm/store.h"
#include "sampling/device_sampler.h"

namespace tpserve {

struct RankStartOptions {
  std::string backend = "cpu";           // "cpu" or "cuda"
  int cpu_threads = 0;                   // CPU backend GEMM threads; 0 = cores / local ranks
  std::string gloo_host = "127.0.0.1";   // address gloo listens on (peers connect to it)
  // Rendezvous and collective timeout; 0 = the communicator's own default
  // (gloo 60 s, NCCL 120 s).
  std::chrono::milliseconds timeout{0};
  // The rendezvous store the ranks share; required when world_size > 1, not
  // owned, must outlive the communicator. Keys go under store_prefix (empty:
  // the store as is), so one store can serve several rendezvous.
  Store* store = nullptr;
  std::string store_prefix;
  // Rank 0's device sampler: the vocabulary (config.json's vocab_size; > 0
  // when a sampler is made) and the most sequences in one step.
  int64_t vocab_size = 0;
  int32_t max_seqs = 256;
  // CUDA ranks: batch-invariant kernels, sampler and all-reduce (above).
  bool deterministic = false;
  // The most elements one all-reduce carries (the step's most tokens × the
  // hidden size): the deterministic all-reduce's workspace over NCCL; needed
  // (> 0) there, unused elsewhere.
  int64_t max_all_reduce_elements = 0;
};

// What StartRank made. Members are destroyed in reverse order: the sampler and
// communicator before the store view and the backend whose stream they use.
struct RankResources {
  RankResources() = default;
  RankResources(RankResources&&) noexcept = default;
  // Releases what this one holds in that same order before taking `other`'s
  // (a member-wise move would free the backend first).
  RankResources& operator=(RankResources&& other) noexcept;

  std::unique_ptr<Backend> backend;
  std::unique_ptr<Store> prefix_store;     // the view of options.store under store_prefix
  std::unique_ptr<Communicator> comm;
  std::unique_ptr<DeviceSampler> sampler;  // rank 0 on the CUDA backend; else null
  std::optional<GpuPlacement> gpu;         // the CUDA backend's device and communicator kind
  bool deterministic = false;              // a CUDA rank in deterministic mode (flag or environment)
};

// Makes rank env.rank's backend, communicator and (rank 0, CUDA) device
// sampler. INVALID_ARGUMENT also for a malformed TPSERVE_KERNELS, TPSERVE_PDL
// or TPSERVE_DETERMINISTIC, and for deterministic NCCL ranks without
// max_all_reduce_elements. Blocks in the rendezvous until every rank has arrived (or the
// timeout passed) when world_size > 1.
absl::StatusOr<RankResources> StartRank(const RankEnv& env, const RankStartOptions& options);

}  // namespace tpserve
