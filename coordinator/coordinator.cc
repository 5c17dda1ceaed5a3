#include "coordinator/coordinator.h"

#include <algorithm>
#include <filesystem>
#include <random>
#include <utility>
#include <vector>

#include <unistd.h>

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/resource_quota.h>
#include <grpcpp/security/server_credentials.h>

#include "absl/strings/str_cat.h"
#include "auth/secret_file.h"
#include "auth/tls_credentials.h"
#include "base/host_name.h"
#include "launcher/temp_dir.h"
#include "base/status_macros.h"
#include "coordinator/log.h"
#include "coordinator/startup.h"
#include "tools/grammar/model_vocabulary.h"

namespace tpserve {

namespace v1 = tpserve::v1;
namespace iv1 = tpserve::internal::v1;

namespace {

constexpr int kMaxWorkerMessageBytes = 256 << 20;  // a step of many sequences, and its logits rows
constexpr int kMaxPublicSyncThreads = 8;  // reflection calls at once on the public server
constexpr char kDraining[] = "the server is draining (shutting down); retry elsewhere";

// Speculative decoding: proposed tokens one step may carry (the workers' extra
// logits rows): k for up to 8 sequences, within the token budget.
int64_t MaxNumDraftTokens(const CoordinatorOptions& o) {
  return std::min<int64_t>(int64_t{8} * o.speculation.num_speculative_tokens, o.max_num_batched_tokens);
}

absl::Status CheckOptions(const CoordinatorOptions& o) {
  TPSERVE_RETURN_IF_ERROR(ValidateSpeculationOptions(o.speculation));
  if (o.worker_transport != "auto" && o.worker_transport != "grpc" && o.worker_transport != "shm") {
    return absl::InvalidArgumentError(absl::StrCat("--worker-transport must be auto, grpc or shm, got \"",
                                                   o.worker_transport, "\""));
  }
  if (o.model.empty()) {
    return absl::InvalidArgumentError("--model DIR is required (a Hugging Face checkpoint folder)");
  }
  if (o.tp < 1)
    return absl::InvalidArgumentError(absl::StrCat("--tp must be at least 1, got ", o.tp));
  if (o.backend != "cpu" && o.backend != "cuda" && o.backend != "auto") {
    return absl::InvalidArgumentError(
        absl::StrCat("--backend must be cpu, cuda or auto, got \"", o.backend, "\""));
  }
  if (o.block_size < 1) return absl::InvalidArgumentError("--block-size must be at least 1");
  if (o.max_num_seqs < 1 || o.max_num_batched_tokens < 1 || o.max_queue < 1) {
    return absl::InvalidArgumentError(
        "--max-num-seqs, --max-num-batched-tokens and --max-queue must be at least 1");
  }
  if (o.step_timeout < absl::Milliseconds(100) || o.step_timeout > absl::Hours(1)) {
    return absl::InvalidArgumentError(absl::StrCat("--step-timeout must be in 100ms..1h, got ",
                                                   absl::FormatDuration(o.step_timeout)));
  }
  if (!o.trusted_fronts.empty() && o.api_key_file.empty()) {
    return absl::InvalidArgumentError(
        "--trusted-fronts names API keys: give --api-key-file too (a front is trusted by its key)");
  }
  if (o.max_streams_per_client < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--max-streams-per-client must be >= 0 (0 = no cap), got ", o.max_streams_per_client));
  }
  if (o.max_chat_messages < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--max-chat-messages must be at least 1, got ", o.max_chat_messages));
  }
  if (o.max_buffered_chunks < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--max-buffered-chunks must be at least 1, got ", o.max_buffered_chunks));
  }
  if (o.output_threads < 1 || o.output_threads > 64) {
    return absl::InvalidArgumentError(absl::StrCat("--output-threads must be in 1..64, got ", o.output_threads));
  }
  return absl::OkStatus();
}

// tpserve-worker for spawn_workers: the option, else installed side by side
// or in the build tree (tools/coordinator, tools/worker), else PATH.
std::string WorkerBinary(const std::string& option) {
  if (!option.empty()) return option;
  std::error_code ec;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    for (const std::filesystem::path& candidate :
         {self.parent_path() / "tpserve-worker",
          self.parent_path().parent_path() / "worker" / "tpserve-worker"}) {
      if (std::filesystem::exists(candidate)) return candidate.string();
    }
  }
  return "tpserve-worker";
}

// How much longer than --step-timeout the workers' collectives wait.
constexpr absl::Duration kCollectiveGrace = absl::Seconds(30);

// Keepalive and idle limits of the public port.
constexpr int kKeepaliveMs = 60'000;
constexpr int kKeepaliveTimeoutMs = 20'000;
constexpr int kMaxConnectionIdleMs = 15 * 60'000;
constexpr int kMinClientPingMs = 10'000;

std::string Host(const std::string& address) {
  const size_t colon = address.rfind(':');
  return colon == std::string::npos ? address : address.substr(0, colon);
}

}  // namespace

