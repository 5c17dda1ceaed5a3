// tpserve-coordinator: the serving process (design.md "Processes").
//
//   tpserve-coordinator --model DIR --tp N [--listen 127.0.0.1:50051]
//       [--worker-listen 127.0.0.1:0] [--spawn-workers] ...
//
// Start-up: both gRPC servers listen first (the public one answers UNAVAILABLE
// and health NOT_SERVING until warm), then it waits for N workers' Hello, runs
// Load / Profile / AllocateKv / WarmUp and serves. Two lines on stderr say
// where it listens, for scripts and tests to parse:
//   tpserve-coordinator: workers connect to 127.0.0.1:PORT
//   tpserve-coordinator: serving tpserve.v1.Generation on 127.0.0.1:PORT
// and "tpserve-coordinator: ready" once it serves.
// SIGTERM/SIGINT drain: admission stops (UNAVAILABLE), running streams finish
// or are cut (ABORTED) after --drain-timeout, the workers get Shutdown, exit 0.
// Exit status 1 when start-up fails or a worker was lost.
#include <algorithm>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <pthread.h>
#include <unistd.h>

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "coordinator/engine_loop.h"
#include "coordinator/generation_service.h"
#include "coordinator/log.h"
#include "coordinator/startup.h"
#include "coordinator/worker_pool.h"
#include "launcher/find_program.h"
#include "launcher/process_group.h"
#include "model/config.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

ABSL_FLAG(std::string, model, "", "Hugging Face checkpoint folder (config.json, tokenizer.json, safetensors)");
ABSL_FLAG(int, tp, 1, "tensor-parallel size: the number of workers to wait for");
ABSL_FLAG(std::string, listen, "127.0.0.1:50051", "public gRPC address (port 0 picks a free one)");
ABSL_FLAG(std::string, worker_listen, "127.0.0.1:0", "address the workers dial (port 0 picks a free one)");
ABSL_FLAG(std::string, backend, "auto", "cpu, cuda, or auto (cuda when every worker reports a GPU)");
ABSL_FLAG(int, block_size, 16, "KV cache block size in tokens");
ABSL_FLAG(double, gpu_memory_utilization, 0.9, "fraction of each GPU's memory the worker may use");
ABSL_FLAG(int64_t, max_model_len, 0, "longest sequence (prompt + output); 0 = the model's max_position_embeddings");
ABSL_FLAG(int, max_num_seqs, 256, "most sequences in one step");
ABSL_FLAG(int64_t, max_num_batched_tokens, 2048, "token budget of one step");
ABSL_FLAG(int, max_queue, 1024, "waiting requests beyond this get RESOURCE_EXHAUSTED");
ABSL_FLAG(bool, enforce_eager, false, "run every step eagerly: no CUDA graphs for decode steps (CUDA workers)");
ABSL_FLAG(int64_t, num_gpu_blocks_override, 0, "allocate this many KV blocks instead of the profiled number (tests)");
ABSL_FLAG(bool, enable_prefix_caching, true, "reuse KV blocks of identical prompt prefixes");
ABSL_FLAG(absl::Duration, drain_timeout, absl::Seconds(30), "on SIGTERM, how long running streams may finish");
ABSL_FLAG(absl::Duration, worker_timeout, absl::Seconds(120), "how long to wait for the workers to connect");
ABSL_FLAG(std::string, chat_template, "auto", "auto (from tokenizer_config.json), llama3 or chatml");
ABSL_FLAG(bool, spawn_workers, false, "start the --tp local workers (torchrun-style environment)");
ABSL_FLAG(std::string, worker_binary, "", "tpserve-worker for --spawn-workers (default: next to this binary, else PATH)");

