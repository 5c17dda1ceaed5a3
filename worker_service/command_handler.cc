#include "worker_service/command_handler.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "backend/cpu_backend.h"
#include "worker/decode_graphs.h"
#include "worker_service/memory_budget.h"
#include "worker_service/profile_step.h"
#include "worker_service/step_convert.h"
#ifdef TPSERVE_WITH_GLOO
#include "comm/gloo_communicator.h"
#endif
#ifdef TPSERVE_WITH_NCCL
#include "comm/nccl_communicator.h"
#endif
#ifdef TPSERVE_WITH_CUDA
#include "cuda/check.h"
#include "cuda/cuda_backend.h"
#include "cuda/cuda_sampler.h"
#include "cuda/device_info.h"
#endif

namespace tpserve {
namespace iv1 = tpserve::internal::v1;
namespace {

#ifdef TPSERVE_WITH_NCCL
constexpr bool kHaveNccl = true;
#else
constexpr bool kHaveNccl = false;
#endif
#ifdef TPSERVE_WITH_GLOO
constexpr bool kHaveGloo = true;
#else
constexpr bool kHaveGloo = false;
#endif

// Kept free after the KV cache for what the warm-up adds (CUDA graphs).
constexpr uint64_t kCudaGraphReserveBytes = uint64_t{256} << 20;


// Resident memory of this process (VmRSS) in bytes, 0 when unknown.
uint64_t ResidentBytes() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoull(line.substr(6)) * 1024;
  }
  return 0;
}

std::string HostName() {
  char buf[256] = {};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "unknown";
  return buf;
}

}  // namespace

CommandHandler::~CommandHandler() {
  runner_.reset();
  cache_.reset();
  sampler_.reset();
  model_.reset();
  comm_.reset();
  prefix_store_.reset();
  backend_.reset();
}

iv1::Hello CommandHandler::MakeHello() const {
  iv1::Hello hello;
  hello.set_protocol_version(kWorkerProtocolVersion);
  hello.set_rank(static_cast<uint32_t>(options_.rank.rank));
  hello.set_world_size(static_cast<uint32_t>(options_.rank.world_size));
  hello.set_local_rank(static_cast<uint32_t>(options_.rank.local_rank));
  hello.set_host(HostName());
#ifdef TPSERVE_WITH_CUDA
  // A GPU this rank would use: its name and free memory (the coordinator's
  // --backend auto picks cuda when every rank reports one).
  if (const int count = cuda::DeviceCount(); count > 0) {
    absl::StatusOr<GpuPlacement> place = PlaceOnGpu(options_.rank, count, kHaveNccl, kHaveGloo);
    const int device = place.ok() ? place->device : options_.rank.local_rank % count;
    if (absl::StatusOr<cuda::DeviceInfo> info = cuda::QueryDevice(device); info.ok()) {
      hello.set_device(absl::StrCat(info->name, " (cuda:", device, ")"));
      hello.set_free_memory(info->free_bytes);
      hello.set_pid(static_cast<uint32_t>(getpid()));
      return hello;
    }
  }
#endif
  hello.set_device("cpu");
  absl::StatusOr<uint64_t> available = MemAvailableBytes();
  hello.set_free_memory(available.ok() ? *available : 0);
  hello.set_pid(static_cast<uint32_t>(getpid()));
  return hello;
}

CommandHandler::Outcome CommandHandler::Handle(const iv1::CoordinatorMessage& command) {
  Outcome outcome;
  iv1::WorkerMessage& reply = outcome.reply;
  reply.set_seq(command.seq());
  absl::Status status;
  bool fatal = false;
  switch (command.command_case()) {
    case iv1::CoordinatorMessage::kLoad:
      status = Load(command.load(), *reply.mutable_loaded(), fatal);
      break;
    case iv1::CoordinatorMessage::kProfile:
      status = Profile(command.profile(), *reply.mutable_profile());
      break;
    case iv1::CoordinatorMessage::kAllocateKv:
      status = AllocateKv(command.allocate_kv());
      reply.mutable_ack();
      break;
    case iv1::CoordinatorMessage::kWarmUp:
      // Reserves the step buffers and captures the decode graphs (nothing to
      // capture on the CPU backend or with --enforce-eager).
      if (runner_ == nullptr) {
        status = absl::FailedPreconditionError("WarmUp before AllocateKv");
      } else {
        status = runner_->WarmUp();
        fatal = !status.ok();  // a capture holds collectives: the ranks are out of step
      }
      reply.mutable_ack();
      break;
    case iv1::CoordinatorMessage::kStep:
      status = Step(command.step(), *reply.mutable_step(), fatal);
      break;
    case iv1::CoordinatorMessage::kShutdown:
      reply.mutable_ack();
      outcome.exit_code = 0;
      break;
    case iv1::CoordinatorMessage::COMMAND_NOT_SET:
      status = absl::InvalidArgumentError(
          absl::StrCat("command ", command.seq(), " carries no command this worker knows (protocol version ",
                       kWorkerProtocolVersion, "); are the coordinator and worker from the same build?"));
      break;
  }
  if (!status.ok()) {
    reply.set_error(status.ToString());  // the coordinator prefixes the rank
    if (fatal) outcome.exit_code = 1;
  }
  return outcome;
}