Coordinator::Coordinator(CoordinatorOptions options) : options_(std::move(options)) {}

Coordinator::~Coordinator() { StopServers(); }

void Coordinator::RequestStop() {
  absl::MutexLock lock(&serve_mu_);
  stop_ = true;
}

absl::Status Coordinator::Start() {
  absl::Status started = [this]() -> absl::Status {
    TPSERVE_RETURN_IF_ERROR(CheckOptions(options_));
    TPSERVE_RETURN_IF_ERROR(LoadModel());
    TPSERVE_RETURN_IF_ERROR(SetUpClusterSecret());
    // The internal server first: its port goes to the workers.
    TPSERVE_RETURN_IF_ERROR(ListenForWorkers());
    TPSERVE_RETURN_IF_ERROR(ListenPublic());
    TPSERVE_RETURN_IF_ERROR(ListenMetrics());
    TPSERVE_RETURN_IF_ERROR(PublishKvEvents());
    TPSERVE_RETURN_IF_ERROR(LaunchWorkers());
    return ConnectWorkers();
  }();
  if (!started.ok()) {
    if (!absl::IsCancelled(started)) CoordinatorLog(absl::StrCat("error: ", started.message()));
    StopServers();
  }
  return started;
}

absl::Status Coordinator::LoadModel() {
  std::error_code ec;
  model_dir_ = std::filesystem::absolute(options_.model, ec).string();
  TPSERVE_ASSIGN_OR_RETURN(config_, LoadModelConfig(model_dir_));
  TPSERVE_ASSIGN_OR_RETURN(tokenizer_, Tokenizer::Load(model_dir_));
  const bool auto_format = options_.chat_template == "auto";
  chat_format_ = LoadChatTemplate(model_dir_, options_.chat_template, *tokenizer_);
  if (!chat_format_.ok()) {
    // A template that is there but cannot be rendered stops the start-up, naming the construct.
    if (!auto_format || !absl::IsNotFound(chat_format_.status())) return chat_format_.status();
    CoordinatorLog(
        absl::StrCat("chat requests will be refused: ", chat_format_.status().message()));
  }
  max_model_len_ =
      options_.max_model_len != 0 ? options_.max_model_len : config_->max_position_embeddings;
  if (max_model_len_ < 2 || max_model_len_ > config_->max_position_embeddings) {
    return absl::InvalidArgumentError(
        absl::StrCat("--max-model-len must be in 2..", config_->max_position_embeddings,
                     " (the model's max_position_embeddings), got ", max_model_len_));
  }
  return absl::OkStatus();
}

absl::Status Coordinator::SetUpClusterSecret() {
  if (!options_.cluster_secret_file.empty()) {
    TPSERVE_ASSIGN_OR_RETURN(secret_, ClusterSecret::FromFile(options_.cluster_secret_file, "--cluster-secret-file"));
    CoordinatorLog("workers must prove the cluster secret of --cluster-secret-file");
    return absl::OkStatus();
  }
  if (options_.spawn_workers) {
    // A fresh secret, handed to the children through a private file named in
    // their environment: never on a command line, where `ps` shows it.
    TPSERVE_ASSIGN_OR_RETURN(secret_dir_, MakeTempDir("tpserve-secret-"));
    secret_ = ClusterSecret::Generate();
    return WriteSecretFile(std::filesystem::path(secret_dir_) / "cluster-secret", secret_->bytes());
  }
  if (!options_.worker_tls_ca.empty()) {
    CoordinatorLog("workers must present a certificate signed by --worker-tls-ca");
    return absl::OkStatus();
  }
  if (!IsLoopbackAddress(options_.worker_listen)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--worker-listen ", options_.worker_listen, " is reachable from other machines, so anyone there could ",
        "join as a worker and read every prompt: set --cluster-secret-file FILE (and give the workers the same ",
        "file), or require worker certificates (--worker-tls-cert, --worker-tls-key, --worker-tls-ca), or ",
        "listen on 127.0.0.1"));
  }
  CoordinatorLog("warning: the worker port is not authenticated (loopback only): any local user can join as a "
                 "worker; set --cluster-secret-file to require a secret");
  return absl::OkStatus();
}

