#include "worker_service/command_handler.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "base/host_name.h"
#include "base/proc_status.h"
#include "base/status_macros.h"
#include "model/config.h"
#include "rank/gpu_query.h"
#include "rank/out_of_step.h"
#include "tools/grammar/model_vocabulary.h"
#include "worker/decode_graphs.h"
#include "worker_service/memory_budget.h"
#include "worker_service/profile_step.h"
#include "proto/step_convert.h"

namespace tpserve {
namespace iv1 = tpserve::internal::v1;
namespace {

// Kept free after the KV cache for what the warm-up adds (CUDA graphs).
constexpr uint64_t kCudaGraphReserveBytes = uint64_t{256} << 20;

}  // namespace

// Members go in reverse: the runner and cache before the model, the model
// before the rank's sampler, communicator and backend.
CommandHandler::~CommandHandler() = default;

iv1::Hello CommandHandler::MakeHello() const {
  iv1::Hello hello;
  hello.set_protocol_version(kWorkerProtocolVersion);
  hello.set_rank(static_cast<uint32_t>(options_.rank.rank));
  hello.set_world_size(static_cast<uint32_t>(options_.rank.world_size));
  hello.set_local_rank(static_cast<uint32_t>(options_.rank.local_rank));
  if (options_.rank.dp_rank) hello.set_dp_rank(static_cast<uint32_t>(*options_.rank.dp_rank));
  hello.set_host(HostName());
  hello.set_pid(static_cast<uint32_t>(getpid()));
  // A GPU this rank would use: its name and free memory (the coordinator's
  // --backend auto picks cuda when every rank reports one).
  if (absl::StatusOr<GpuInfo> gpu = QueryRankGpu(options_.rank); gpu.ok()) {
    hello.set_device(absl::StrCat(gpu->name, " (cuda:", gpu->device, ")"));
    hello.set_free_memory(gpu->free_bytes);
    return hello;
  }
  hello.set_device("cpu");
  absl::StatusOr<uint64_t> available = MemAvailableBytes();
  hello.set_free_memory(available.ok() ? *available : 0);
  return hello;
}

CommandHandler::Outcome CommandHandler::Handle(const iv1::CoordinatorMessage& command) {
  Outcome outcome;
  iv1::WorkerMessage& reply = outcome.reply;
  reply.set_seq(command.seq());
  absl::Status status;
  switch (command.command_case()) {
    case iv1::CoordinatorMessage::kLoad:
      status = Load(command.load(), *reply.mutable_loaded());
      break;
    case iv1::CoordinatorMessage::kProfile:
      status = Profile(command.profile(), *reply.mutable_profile());
      break;
    case iv1::CoordinatorMessage::kAllocateKv:
      status = AllocateKv(command.allocate_kv());
      reply.mutable_ack();
      break;
    case iv1::CoordinatorMessage::kWarmUp:
      status = WarmUp();
      reply.mutable_ack();
      break;
    case iv1::CoordinatorMessage::kStep:
      status = Step(command.step(), *reply.mutable_step());
      break;
    case iv1::CoordinatorMessage::kShutdown:
      reply.mutable_ack();
      outcome.exit_code = 0;
      break;
    case iv1::CoordinatorMessage::kUseSharedMemory:  // the session's, not the handler's
      status = absl::InternalError("UseSharedMemory reached the command handler; the session answers it");
      break;
    case iv1::CoordinatorMessage::COMMAND_NOT_SET:
      status = absl::InvalidArgumentError(
          absl::StrCat("command ", command.seq(), " carries no command this worker knows (protocol version ",
                       kWorkerProtocolVersion, "); are the coordinator and worker from the same build?"));
      break;
  }
  if (!status.ok()) {
    reply.set_error(status.ToString());  // the coordinator prefixes the rank
    if (IsOutOfStep(status)) {
      outcome.exit_code = 1;
      reply.set_exiting(true);
    }
  }
  return outcome;
}

namespace {

// Load's speculative decoding fields as rank 0's ProposerConfig, checked
// (INVALID_ARGUMENT naming the coordinator's flag); method "off" when unset.
absl::StatusOr<speculative::ProposerConfig> ProposersOf(const iv1::Load& load) {
  speculative::ProposerConfig c;
  c.method = load.speculative_method().empty() ? "off" : load.speculative_method();
  c.num_speculative_tokens = static_cast<int32_t>(std::min<uint32_t>(load.num_speculative_tokens(), 1u << 16));
  if (c.method == "off" && c.num_speculative_tokens == 0) return c;  // no speculation, or graphs bounded by rows
  if (load.prompt_lookup_min() > 0) c.prompt_lookup_min = static_cast<int32_t>(std::min<uint32_t>(load.prompt_lookup_min(), 1u << 16));
  if (load.prompt_lookup_max() > 0) c.prompt_lookup_max = static_cast<int32_t>(std::min<uint32_t>(load.prompt_lookup_max(), 1u << 16));
  if (absl::Status s = speculative::ValidateProposerConfig(c); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("Load: ", s.message()));
  }
  return c;
}

}  // namespace