absl::Status CommandHandler::Load(const iv1::Load& load, iv1::Loaded& out, bool& fatal) {
  if (model_ != nullptr) return absl::FailedPreconditionError("Load: a model is already loaded; start a new worker");
  const int world = options_.rank.world_size;
  if (static_cast<int>(load.tensor_parallel_size()) != world) {
    return absl::InvalidArgumentError(absl::StrCat("Load: tensor_parallel_size ", load.tensor_parallel_size(),
                                                   " but this worker is one of ", world,
                                                   " ranks; start as many workers as --tp"));
  }
  if (load.backend() == "cpu") {
    int threads = options_.cpu_threads;
    if (threads <= 0) {
      threads = std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / options_.rank.local_ranks());
    }
    backend_ = MakeCpuBackend(threads);
  } else if (load.backend() == "cuda") {
#ifdef TPSERVE_WITH_CUDA
    absl::StatusOr<GpuPlacement> place = PlaceOnGpu(options_.rank, cuda::DeviceCount(), kHaveNccl, kHaveGloo);
    if (!place.ok()) return place.status();
    placement_ = *place;
    cuda_ = true;
    backend_ = MakeCudaBackend(placement_.device);
#else
    return absl::FailedPreconditionError(
        "Load: this tpserve-worker was built without CUDA (nvcc was not found when it was built); rebuild "
        "on a machine with the CUDA toolkit, or serve with --backend cpu");
#endif
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("Load: unknown backend \"", load.backend(), "\"; use \"cpu\" or \"cuda\""));
  }
  block_size_ = load.block_size() > 0 ? static_cast<int32_t>(load.block_size()) : 16;
  enforce_eager_ = load.enforce_eager();

  if (world == 1) {
    comm_ = MakeSoloCommunicator();
  } else if (cuda_ && placement_.comm == CommKind::kNccl) {
#ifdef TPSERVE_WITH_NCCL
    prefix_store_ = std::make_unique<PrefixStore>(load.store_prefix(), store_);
    NcclOptions nccl;
    nccl.device = placement_.device;
    nccl.stream = static_cast<cudaStream_t>(backend_->stream());
    absl::StatusOr<std::unique_ptr<NcclCommunicator>> comm =
        NcclCommunicator::Create(*prefix_store_, options_.rank.rank, world, nccl);
    if (!comm.ok()) {
      fatal = true;  // the other ranks cannot go on without this one
      return comm.status();
    }
    comm_ = *std::move(comm);
#else
    return absl::InternalError("Load: NCCL was chosen in a build without NCCL");
#endif
  } else {
#ifdef TPSERVE_WITH_GLOO
    prefix_store_ = std::make_unique<PrefixStore>(load.store_prefix(), store_);
    GlooOptions gloo;
    gloo.hostname = options_.comm_host;
    absl::StatusOr<std::unique_ptr<Communicator>> comm =
        MakeGlooCommunicator(*prefix_store_, options_.rank.rank, world, gloo);
    if (!comm.ok()) {
      fatal = true;  // the other ranks cannot go on without this one
      return comm.status();
    }
    comm_ = *std::move(comm);
#else
    return absl::UnimplementedError(absl::StrCat(
        "Load: tensor parallelism over ", world, " CPU ranks needs the gloo communicator, and this build has none "
        "(install libgloo-dev and rebuild)"));
#endif
  }

  ModelOptions options;
  if (load.max_num_batched_tokens() > 0) options.max_num_tokens = load.max_num_batched_tokens();
  if (load.max_num_seqs() > 0) options.max_num_seqs = load.max_num_seqs();
  options.max_position = load.max_model_len();
  const uint64_t before = UsedBytes();
  absl::StatusOr<std::unique_ptr<Model>> model = Model::Load(load.model_dir(), *backend_, *comm_, options);
  if (!model.ok()) return model.status();
  model_ = *std::move(model);
#ifdef TPSERVE_WITH_CUDA
  if (cuda_ && options_.rank.rank == 0) {
    cuda::CudaSampler::Options sampling;
    sampling.max_seqs = static_cast<int32_t>(options.max_num_seqs);
    sampling.vocab_size = model_->config().vocab_size;
    sampling.max_logprobs = kMaxLogprobs;
    absl::StatusOr<std::unique_ptr<cuda::CudaSampler>> sampler =
        cuda::CudaSampler::Create(sampling, static_cast<cudaStream_t>(backend_->stream()));
    if (!sampler.ok()) return sampler.status();
    sampler_ = *std::move(sampler);
  }
#endif
  const uint64_t after = UsedBytes();
  out.set_weight_bytes(after > before ? after - before : 0);  // weights + activation buffers
  return absl::OkStatus();
}