absl::Status Coordinator::ListenForWorkers() {
  pool_ = std::make_unique<WorkerPool>(options_.tp, secret_);
  TlsFiles tls{.cert = options_.worker_tls_cert, .key = options_.worker_tls_key, .ca = options_.worker_tls_ca,
               .cert_flag = "--worker-tls-cert", .key_flag = "--worker-tls-key", .ca_flag = "--worker-tls-ca"};
  TPSERVE_ASSIGN_OR_RETURN(std::shared_ptr<grpc::ServerCredentials> credentials, MakeServerCredentials(tls));
  if (!tls.cert.empty()) {
    CoordinatorLog(tls.ca.empty() ? "the worker port speaks TLS" : "the worker port speaks mutual TLS");
  } else if (!IsLoopbackAddress(options_.worker_listen)) {
    CoordinatorLog(absl::StrCat("warning: the worker port ", options_.worker_listen, " is plain text: prompts and ",
                                "tokens cross the network readable; set --worker-tls-cert and --worker-tls-key"));
  }
  int port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort(options_.worker_listen, credentials, &port);
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);  // exclusive: a taken port is an error
  builder.RegisterService(pool_.get());
  builder.SetMaxReceiveMessageSize(kMaxWorkerMessageBytes);
  builder.SetMaxSendMessageSize(kMaxWorkerMessageBytes);
  worker_server_ = builder.BuildAndStart();
  if (!worker_server_ || port == 0) {
    return absl::UnavailableError(absl::StrCat(
        "cannot listen for workers on ", options_.worker_listen,
        " (is another server using that port?); pick another --worker-listen"));
  }
  worker_port_ = port;
  worker_address_ = absl::StrCat(Host(options_.worker_listen), ":", port);
  // Every loss says what happens next (Recover).
  pool_->SetLossAdvice(options_.spawn_workers
                           ? "; the coordinator is restarting its workers: retry shortly"
                           : absl::StrCat("; start a new group of ", options_.tp,
                                          " workers (tpserve-worker --coordinator ", worker_address_, ")"));
  CoordinatorLog(absl::StrCat("workers connect to ", worker_address_));
  return absl::OkStatus();
}