absl::Status CommandHandler::Load(const iv1::Load& load, iv1::Loaded& out) {
  if (model_ != nullptr) return absl::FailedPreconditionError("Load: a model is already loaded; start a new worker");
  const int world = options_.rank.world_size;
  if (static_cast<int>(load.tensor_parallel_size()) != world) {
    return absl::InvalidArgumentError(absl::StrCat("Load: tensor_parallel_size ", load.tensor_parallel_size(),
                                                   " but this worker is one of ", world,
                                                   " ranks; start as many workers as --tp"));
  }
  ModelOptions options;
  if (load.max_num_batched_tokens() > 0) options.max_num_tokens = load.max_num_batched_tokens();
  if (load.max_num_seqs() > 0) options.max_num_seqs = load.max_num_seqs();
  options.max_position = load.max_model_len();
  // Speculative decoding: a step's logits rows, one per sequence and one per proposed token.
  if (load.max_num_draft_tokens() > 0) options.max_num_logits_rows = options.max_num_seqs + load.max_num_draft_tokens();
  TPSERVE_ASSIGN_OR_RETURN(const ModelConfig config, LoadModelConfig(load.model_dir()));

  RankStartOptions start;
  start.backend = load.backend();
  start.cpu_threads = options_.cpu_threads;
  start.gloo_host = options_.comm_host;
  start.store = &store_;
  start.store_prefix = load.store_prefix();
  start.timeout = std::chrono::milliseconds(load.collective_timeout_ms());
  start.vocab_size = config.vocab_size;
  start.max_seqs = static_cast<int32_t>(options.max_num_seqs);
  start.deterministic = options_.deterministic || load.deterministic();
  start.max_all_reduce_elements = options.max_num_tokens * config.hidden_size;  // [T, D]: embedding, o_proj, down
  rank_ = RankResources();  // what a failed Load made goes (in order) before the new rank is made
  TPSERVE_ASSIGN_OR_RETURN(rank_, StartRank(options_.rank, start));  // a failed rendezvous is out of step
  block_size_ = load.block_size() > 0 ? static_cast<int32_t>(load.block_size()) : 16;
  enforce_eager_ = load.enforce_eager();
  simulated_step_ = absl::Microseconds(load.simulated_step_us());
  TPSERVE_ASSIGN_OR_RETURN(proposers_, ProposersOf(load));

  const uint64_t before = UsedBytes();
  TPSERVE_ASSIGN_OR_RETURN(model_, Model::Load(load.model_dir(), *rank_.backend, *rank_.comm, options));
  const uint64_t after = UsedBytes();
  if (options_.rank.rank == 0) {  // the sampler's rank compiles constrained sequences' grammars
    constraints_ = std::make_unique<ConstraintCompiler>(
        [dir = load.model_dir()]() -> absl::StatusOr<std::shared_ptr<const grammar::Vocabulary>> {
          TPSERVE_ASSIGN_OR_RETURN(ModelVocabulary v, LoadModelVocabulary(dir));
          return v.vocabulary;
        });
  }
  out.set_weight_bytes(after > before ? after - before : 0);  // weights + activation buffers
  return absl::OkStatus();
}

uint64_t CommandHandler::UsedBytes() const {
  if (rank_.gpu.has_value()) {
    rank_.backend->Synchronize();
    absl::StatusOr<GpuInfo> info = QueryGpu(rank_.gpu->device);
    return info.ok() ? info->total_bytes - info->free_bytes : 0;
  }
  const int64_t resident_kb = ProcStatusKb("VmRSS");
  return resident_kb > 0 ? static_cast<uint64_t>(resident_kb) * 1024 : 0;
}

absl::Status CommandHandler::Profile(const iv1::Profile& profile, iv1::ProfileResult& out) {
  if (model_ == nullptr) return absl::FailedPreconditionError("Profile before Load");
  const int64_t block_bytes =
      KvCacheBytesPerBlock(model_->kv_cache_shape(1, block_size_), rank_.backend->compute_dtype());
  const double utilization = profile.gpu_memory_utilization() > 0 ? profile.gpu_memory_utilization() : 0.9;
  TPSERVE_ASSIGN_OR_RETURN(const int64_t blocks, rank_.gpu.has_value() ? GpuKvBlocksNow(block_bytes, utilization)
                                                                       : CpuKvBlocksNow(block_bytes, utilization));
  out.set_max_num_blocks(static_cast<uint64_t>(blocks));
  out.set_block_bytes(static_cast<uint64_t>(block_bytes));
  return absl::OkStatus();
}