uint64_t CommandHandler::UsedBytes() const {
#ifdef TPSERVE_WITH_CUDA
  if (cuda_) {
    backend_->Synchronize();
    absl::StatusOr<cuda::DeviceInfo> info = cuda::QueryDevice(placement_.device);
    return info.ok() ? info->total_bytes - info->free_bytes : 0;
  }
#endif
  return ResidentBytes();
}

absl::Status CommandHandler::Profile(const iv1::Profile& profile, iv1::ProfileResult& out) {
  if (model_ == nullptr) return absl::FailedPreconditionError("Profile before Load");
  const int64_t block_bytes = KvCacheBytesPerBlock(model_->kv_cache_shape(1, block_size_), backend_->compute_dtype());
  const double utilization = profile.gpu_memory_utilization() > 0 ? profile.gpu_memory_utilization() : 0.9;
#ifdef TPSERVE_WITH_CUDA
  if (cuda_) {
    // Measure the device at its peak: after the step buffers are reserved and
    // a forward of the largest step ran (cuBLAS workspaces included).
    // (StepRunner::WarmUp reserves the same capacity again: same sizes.)
    if (absl::Status st = backend_->Reserve(StepCapacityFor(*model_, block_size_)); !st.ok()) return st;
    if (absl::Status st = RunProfileStep(*model_, *backend_, block_size_); !st.ok()) return st;
    absl::StatusOr<cuda::DeviceInfo> info = cuda::QueryDevice(placement_.device);
    if (!info.ok()) return info.status();
    GpuKvBudget budget;
    budget.total_bytes = info->total_bytes;
    budget.free_bytes = info->free_bytes;
    budget.utilization = utilization;
    budget.ranks_per_device = placement_.ranks_per_device;
    budget.reserve_bytes = kCudaGraphReserveBytes;
    budget.block_bytes = block_bytes;
    budget.max_num_seqs = model_->options().max_num_seqs;
    budget.max_model_len = model_->max_position();
    budget.block_size = block_size_;
    absl::StatusOr<int64_t> blocks = GpuKvBlocks(budget);
    if (!blocks.ok()) return blocks.status();
    out.set_max_num_blocks(static_cast<uint64_t>(*blocks));
    out.set_block_bytes(static_cast<uint64_t>(block_bytes));
    return absl::OkStatus();
  }
#endif
  absl::StatusOr<uint64_t> available = MemAvailableBytes();
  if (!available.ok()) return available.status();
  CpuKvBudget budget;
  budget.available_bytes = *available;
  budget.utilization = utilization;
  budget.local_ranks = options_.rank.local_ranks();
  budget.block_bytes = block_bytes;
  budget.max_num_seqs = model_->options().max_num_seqs;
  budget.max_model_len = model_->max_position();
  budget.block_size = block_size_;
  absl::StatusOr<int64_t> blocks = CpuKvBlocks(budget);
  if (!blocks.ok()) return blocks.status();
  out.set_max_num_blocks(static_cast<uint64_t>(*blocks));
  out.set_block_bytes(static_cast<uint64_t>(block_bytes));
  return absl::OkStatus();
}

absl::Status CommandHandler::AllocateKv(const iv1::AllocateKv& allocate) {
  if (model_ == nullptr) return absl::FailedPreconditionError("AllocateKv before Load");
  if (allocate.num_blocks() == 0) return absl::InvalidArgumentError("AllocateKv: num_blocks is 0; allocate at least 1");
  runner_.reset();
  cache_.reset();  // free the old cache before allocating a new one
  absl::StatusOr<KvCache> cache =
      KvCache::Allocate(*backend_, model_->kv_cache_shape(static_cast<int64_t>(allocate.num_blocks()), block_size_));
  if (!cache.ok()) return cache.status();
  cache_ = std::make_unique<KvCache>(*std::move(cache));
  runner_ = std::make_unique<StepRunner>(*model_, *cache_, options_.rank.rank,
                                         StepRunnerOptions{.enforce_eager = enforce_eager_, .sampler = sampler_.get()});
  return absl::OkStatus();
}

absl::Status CommandHandler::Step(const iv1::Step& step, iv1::StepResult& out, bool& fatal) {
  out.set_step_id(step.step_id());
  if (runner_ == nullptr) return absl::FailedPreconditionError("Step before AllocateKv");
  absl::StatusOr<StepPlan> plan = StepPlanFromProto(step);
  if (!plan.ok()) return plan.status();
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<std::vector<StepToken>> tokens = runner_->Run(*plan);
  if (!tokens.ok()) {
    // A plan the runner rejects leaves every rank's state as it was; anything
    // else (a collective) leaves the ranks out of step.
    fatal = tokens.status().code() != absl::StatusCode::kInvalidArgument;
    return absl::Status(tokens.status().code(),
                        absl::StrCat("step ", step.step_id(), ": ", tokens.status().message()));
  }
  out.set_compute_seconds(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  AppendTokens(*tokens, out);
  return absl::OkStatus();
}

}  // namespace tpserve