// The public server, health NOT_SERVING until the engine runs.
absl::Status Coordinator::ListenPublic() {
  ServiceInfo info;
  // The folder's name, not its path: clients learn nothing of the server's files.
  std::filesystem::path dir = std::filesystem::path(model_dir_).lexically_normal();
  if (dir.filename().empty()) dir = dir.parent_path();  // "models/qwen/"
  info.model.set_model_name(dir.filename().string());
  info.model.set_architecture(std::string(ArchitectureName(config_->arch)));
  info.model.set_vocab_size(static_cast<uint32_t>(tokenizer_->vocab_size()));
  info.model.set_max_model_len(static_cast<uint32_t>(max_model_len_));
  for (int64_t id : config_->eos_token_ids) info.model.add_eos_token_ids(static_cast<uint32_t>(id));
  if (chat_format_.ok()) info.model.set_chat_format(std::string(chat_format_->name()));
  info.version = "tpserve 0.1.0";
  info.tensor_parallel_size = static_cast<uint32_t>(options_.tp);
  info.block_size = static_cast<uint32_t>(options_.block_size);
  RequestLimits limits;
  limits.vocab_size =
      std::min<int32_t>(tokenizer_->vocab_size(), static_cast<int32_t>(config_->vocab_size));
  limits.max_model_len = max_model_len_;
  limits.defaults = config_->generation;
  limits.max_chat_messages = options_.max_chat_messages;
  constraints_ = std::make_unique<ConstraintCompiler>(
      [this]() -> absl::StatusOr<std::shared_ptr<const grammar::Vocabulary>> {
        std::vector<int32_t> stops(config_->eos_token_ids.begin(), config_->eos_token_ids.end());
        return GrammarVocabulary(*tokenizer_, static_cast<int32_t>(config_->vocab_size), std::move(stops));
      });
  limits.constraints = constraints_.get();
  service_ = std::make_unique<GenerationService>(*tokenizer_, chat_format_, limits, info,
                                                 options_.max_buffered_chunks);
  AccessOptions access;
  access.max_streams_per_client = options_.max_streams_per_client;
  access.trusted_fronts = options_.trusted_fronts;
  if (!options_.api_key_file.empty()) {
    TPSERVE_ASSIGN_OR_RETURN(access.api_keys, ApiKeys::FromFile(options_.api_key_file));
    CoordinatorLog(absl::StrCat("the public API needs one of ", access.api_keys->size(), " API keys"));
  }
  service_->SetAccess(std::move(access));
  TPSERVE_ASSIGN_OR_RETURN(std::shared_ptr<grpc::ServerCredentials> credentials, PublicCredentials());

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  int port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort(options_.listen, credentials, &port);
  // Exclusive: no second server may share the port (SO_REUSEPORT) and take
  // some of its connections.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  // Dead peers are found by keepalive pings; connections idle (no call) for
  // long are closed; clients may not ping more often than every 10 s.
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, kKeepaliveMs);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, kKeepaliveTimeoutMs);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_IDLE_MS, kMaxConnectionIdleMs);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, kMinClientPingMs);
  // Generation is a callback service: its calls run on gRPC's few callback
  // threads, an open stream holds none. Only the reflection service is
  // synchronous (a pool thread per call): cap that pool.
  grpc::ResourceQuota sync_threads("tpserve-public-sync");
  sync_threads.SetMaxThreads(kMaxPublicSyncThreads);
  builder.SetResourceQuota(sync_threads);
  builder.RegisterService(service_.get());
  server_ = builder.BuildAndStart();
  if (!server_ || port == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", options_.listen,
                     " (is another server using that port?); pick another --listen"));
  }
  grpc::HealthCheckServiceInterface* health = server_->GetHealthCheckService();
  auto set_health = [health](bool serving) {
    if (health == nullptr) return;
    // By name: SetServingStatus(bool) would set every name, liveness too.
    health->SetServingStatus("", serving);
    health->SetServingStatus("tpserve.v1.Generation", serving);
    health->SetServingStatus(kReadinessService, serving);
  };
  set_health(false);
  // Liveness: the process serves. A lost worker group is replaced in place
  // (Recover), so even then a restart would not help: it stays SERVING.
  if (health != nullptr) health->SetServingStatus(kLivenessService, true);
  service_->SetOnServingChange(set_health);
  CoordinatorLog(
      absl::StrCat("serving tpserve.v1.Generation on ", Host(options_.listen), ":", port));
  return absl::OkStatus();
}

absl::Status Coordinator::PublishKvEvents() {
  kv_events_ = std::make_unique<KvEventPublisher>(/*dp_rank=*/0, options_.block_size);
  if (options_.kv_events_endpoint.empty()) return absl::OkStatus();
  TPSERVE_ASSIGN_OR_RETURN(kv_events_zmq_, ZmqKvEvents::Start(*kv_events_, options_.kv_events_endpoint,
                                                              options_.kv_events_replay_endpoint,
                                                              options_.kv_events_topic));
  CoordinatorLog(absl::StrCat("KV events on ", kv_events_zmq_->endpoint(), " (replay ",
                              kv_events_zmq_->replay_endpoint().empty() ? "none" : kv_events_zmq_->replay_endpoint(),
                              ")"));
  return absl::OkStatus();
}