namespace tpserve {
namespace {

namespace v1 = tpserve::v1;
namespace iv1 = tpserve::internal::v1;

std::atomic<bool> g_stop{false};
absl::Notification g_stop_note;

int Fail(absl::string_view message) {
  CoordinatorLog(absl::StrCat("error: ", message));
  return 1;
}

// Waits for SIGTERM/SIGINT (blocked in every thread) and asks main to drain.
void SignalThread(sigset_t set) {
  int sig = 0;
  sigwait(&set, &sig);
  CoordinatorLog(absl::StrCat("got ", sig == SIGINT ? "SIGINT" : "SIGTERM", "; draining"));
  g_stop = true;
  g_stop_note.Notify();
}

std::string WorkerBinary() {
  std::string flag = absl::GetFlag(FLAGS_worker_binary);
  if (!flag.empty()) return flag;
  std::error_code ec;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    // Installed side by side, or the build tree (tools/coordinator, tools/worker).
    for (const std::filesystem::path& candidate :
         {self.parent_path() / "tpserve-worker", self.parent_path().parent_path() / "worker" / "tpserve-worker"}) {
      if (std::filesystem::exists(candidate)) return candidate.string();
    }
  }
  return "tpserve-worker";
}

std::string Host(const std::string& address) {
  const size_t colon = address.rfind(':');
  return colon == std::string::npos ? address : address.substr(0, colon);
}

int Main() {
  const std::string model_flag = absl::GetFlag(FLAGS_model);
  if (model_flag.empty()) return Fail("--model DIR is required (a Hugging Face checkpoint folder)");
  std::error_code ec;
  const std::filesystem::path model_dir = std::filesystem::absolute(model_flag, ec);
  const int tp = absl::GetFlag(FLAGS_tp);
  if (tp < 1) return Fail(absl::StrCat("--tp must be at least 1, got ", tp));
  const std::string backend_flag = absl::GetFlag(FLAGS_backend);
  if (backend_flag != "cpu" && backend_flag != "cuda" && backend_flag != "auto") {
    return Fail(absl::StrCat("--backend must be cpu, cuda or auto, got \"", backend_flag, "\""));
  }
  const int block_size = absl::GetFlag(FLAGS_block_size);
  if (block_size < 1) return Fail("--block-size must be at least 1");
  if (absl::GetFlag(FLAGS_max_num_seqs) < 1 || absl::GetFlag(FLAGS_max_num_batched_tokens) < 1 ||
      absl::GetFlag(FLAGS_max_queue) < 1) {
    return Fail("--max-num-seqs, --max-num-batched-tokens and --max-queue must be at least 1");
  }

  absl::StatusOr<ModelConfig> config = LoadModelConfig(model_dir);
  if (!config.ok()) return Fail(config.status().message());
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = Tokenizer::Load(model_dir);
  if (!tokenizer.ok()) return Fail(tokenizer.status().message());
  absl::StatusOr<ChatFormat> chat_format = absl::GetFlag(FLAGS_chat_template) == "auto"
                                               ? DetectChatFormat(model_dir)
                                               : ParseChatFormatFlag(absl::GetFlag(FLAGS_chat_template));
  if (!chat_format.ok()) {
    if (absl::GetFlag(FLAGS_chat_template) != "auto") return Fail(chat_format.status().message());
    CoordinatorLog(absl::StrCat("chat requests will be refused: ", chat_format.status().message()));
  }
  int64_t max_model_len = absl::GetFlag(FLAGS_max_model_len);
  if (max_model_len == 0) max_model_len = config->max_position_embeddings;
  if (max_model_len < 2 || max_model_len > config->max_position_embeddings) {
    return Fail(absl::StrCat("--max-model-len must be in 2..", config->max_position_embeddings,
                             " (the model's max_position_embeddings), got ", max_model_len));
  }

  // The internal server first: its port goes to the workers.
  WorkerPool pool(tp);
  int worker_port = 0;
  grpc::ServerBuilder worker_builder;
  worker_builder.AddListeningPort(absl::GetFlag(FLAGS_worker_listen), grpc::InsecureServerCredentials(),
                                  &worker_port);
  worker_builder.RegisterService(&pool);
  worker_builder.SetMaxReceiveMessageSize(256 << 20);
  worker_builder.SetMaxSendMessageSize(256 << 20);
  std::unique_ptr<grpc::Server> worker_server = worker_builder.BuildAndStart();
  if (!worker_server || worker_port == 0) {
    return Fail(absl::StrCat("cannot listen for workers on ", absl::GetFlag(FLAGS_worker_listen),
                             "; pick another --worker-listen"));
  }
  const std::string worker_address = absl::StrCat(Host(absl::GetFlag(FLAGS_worker_listen)), ":", worker_port);
  CoordinatorLog(absl::StrCat("workers connect to ", worker_address));

  v1::ModelInfo model_info;
  model_info.set_model_path(model_dir.string());
  model_info.set_architecture(std::string(ArchitectureName(config->arch)));
  model_info.set_vocab_size(static_cast<uint32_t>((*tokenizer)->vocab_size()));
  model_info.set_max_model_len(static_cast<uint32_t>(max_model_len));
  std::vector<int32_t> eos;
  for (int64_t id : config->eos_token_ids) {
    eos.push_back(static_cast<int32_t>(id));
    model_info.add_eos_token_ids(static_cast<uint32_t>(id));
  }
  if (chat_format.ok()) model_info.set_chat_format(std::string(ChatFormatName(*chat_format)));
  RequestLimits limits;
  limits.vocab_size = std::min<int32_t>((*tokenizer)->vocab_size(), static_cast<int32_t>(config->vocab_size));
  limits.max_model_len = max_model_len;
  limits.defaults = config->generation;
  ServiceInfo info;
  info.model = model_info;
  info.version = "tpserve 0.1.0";
  info.tensor_parallel_size = static_cast<uint32_t>(tp);
  info.block_size = static_cast<uint32_t>(block_size);

  // The public server: health NOT_SERVING until warm.
  auto service = std::make_unique<GenerationService>(**tokenizer, chat_format, limits, info);
  GenerationService* service_ptr = service.get();
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  int public_port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort(absl::GetFlag(FLAGS_listen), grpc::InsecureServerCredentials(), &public_port);
  builder.RegisterService(service.get());
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server || public_port == 0) {
    return Fail(absl::StrCat("cannot listen on ", absl::GetFlag(FLAGS_listen), "; pick another --listen"));
  }
  grpc::HealthCheckServiceInterface* health = server->GetHealthCheckService();
  auto set_health = [health](bool serving) {
    if (health == nullptr) return;
    health->SetServingStatus(serving);
    health->SetServingStatus("tpserve.v1.Generation", serving);
  };
  set_health(false);
  service->SetOnServingChange(set_health);
  CoordinatorLog(absl::StrCat("serving tpserve.v1.Generation on ", Host(absl::GetFlag(FLAGS_listen)), ":",
                              public_port));

