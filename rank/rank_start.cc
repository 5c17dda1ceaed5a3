#include "rank/rank_start.h"

#include <algorithm>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "backend/cpu_backend.h"
#include "base/status_macros.h"
#include "rank/gpu_query.h"
#include "rank/out_of_step.h"
#include "sampling/limits.h"
#ifdef TPSERVE_WITH_GLOO
#include "comm/gloo_communicator.h"
#endif
#ifdef TPSERVE_WITH_NCCL
#include "comm/nccl_communicator.h"
#endif
#ifdef TPSERVE_WITH_CUDA
#include "cuda/cuda_backend.h"
#include "cuda/cuda_sampler.h"
#include "cuda/rank_order_all_reduce.h"
#endif

namespace tpserve {
namespace {

absl::Status MakeBackend(const RankEnv& env, const RankStartOptions& options, RankResources& rank) {
  if (options.backend == "cpu") {
    int threads = options.cpu_threads;
    if (threads <= 0) {
      threads = std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / env.local_ranks());
    }
    rank.backend = MakeCpuBackend(threads);
    return absl::OkStatus();
  }
  if (options.backend != "cuda") {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown backend \"", options.backend, "\"; use \"cpu\" or \"cuda\""));
  }
  TPSERVE_ASSIGN_OR_RETURN(const GpuPlacement place, PlaceRankOnGpu(env));  // fails without CUDA
#ifdef TPSERVE_WITH_CUDA
  CudaBackendOptions cuda_options;
  TPSERVE_ASSIGN_OR_RETURN(cuda_options.kernels, cuda::KernelSetFromEnvironment());
  TPSERVE_ASSIGN_OR_RETURN(cuda_options.programmatic_launch, cuda::ProgrammaticLaunchFromEnvironment());
  TPSERVE_ASSIGN_OR_RETURN(const bool deterministic_env, cuda::DeterministicFromEnvironment());
  cuda_options.deterministic = options.deterministic || deterministic_env;
  rank.backend = MakeCudaBackend(place.device, cuda_options);
  rank.gpu = place;
  rank.deterministic = cuda_options.deterministic;
  return absl::OkStatus();
#else
  (void)place;
  return absl::InternalError("a GPU was placed in a build without CUDA");
#endif
}

absl::StatusOr<std::unique_ptr<Communicator>> MakeNccl(const RankEnv& env, const RankStartOptions& options,
                                                       Store& store, const RankResources& rank) {
#ifdef TPSERVE_WITH_NCCL
  NcclOptions nccl;
  nccl.device = rank.gpu->device;
  nccl.stream = static_cast<cudaStream_t>(rank.backend->stream());
  if (options.timeout.count() > 0) nccl.timeout = options.timeout;
  absl::StatusOr<std::unique_ptr<NcclCommunicator>> comm = NcclCommunicator::Create(store, env.rank, env.world_size, nccl);
  if (!comm.ok()) return MarkOutOfStep(comm.status());  // the other ranks cannot go on without this one
  if (!rank.deterministic) return std::unique_ptr<Communicator>(*std::move(comm));
  // NCCL's own all-reduce orders each element's sum by the buffer's length
  // (cuda/rank_order_all_reduce.h): all-gather, then add in rank order.
  absl::StatusOr<std::unique_ptr<Communicator>> ordered =
      cuda::MakeRankOrderAllReduce(*std::move(comm), nccl.stream, options.max_all_reduce_elements);
  if (!ordered.ok()) return MarkOutOfStep(ordered.status());  // the peers have their communicators
  return ordered;
#else
  (void)env, (void)options, (void)store, (void)rank;
  return absl::InternalError("NCCL was chosen in a build without NCCL");
#endif
}

absl::StatusOr<std::unique_ptr<Communicator>> MakeGloo(const RankEnv& env, const RankStartOptions& options,
                                                       Store& store) {
#ifdef TPSERVE_WITH_GLOO
  GlooOptions gloo;
  gloo.hostname = options.gloo_host;
  if (options.timeout.count() > 0) gloo.timeout = options.timeout;
  absl::StatusOr<std::unique_ptr<Communicator>> comm = MakeGlooCommunicator(store, env.rank, env.world_size, gloo);
  if (!comm.ok()) return MarkOutOfStep(comm.status());  // the other ranks cannot go on without this one
  return comm;
#else
  (void)options, (void)store;
  return absl::UnimplementedError(
      absl::StrCat("tensor parallelism over ", env.world_size,
                   " CPU ranks needs the gloo communicator, and this build has none (install libgloo-dev and "
                   "rebuild)"));
#endif
}