absl::StatusOr<int64_t> CommandHandler::GpuKvBlocksNow(int64_t block_bytes, double utilization) {
  // Measure the device at its peak: after the step buffers are reserved and
  // a forward of the largest step ran (cuBLAS workspaces included).
  // (StepRunner::WarmUp reserves the same capacity again: same sizes.)
  TPSERVE_RETURN_IF_ERROR(rank_.backend->Reserve(ReservedCapacityFor(*model_, block_size_)));
  TPSERVE_RETURN_IF_ERROR(RunProfileStep(*model_, *rank_.backend, block_size_));
  TPSERVE_ASSIGN_OR_RETURN(const GpuInfo info, QueryGpu(rank_.gpu->device));
  GpuKvBudget budget;
  budget.total_bytes = info.total_bytes;
  budget.free_bytes = info.free_bytes;
  budget.utilization = utilization;
  budget.ranks_per_device = rank_.gpu->ranks_per_device;
  budget.reserve_bytes = kCudaGraphReserveBytes;
  budget.block_bytes = block_bytes;
  budget.max_num_seqs = model_->options().max_num_seqs;
  budget.max_model_len = model_->max_position();
  budget.block_size = block_size_;
  return GpuKvBlocks(budget);
}

absl::StatusOr<int64_t> CommandHandler::CpuKvBlocksNow(int64_t block_bytes, double utilization) const {
  TPSERVE_ASSIGN_OR_RETURN(const uint64_t available, MemAvailableBytes());
  CpuKvBudget budget;
  budget.available_bytes = available;
  budget.utilization = utilization;
  budget.local_ranks = options_.rank.local_ranks();
  budget.block_bytes = block_bytes;
  budget.max_num_seqs = model_->options().max_num_seqs;
  budget.max_model_len = model_->max_position();
  budget.block_size = block_size_;
  return CpuKvBlocks(budget);
}

absl::Status CommandHandler::AllocateKv(const iv1::AllocateKv& allocate) {
  if (model_ == nullptr) return absl::FailedPreconditionError("AllocateKv before Load");
  if (allocate.num_blocks() == 0) return absl::InvalidArgumentError("AllocateKv: num_blocks is 0; allocate at least 1");
  runner_.reset();
  cache_.reset();  // free the old cache before allocating a new one
  absl::StatusOr<KvCache> cache =
      KvCache::Allocate(*rank_.backend, model_->kv_cache_shape(static_cast<int64_t>(allocate.num_blocks()), block_size_));
  if (!cache.ok()) return cache.status();
  cache_ = std::make_unique<KvCache>(*std::move(cache));
  runner_ = std::make_unique<StepRunner>(*model_, *cache_, options_.rank.rank,
                                         StepRunnerOptions{.enforce_eager = enforce_eager_,
                                                           .sampler = rank_.sampler.get(),
                                                           .simulated_step = simulated_step_,
                                                           .constraints = constraints_.get(),
                                                           .num_speculative_tokens = proposers_.num_speculative_tokens,
                                                           .proposers = proposers_});
  return absl::OkStatus();
}

absl::Status CommandHandler::WarmUp() {
  // Reserves the step buffers and captures the decode graphs (nothing to
  // capture on the CPU backend or with --enforce-eager).
  if (runner_ == nullptr) return absl::FailedPreconditionError("WarmUp before AllocateKv");
  return MarkOutOfStep(runner_->WarmUp());  // a capture holds collectives: the ranks are out of step
}

absl::Status CommandHandler::Step(const iv1::Step& step, iv1::StepResult& out) {
  out.set_step_id(step.step_id());
  if (runner_ == nullptr) return absl::FailedPreconditionError("Step before AllocateKv");
  absl::StatusOr<StepPlan> plan = StepPlanFromProto(step);
  if (!plan.ok()) return plan.status();
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<std::vector<StepToken>> tokens = runner_->Run(*plan);
  if (!tokens.ok()) {
    // A plan the runner rejects leaves every rank's state as it was; anything
    // else (a collective) leaves the ranks out of step.
    absl::Status failed(tokens.status().code(), absl::StrCat("step ", step.step_id(), ": ", tokens.status().message()));
    return absl::IsInvalidArgument(failed) ? failed : MarkOutOfStep(failed);
  }
  out.set_compute_seconds(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  if (options_.rank.rank == 0) {  // the others hold the ids only
    AppendTokens(*tokens, out);
    AppendPromptLogprobs(runner_->prompt_logprobs(), out);
  }
  return absl::OkStatus();
}

}  // namespace tpserve