absl::Status Coordinator::ListenMetrics() {
  metrics_ = std::make_unique<CoordinatorMetrics>(max_model_len_, options_.tp);
  if (options_.metrics_listen.empty()) return absl::OkStatus();
  TPSERVE_ASSIGN_OR_RETURN(metrics_server_, MetricsServer::Start(options_.metrics_listen, metrics_->registry()));
  CoordinatorLog(absl::StrCat("metrics on http://", metrics_server_->address(), "/metrics"));
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> Coordinator::PublicCredentials() const {
  const TlsFiles tls{.cert = options_.tls_cert, .key = options_.tls_key, .ca = options_.tls_client_ca,
                     .ca_flag = "--tls-client-ca"};
  TPSERVE_ASSIGN_OR_RETURN(std::shared_ptr<grpc::ServerCredentials> credentials, MakeServerCredentials(tls));
  if (tls.cert.empty()) {
    if (!IsLoopbackAddress(options_.listen)) {
      CoordinatorLog(absl::StrCat("warning: the public API on ", options_.listen,
                                  " is plain text; set --tls-cert and --tls-key to encrypt it"));
    }
  } else {
    CoordinatorLog(tls.ca.empty() ? "the public API speaks TLS"
                                  : "the public API speaks mutual TLS (client certificates required)");
  }
  return credentials;
}

// Workers: spawned here, or started by the user (mpirun / tpserve-launch).
absl::Status Coordinator::LaunchWorkers() {
  const int tp = options_.tp;
  if (!options_.spawn_workers) {
    CoordinatorLog(absl::StrCat("waiting for ", tp, " workers: mpirun -np ", tp,
                                " tpserve-worker --coordinator ", worker_address_));
    return absl::OkStatus();
  }
  LaunchOptions launch;
  launch.argv = {WorkerBinary(options_.worker_binary), "--coordinator", worker_address_};
  if (!options_.worker_tls_cert.empty()) {
    // Paths only: the key stays in its file. A self-signed certificate is its own CA.
    const auto absolute = [](const std::string& path) { return std::filesystem::absolute(path).string(); };
    launch.argv.insert(launch.argv.end(),
                       {"--tls-ca", absolute(options_.worker_tls_ca.empty() ? options_.worker_tls_cert
                                                                            : options_.worker_tls_ca),
                        "--tls-cert", absolute(options_.worker_tls_cert), "--tls-key",
                        absolute(options_.worker_tls_key)});
  }
  launch.nproc_per_node = tp;
  launch.master_addr = "127.0.0.1";
  launch.master_port = worker_port_;  // unused by the workers: rendezvous goes through the pool
  launch.output = OutputMode::kPrefix;
  if (!secret_dir_.empty()) {
    launch.extra_env.push_back(absl::StrCat(kClusterSecretFileEnv, "=", secret_dir_, "/cluster-secret"));
  } else if (!options_.cluster_secret_file.empty()) {
    const std::string path = std::filesystem::absolute(options_.cluster_secret_file).string();
    launch.extra_env.push_back(absl::StrCat(kClusterSecretFileEnv, "=", path));
  }
  // A worker that ends on its own (before Hello, too) is a lost worker now.
  launch.on_exit = [pool = pool_.get()](const RankExit& e) {
    const bool clean = e.ok() && e.signal == 0 && !e.status_lost;
    if (!e.stopped) pool->ReportWorkerExit(e.rank, e.Describe(), clean);
  };
  absl::StatusOr<ProcessGroup> group = LaunchLocal(std::move(launch));
  if (!group.ok()) {
    return absl::Status(group.status().code(),
                        absl::StrCat("--spawn-workers: ", group.status().message()));
  }
  workers_.emplace(*std::move(group));
  CoordinatorLog(absl::StrCat("spawned ", tp, " workers"));
  return absl::OkStatus();
}

// Waits for the workers' Hello, brings them to ready and starts the engine.
absl::Status Coordinator::ConnectWorkers() {
  TPSERVE_ASSIGN_OR_RETURN(const int64_t num_blocks, BringUpWorkers());
  StartEngine(num_blocks);
  service_->SetAvailability(absl::OkStatus());
  CoordinatorLog("ready");
  if (absl::Status lost = pool_->lost(); !lost.ok()) OnWorkersLost(lost);  // Serve recovers
  return absl::OkStatus();
}

StartupOptions Coordinator::MakeStartupOptions() const {
  StartupOptions startup;
  startup.model_dir = model_dir_;
  startup.backend = backend_;
  startup.tensor_parallel_size = static_cast<uint32_t>(options_.tp);
  // A fresh prefix for every group: nothing of a lost group's rendezvous is reused.
  startup.store_prefix = absl::StrCat("tpserve/", getpid(), "-", std::random_device{}(), "/");
  startup.block_size = static_cast<uint32_t>(options_.block_size);
  startup.max_num_batched_tokens = static_cast<uint32_t>(options_.max_num_batched_tokens);
  startup.max_num_seqs = static_cast<uint32_t>(options_.max_num_seqs);
  startup.max_model_len = static_cast<uint32_t>(max_model_len_);
  startup.gpu_memory_utilization = static_cast<float>(options_.gpu_memory_utilization);
  startup.num_blocks_override = options_.num_gpu_blocks_override;
  startup.enforce_eager = options_.enforce_eager;
  startup.simulated_step_us = options_.simulate_step_us;
  startup.max_num_draft_tokens = options_.speculation.enabled() ? static_cast<uint32_t>(MaxNumDraftTokens(options_)) : 0;
  // The collectives wait past the step timeout, so the watchdog names a
  // stalled rank before a peer's collective gives up on it.
  startup.collective_timeout_ms =
      static_cast<uint32_t>(absl::ToInt64Milliseconds(options_.step_timeout + kCollectiveGrace));
  return startup;
}

absl::StatusOr<int64_t> Coordinator::BringUpWorkers() {
  TPSERVE_RETURN_IF_ERROR(pool_->WaitForWorkers(options_.worker_timeout, stop_));
  worker_names_.clear();
  bool all_gpu = true;
  for (const iv1::Hello& h : pool_->workers()) {
    worker_names_.push_back(WorkerRoster::Describe(h));
    if (h.device() == "cpu" || h.device().empty()) all_gpu = false;
  }
  backend_ = options_.backend != "auto" ? options_.backend : all_gpu ? "cuda" : "cpu";
  TPSERVE_ASSIGN_OR_RETURN(const StartupResult started, StartWorkers(*pool_, MakeStartupOptions()));
  TPSERVE_RETURN_IF_ERROR(ChooseWorkerTransport());
  pool_->SetStepTimeout(options_.step_timeout);
  if (engine_ != nullptr) {  // a replaced group
    engine_->Resume(started.num_blocks);
    service_->SetEngine(engines_.get(), worker_names_, backend_);
  }
  return started.num_blocks;
}

// Shared memory when every worker is on this host (the default, "auto"), or
// when asked ("shm": then an error if it cannot be); the gRPC streams
// otherwise. docs/architecture.md, "The step pipeline", has the numbers.
absl::Status Coordinator::ChooseWorkerTransport() {
  if (options_.worker_transport == "grpc") {
    CoordinatorLog("worker transport: gRPC streams (--worker-transport grpc)");
    return absl::OkStatus();
  }
  const absl::Status shm = pool_->UseSharedMemory(kDefaultShmRingBytes, HostName());
  if (shm.ok()) {
    CoordinatorLog(absl::StrCat("worker transport: shared memory (", options_.tp, " workers on this host)"));
    return absl::OkStatus();
  }
  if (options_.worker_transport == "shm") {
    return absl::Status(shm.code(), absl::StrCat("--worker-transport shm: ", shm.message(),
                                                 "; use --worker-transport auto or grpc"));
  }
  CoordinatorLog(absl::StrCat("worker transport: gRPC streams (shared memory unavailable: ", shm.message(), ")"));
  return pool_->lost();  // a worker lost meanwhile fails start-up; anything else falls back
}

// The engine loop sends each step to every worker and reads rank 0's result
// (one step in flight ahead unless --no-overlap); a lost worker ends its
// requests and the service's availability for good.
void Coordinator::StartEngine(int64_t num_blocks) {
  EngineLoopOptions engine_options;
  engine_options.scheduler.max_num_batched_tokens = options_.max_num_batched_tokens;
  engine_options.scheduler.max_num_seqs = options_.max_num_seqs;
  engine_options.scheduler.max_queue = options_.max_queue;
  engine_options.num_blocks = num_blocks;
  engine_options.block_size = options_.block_size;
  engine_options.enable_prefix_caching = options_.enable_prefix_caching;
  engine_options.max_model_len = max_model_len_;
  for (int64_t id : config_->eos_token_ids)
    engine_options.eos_token_ids.push_back(static_cast<int32_t>(id));
  engine_options.overlap = options_.overlap;
  engine_options.speculation = options_.speculation;
  if (options_.speculation.enabled()) {
    engine_options.scheduler.num_speculative_tokens = options_.speculation.num_speculative_tokens;
    engine_options.scheduler.max_num_draft_tokens = MaxNumDraftTokens(options_);
  }
  engine_options.metrics = metrics_.get();
  engine_options.kv_events = kv_events_.get();
  engine_options.output_threads = options_.output_threads;
  SetWorkersUp(true);
  WorkerPool* pool = pool_.get();
  StepTransport workers{
      .send = [pool](iv1::Step step) -> absl::StatusOr<uint64_t> {
        iv1::CoordinatorMessage command;
        *command.mutable_step() = std::move(step);
        return pool->Send(std::move(command));
      },
      .receive = [pool, metrics = metrics_.get()](uint64_t seq) -> absl::StatusOr<iv1::StepResult> {
        TPSERVE_ASSIGN_OR_RETURN(std::vector<iv1::WorkerMessage> replies, pool->Await(seq));
        for (size_t rank = 0; rank < replies.size(); ++rank) {  // Await answers by rank
          metrics->OnWorkerStep(static_cast<int>(rank), replies[rank].step().compute_seconds());
        }
        return std::move(*replies[0].mutable_step());
      },
  };
  // One data-parallel group for now, behind the groups' Submit and router
  // (docs/architecture.md, "Data-parallel groups and routing").
  router_ = std::make_unique<DpRouter>(DpRouterOptions{.groups = 1, .block_size = options_.block_size});
  kv_events_->FeedRouter(router_.get());
  engine_options.on_retired = [this](const std::string& client, const std::string& request_id) {
    engines_->OnRetired(client, request_id);
  };
  engine_ = std::make_unique<EngineLoop>(*tokenizer_, engine_options, std::move(workers));
  engines_ = std::make_unique<EngineGroups>(std::vector<EngineLoop*>{engine_.get()}, *router_);
  service_->SetEngine(engines_.get(), worker_names_, backend_);
  pool_->SetOnLost([this](const absl::Status& lost) { OnWorkersLost(lost); });
  engine_->Start();
}

void Coordinator::SetWorkersUp(bool up) {
  for (int rank = 0; rank < options_.tp; ++rank) metrics_->SetWorkerUp(rank, up);
}

void Coordinator::OnWorkersLost(const absl::Status& lost) {
  service_->SetAvailability(lost);
  engine_->Suspend(lost);
  SetWorkersUp(false);  // the group is lost as a whole
  absl::MutexLock lock(&serve_mu_);
  if (pending_loss_.ok()) pending_loss_ = lost;
}

void Coordinator::Serve() {
  while (true) {
    absl::Status lost;
    {
      absl::MutexLock lock(&serve_mu_);
      auto woken = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(serve_mu_) { return stop_ || !pending_loss_.ok(); };
      serve_mu_.Await(absl::Condition(&woken));
      if (stop_) return;
      lost = pending_loss_;
    }
    Recover(lost);
  }
}

void Coordinator::Recover(const absl::Status& lost) {
  const absl::Time since = absl::Now();
  if (!engine_->WaitSuspended()) return;  // stopped: no step goes out from here on
  absl::Duration backoff = absl::Seconds(1);
  for (int attempt = 1; !stop_; ++attempt) {
    {
      absl::MutexLock lock(&serve_mu_);
      pending_loss_ = absl::OkStatus();  // this try replaces whatever was lost so far
    }
    CoordinatorLog(absl::StrCat("replacing the worker group (try ", attempt, ")"));
    const absl::Status replaced = ReplaceWorkers();
    if (replaced.ok()) {
      SetWorkersUp(true);
      service_->SetAvailability(absl::OkStatus());
      const absl::Duration took = absl::Trunc(absl::Now() - since, absl::Milliseconds(1));
      const absl::string_view what = lost.message().substr(0, lost.message().find(';'));  // without the advice
      CoordinatorLog(absl::StrCat("ready (recovered in ", absl::FormatDuration(took), " after: ", what, ")"));
      return;
    }
    if (absl::IsCancelled(replaced)) return;
    const absl::Status why = absl::UnavailableError(
        absl::StrCat(lost.message(), "; replacing the workers failed: ", replaced.message()));
    CoordinatorLog(why.message());
    service_->SetAvailability(why);
    engine_->AbortAll(why);  // the waiting requests learn why rather than wait on
    if (!SleepUnlessStopped(backoff)) return;
    backoff = std::min(backoff * 2, absl::Seconds(30));
  }
}

absl::Status Coordinator::ReplaceWorkers() {
  if (workers_) {
    (void)workers_->Stop(absl::Seconds(2));  // a stopped (SIGSTOP) rank gets SIGKILL after the grace
    workers_.reset();
  }
  TPSERVE_RETURN_IF_ERROR(pool_->BeginNewGroup(absl::Seconds(10)));
  TPSERVE_RETURN_IF_ERROR(LaunchWorkers());
  // Workers started by the user: wait for all of them as long as it takes,
  // without starting over (which would send away the ranks already here);
  // the waiting requests end each time --worker-timeout passes.
  while (!options_.spawn_workers) {
    const absl::Status all_here = pool_->WaitForWorkers(options_.worker_timeout, stop_);
    if (!absl::IsDeadlineExceeded(all_here)) {
      TPSERVE_RETURN_IF_ERROR(all_here);
      break;
    }
    CoordinatorLog(all_here.message());
    engine_->AbortAll(absl::UnavailableError(absl::StrCat("no complete worker group connected: ", all_here.message())));
  }
  return BringUpWorkers().status();
}

bool Coordinator::SleepUnlessStopped(absl::Duration d) {
  absl::MutexLock lock(&serve_mu_);
  auto stopped = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(serve_mu_) { return stop_.load(); };
  return !serve_mu_.AwaitWithTimeout(absl::Condition(&stopped), d);
}

absl::Status Coordinator::Drain() {
  if (engine_ == nullptr) {  // Start did not succeed: it stopped everything already
    StopServers();
    return absl::OkStatus();
  }
  service_->SetAvailability(absl::UnavailableError(kDraining), /*permanent=*/true);
  engine_->CloseAdmission(absl::UnavailableError(kDraining));
  // Without workers nothing waiting can run: it ends now, not after the drain timeout.
  if (absl::Status lost = pool_->lost(); !lost.ok()) engine_->AbortAll(lost);
  if (!engine_->WaitIdle(absl::Now() + options_.drain_timeout)) {
    CoordinatorLog(absl::StrCat("drain timeout (", absl::FormatDuration(options_.drain_timeout),
                                ") passed; aborting the running streams"));
    engine_->AbortAll(absl::OkStatus());
    engine_->WaitIdle(absl::Now() + absl::Seconds(30));
  }
  engine_->Stop();
  const absl::Status lost = pool_->lost();
  if (lost.ok()) {
    iv1::CoordinatorMessage shutdown;
    shutdown.mutable_shutdown();
    if (auto s = pool_->RunOnAll(shutdown); !s.ok()) {
      CoordinatorLog(absl::StrCat("shutdown: ", s.status().message()));
    }
  }
  StopServers();
  CoordinatorLog(lost.ok() ? "stopped" : "stopped after losing a worker");
  return lost;
}

// Stops whatever Start brought up, in reverse; only the first call does.
void Coordinator::StopServers() {
  if (stopped_) return;
  stopped_ = true;
  const auto soon = [] { return absl::ToChronoTime(absl::Now() + absl::Seconds(2)); };
  if (server_) server_->Shutdown(soon());
  metrics_server_.reset();
  if (pool_) pool_->Close();
  if (worker_server_) worker_server_->Shutdown(soon());
  if (workers_) (void)workers_->Stop(absl::Seconds(10));
  if (!secret_dir_.empty()) RemoveTempDir(secret_dir_);
}

}  // namespace tpserve