absl::Status MakeCommunicator(const RankEnv& env, const RankStartOptions& options, RankResources& rank) {
  const CommKind kind = rank.gpu.has_value() ? rank.gpu->comm
                        : env.world_size == 1 ? CommKind::kSolo
                                              : CommKind::kGloo;
  if (kind == CommKind::kSolo) {
    rank.comm = MakeSoloCommunicator();
    return absl::OkStatus();
  }
  if (options.store == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", env.rank, " of ", env.world_size,
                     ": several ranks need a rendezvous store shared by all of them (RankStartOptions::store), "
                     "and none was given"));
  }
  Store* store = options.store;
  if (!options.store_prefix.empty()) {
    rank.prefix_store = std::make_unique<PrefixStore>(options.store_prefix, *options.store);
    store = rank.prefix_store.get();
  }
  if (kind == CommKind::kNccl && rank.deterministic && options.max_all_reduce_elements <= 0) {
    return absl::InvalidArgumentError(
        "deterministic NCCL ranks need RankStartOptions::max_all_reduce_elements (the step's most tokens × the "
        "hidden size) for the all-reduce's workspace");
  }
  TPSERVE_ASSIGN_OR_RETURN(rank.comm, kind == CommKind::kNccl ? MakeNccl(env, options, *store, rank)
                                                              : MakeGloo(env, options, *store));
  return absl::OkStatus();
}

absl::Status MakeSampler(const RankEnv& env, const RankStartOptions& options, RankResources& rank) {
  if (!rank.gpu.has_value() || env.rank != 0) return absl::OkStatus();  // the host samples
#ifdef TPSERVE_WITH_CUDA
  if (options.vocab_size <= 0 || options.max_seqs <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank 0's CUDA sampler needs RankStartOptions::vocab_size (config.json's vocab_size, got ",
                     options.vocab_size, ") and max_seqs (got ", options.max_seqs, ") above 0"));
  }
  cuda::CudaSampler::Options sampling;
  sampling.max_seqs = options.max_seqs;
  sampling.vocab_size = options.vocab_size;
  sampling.max_logprobs = kMaxLogprobs;
  // The same kernel set as the backend's (TPSERVE_KERNELS; validated when the backend was made).
  TPSERVE_ASSIGN_OR_RETURN(sampling.kernels, cuda::KernelSetFromEnvironment());
  // Deterministic: always the one-block-per-row kernel. The sliced path
  // serves only some steps (few rows, no penalties or log-probs) and may
  // round a CDF boundary otherwise, so a row's token would depend on the rest.
  if (rank.deterministic) sampling.kernels = cuda::KernelSet::kReference;
  TPSERVE_ASSIGN_OR_RETURN(rank.sampler,
                           cuda::CudaSampler::Create(sampling, static_cast<cudaStream_t>(rank.backend->stream())));
#else
  (void)options;
#endif
  return absl::OkStatus();
}

}  // namespace

RankResources& RankResources::operator=(RankResources&& other) noexcept {
  if (this == &other) return *this;
  sampler.reset();
  comm.reset();
  prefix_store.reset();
  backend.reset();
  backend = std::move(other.backend);
  prefix_store = std::move(other.prefix_store);
  comm = std::move(other.comm);
  sampler = std::move(other.sampler);
  gpu = std::exchange(other.gpu, std::nullopt);
  deterministic = other.deterministic;
  return *this;
}

absl::StatusOr<RankResources> StartRank(const RankEnv& env, const RankStartOptions& options) {
  RankResources rank;
  TPSERVE_RETURN_IF_ERROR(MakeBackend(env, options, rank));  // first: NCCL and the sampler use its stream
  TPSERVE_RETURN_IF_ERROR(MakeCommunicator(env, options, rank));
  TPSERVE_RETURN_IF_ERROR(MakeSampler(env, options, rank));
  return rank;
}

}  // namespace tpserve