  // Workers: spawned here, or started by the user (mpirun / tpserve-launch).
  std::optional<ProcessGroup> group;
  if (absl::GetFlag(FLAGS_spawn_workers)) {
    LaunchOptions launch;
    launch.argv = {WorkerBinary(), "--coordinator", worker_address};
    launch.nproc_per_node = tp;
    launch.master_addr = "127.0.0.1";
    launch.master_port = worker_port;  // unused by the workers (rendezvous goes through us)
    launch.output = OutputMode::kPrefix;
    // A worker that ends on its own (before Hello, too) is a lost worker now.
    launch.on_exit = [&pool](const RankExit& e) {
      if (!e.stopped) pool.ReportWorkerExit(e.rank, e.Describe());
    };
    absl::StatusOr<ProcessGroup> started = LaunchLocal(std::move(launch));
    if (!started.ok()) return Fail(absl::StrCat("--spawn-workers: ", started.status().message()));
    group.emplace(std::move(*started));
    CoordinatorLog(absl::StrCat("spawned ", tp, " workers"));
  } else {
    CoordinatorLog(absl::StrCat("waiting for ", tp, " workers: mpirun -np ", tp,
                                " tpserve-worker --coordinator ", worker_address));
  }

  auto stop_everything = [&](int code) {
    server->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(2)));
    pool.Close();
    worker_server->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(2)));
    if (group) (void)group->Stop(absl::Seconds(10));
    return code;
  };
  absl::Status connected = pool.WaitForWorkers(absl::GetFlag(FLAGS_worker_timeout), g_stop);
  if (!connected.ok()) {
    if (absl::IsCancelled(connected)) return stop_everything(0);
    Fail(connected.message());
    return stop_everything(1);
  }
  std::string backend = backend_flag;
  std::vector<std::string> worker_names;
  bool all_gpu = true;
  for (const iv1::Hello& h : pool.workers()) {
    worker_names.push_back(WorkerRoster::Describe(h));
    if (h.device() == "cpu" || h.device().empty()) all_gpu = false;
  }
  if (backend == "auto") backend = all_gpu ? "cuda" : "cpu";

  std::random_device rd;
  StartupOptions startup;
  startup.model_dir = model_dir.string();
  startup.backend = backend;
  startup.tensor_parallel_size = static_cast<uint32_t>(tp);
  startup.store_prefix = absl::StrCat("tpserve/", getpid(), "-", rd(), "/");
  startup.block_size = static_cast<uint32_t>(block_size);
  startup.max_num_batched_tokens = static_cast<uint32_t>(absl::GetFlag(FLAGS_max_num_batched_tokens));
  startup.max_num_seqs = static_cast<uint32_t>(absl::GetFlag(FLAGS_max_num_seqs));
  startup.max_model_len = static_cast<uint32_t>(max_model_len);
  startup.gpu_memory_utilization = static_cast<float>(absl::GetFlag(FLAGS_gpu_memory_utilization));
  startup.num_blocks_override = absl::GetFlag(FLAGS_num_gpu_blocks_override);
  startup.enforce_eager = absl::GetFlag(FLAGS_enforce_eager);
  absl::StatusOr<StartupResult> started = StartWorkers(pool, startup);
  if (!started.ok()) {
    Fail(started.status().message());
    return stop_everything(1);
  }

  EngineLoopOptions engine_options;
  engine_options.scheduler.max_num_batched_tokens = absl::GetFlag(FLAGS_max_num_batched_tokens);
  engine_options.scheduler.max_num_seqs = absl::GetFlag(FLAGS_max_num_seqs);
  engine_options.scheduler.max_queue = absl::GetFlag(FLAGS_max_queue);
  engine_options.num_blocks = started->num_blocks;
  engine_options.block_size = block_size;
  engine_options.enable_prefix_caching = absl::GetFlag(FLAGS_enable_prefix_caching);
  engine_options.max_model_len = max_model_len;
  engine_options.eos_token_ids = eos;
  EngineLoop engine(**tokenizer, engine_options,
                    [&pool](const iv1::Step& step) -> absl::StatusOr<iv1::StepResult> {
                      iv1::CoordinatorMessage command;
                      *command.mutable_step() = step;
                      auto replies = pool.RunOnAll(std::move(command));
                      if (!replies.ok()) return replies.status();
                      return std::move(*(*replies)[0].mutable_step());
                    });
  pool.SetOnLost([&engine, service_ptr](const absl::Status& lost) {
    service_ptr->SetAvailability(lost, /*permanent=*/true);
    engine.Fail(lost);
  });
  engine.Start();
  service->SetEngine(&engine, worker_names, backend);
  if (absl::Status lost = pool.lost(); !lost.ok()) {
    service->SetAvailability(lost, true);
    engine.Fail(lost);
  } else {
    service->SetAvailability(absl::OkStatus());
    CoordinatorLog("ready");
  }

  g_stop_note.WaitForNotification();

  // Drain.
  service->SetAvailability(absl::UnavailableError("the server is draining (shutting down); retry elsewhere"));
  engine.CloseAdmission(absl::UnavailableError("the server is draining (shutting down); retry elsewhere"));
  const absl::Duration drain = absl::GetFlag(FLAGS_drain_timeout);
  if (!engine.WaitIdle(absl::Now() + drain)) {
    CoordinatorLog(absl::StrCat("drain timeout (", absl::FormatDuration(drain), ") passed; aborting the ",
                                "running streams"));
    engine.AbortAll(absl::OkStatus());
    engine.WaitIdle(absl::Now() + absl::Seconds(30));
  }
  engine.Stop();
  const absl::Status lost = pool.lost();
  if (lost.ok()) {
    iv1::CoordinatorMessage shutdown;
    shutdown.mutable_shutdown();
    if (auto s = pool.RunOnAll(shutdown); !s.ok()) {
      CoordinatorLog(absl::StrCat("shutdown: ", s.status().message()));
    }
  }
  const int code = stop_everything(lost.ok() ? 0 : 1);
  CoordinatorLog(code == 0 ? "stopped" : "stopped after losing a worker");
  return code;
}

}  // namespace
}  // namespace tpserve

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "tpserve-coordinator --model DIR --tp N [--listen 127.0.0.1:50051] [--spawn-workers]");
  // Flag names are written with dashes (--max-model-len); absl wants underscores.
  std::vector<std::string> args(argv, argv + argc);
  for (size_t i = 1; i < args.size(); ++i) {
    std::string& a = args[i];
    if (a.rfind("--", 0) != 0) continue;
    const size_t end = std::min(a.find('='), a.size());
    std::replace(a.begin() + 2, a.begin() + static_cast<ptrdiff_t>(end), '-', '_');
  }
  std::vector<char*> cargs;
  for (std::string& a : args) cargs.push_back(a.data());
  absl::ParseCommandLine(static_cast<int>(cargs.size()), cargs.data());
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);  // before any thread: only SignalThread takes them
  std::thread(tpserve::SignalThread, set).detach();
  std::signal(SIGPIPE, SIG_IGN);
  const int code = tpserve::Main();
  std::fflush(nullptr);
  _exit(code);  // the detached signal thread may still sit in sigwait
}
