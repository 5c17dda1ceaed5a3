#include "coordinator/coordinator.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <utility>
#include <vector>

#include <unistd.h>

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/resource_quota.h>
#include <grpcpp/security/server_credentials.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "auth/secret_file.h"
#include "auth/tls_credentials.h"
#include "base/host_name.h"
#include "launcher/temp_dir.h"
#include "base/status_macros.h"
#include "coordinator/log.h"
#include "coordinator/startup.h"
#include "tools/grammar/model_vocabulary.h"

namespace tpserve {

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
  if (!o.dp_routing.empty()) TPSERVE_RETURN_IF_ERROR(ParseDpRouting(o.dp_routing).status());
  TPSERVE_RETURN_IF_ERROR(
      ValidateDpRouterOptions({.groups = o.dp, .block_size = o.block_size, .load_bound = o.dp_load_bound}));
  if (!o.kv_events_endpoint.empty()) {  // the last group's endpoints exist when the first's do
    TPSERVE_RETURN_IF_ERROR(ZmqEndpointForGroup(o.kv_events_endpoint, o.dp - 1, "--kv-events-endpoint").status());
    if (!o.kv_events_replay_endpoint.empty()) {
      TPSERVE_RETURN_IF_ERROR(
          ZmqEndpointForGroup(o.kv_events_replay_endpoint, o.dp - 1, "--kv-events-replay-endpoint").status());
    }
  }
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

// Group g's worker address: --worker-listen with its port + g (0 stays 0: a free port each).
std::string GroupListen(const std::string& listen, int g) {
  const size_t colon = listen.rfind(':');
  int port = 0;
  if (g == 0 || colon == std::string::npos || !absl::SimpleAtoi(listen.substr(colon + 1), &port) || port == 0) {
    return listen;
  }
  return absl::StrCat(listen.substr(0, colon), ":", port + g);
}

// CUDA_VISIBLE_DEVICES for group g's spawned workers: devices g*tp .. g*tp+tp-1
// of the coordinator's own list (or of 0, 1, ... when it has none).
std::string GroupDevices(int g, int tp) {
  std::vector<std::string> visible;
  if (const char* env = std::getenv("CUDA_VISIBLE_DEVICES"); env != nullptr && *env != '\0') {
    visible = absl::StrSplit(env, ',');
  }
  std::vector<std::string> mine;
  for (int r = g * tp; r < (g + 1) * tp; ++r) {
    mine.push_back(visible.empty() ? absl::StrCat(r) : visible[static_cast<size_t>(r) % visible.size()]);
  }
  return absl::StrJoin(mine, ",");
}

}  // namespace

std::string GroupReadinessService(int group) { return absl::StrCat(kReadinessService, ".dp", group); }

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
    {
      absl::MutexLock lock(&serve_mu_);
      pending_loss_.assign(static_cast<size_t>(options_.dp), absl::OkStatus());
      serving_.assign(static_cast<size_t>(options_.dp), false);
    }
    // The internal servers first: their ports go to the workers.
    for (int g = 0; g < options_.dp; ++g) {
      groups_.push_back(std::make_unique<WorkerGroup>());
      groups_.back()->index = g;
      TPSERVE_RETURN_IF_ERROR(ListenForWorkers(*groups_.back()));
    }
    TPSERVE_RETURN_IF_ERROR(ListenPublic());
    TPSERVE_RETURN_IF_ERROR(ListenMetrics());
    TPSERVE_RETURN_IF_ERROR(PublishKvEvents());
    for (auto& group : groups_) TPSERVE_RETURN_IF_ERROR(LaunchWorkers(*group));
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

absl::Status Coordinator::ListenForWorkers(WorkerGroup& group) {
  const std::string listen = GroupListen(options_.worker_listen, group.index);
  group.pool = std::make_unique<WorkerPool>(options_.tp, secret_, kWorkerProtocolVersion,
                                            DpGroup{.rank = group.index, .size = options_.dp});
  TlsFiles tls{.cert = options_.worker_tls_cert, .key = options_.worker_tls_key, .ca = options_.worker_tls_ca,
               .cert_flag = "--worker-tls-cert", .key_flag = "--worker-tls-key", .ca_flag = "--worker-tls-ca"};
  TPSERVE_ASSIGN_OR_RETURN(std::shared_ptr<grpc::ServerCredentials> credentials, MakeServerCredentials(tls));
  if (group.index > 0) {
    // Said once, for group 0.
  } else if (!tls.cert.empty()) {
    CoordinatorLog(tls.ca.empty() ? "the worker port speaks TLS" : "the worker port speaks mutual TLS");
  } else if (!IsLoopbackAddress(options_.worker_listen)) {
    CoordinatorLog(absl::StrCat("warning: the worker port ", options_.worker_listen, " is plain text: prompts and ",
                                "tokens cross the network readable; set --worker-tls-cert and --worker-tls-key"));
  }
  int port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort(listen, credentials, &port);
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);  // exclusive: a taken port is an error
  builder.RegisterService(group.pool.get());
  builder.SetMaxReceiveMessageSize(kMaxWorkerMessageBytes);
  builder.SetMaxSendMessageSize(kMaxWorkerMessageBytes);
  group.server = builder.BuildAndStart();
  if (!group.server || port == 0) {
    return absl::UnavailableError(absl::StrCat(
        "cannot listen for workers", options_.dp > 1 ? absl::StrCat(" of group ", group.index) : "", " on ", listen,
        " (is another server using that port?); pick another --worker-listen"));
  }
  group.port = port;
  group.address = absl::StrCat(Host(listen), ":", port);
  // Every loss says what happens next (Recover).
  group.pool->SetLossAdvice(options_.spawn_workers
                                ? "; the coordinator is restarting its workers: retry shortly"
                                : absl::StrCat("; start a new group of ", options_.tp,
                                               " workers (tpserve-worker --coordinator ", group.address,
                                               options_.dp > 1 ? absl::StrCat(" --dp-rank ", group.index) : "",
                                               ")"));
  CoordinatorLog(absl::StrCat(group.index > 0 ? absl::StrCat("group ", group.index, ": ") : "",
                              "workers connect to ", group.address));
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
  for (int g = 0; g < options_.dp; ++g) SetGroupHealth(g, false);
  service_->SetOnServingChange(set_health);
  CoordinatorLog(
      absl::StrCat("serving tpserve.v1.Generation on ", Host(options_.listen), ":", port));
  return absl::OkStatus();
}

absl::Status Coordinator::PublishKvEvents() {
  for (int g = 0; g < options_.dp; ++g) {
    kv_events_.push_back(std::make_unique<KvEventPublisher>(/*dp_rank=*/g, options_.block_size));
  }
  if (options_.kv_events_endpoint.empty()) return absl::OkStatus();
  for (int g = 0; g < options_.dp; ++g) {  // each group its own sockets, as vLLM's data-parallel engines
    TPSERVE_ASSIGN_OR_RETURN(const std::string pub,
                             ZmqEndpointForGroup(options_.kv_events_endpoint, g, "--kv-events-endpoint"));
    std::string replay;
    if (!options_.kv_events_replay_endpoint.empty()) {
      TPSERVE_ASSIGN_OR_RETURN(replay, ZmqEndpointForGroup(options_.kv_events_replay_endpoint, g,
                                                           "--kv-events-replay-endpoint"));
    }
    TPSERVE_ASSIGN_OR_RETURN(std::unique_ptr<ZmqKvEvents> zmq,
                             ZmqKvEvents::Start(*kv_events_[static_cast<size_t>(g)], pub, replay,
                                                options_.kv_events_topic));
    CoordinatorLog(absl::StrCat(g == 0 ? "" : absl::StrCat("group ", g, ": "), "KV events on ", zmq->endpoint(),
                                " (replay ", zmq->replay_endpoint().empty() ? "none" : zmq->replay_endpoint(), ")"));
    kv_events_zmq_.push_back(std::move(zmq));
  }
  return absl::OkStatus();
}

absl::Status Coordinator::ListenMetrics() {
  // worker_up{rank} and the step compute by rank number the workers of all
  // groups: group g's rank r is g * tp + r.
  metrics_ = std::make_unique<CoordinatorMetrics>(max_model_len_, options_.tp * options_.dp, options_.dp);
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
absl::Status Coordinator::LaunchWorkers(WorkerGroup& group) {
  const int tp = options_.tp;
  if (!options_.spawn_workers) {
    CoordinatorLog(absl::StrCat(options_.dp > 1 ? absl::StrCat("group ", group.index, ": ") : "", "waiting for ",
                                tp, " workers: mpirun -np ", tp, " tpserve-worker --coordinator ", group.address,
                                options_.dp > 1 ? absl::StrCat(" --dp-rank ", group.index) : ""));
    return absl::OkStatus();
  }
  LaunchOptions launch;
  launch.argv = {WorkerBinary(options_.worker_binary), "--coordinator", group.address};
  if (options_.dp > 1) launch.argv.insert(launch.argv.end(), {"--dp-rank", std::to_string(group.index)});
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
  launch.master_port = group.port;  // unused by the workers: rendezvous goes through the pool
  launch.output = OutputMode::kPrefix;
  if (!secret_dir_.empty()) {
    launch.extra_env.push_back(absl::StrCat(kClusterSecretFileEnv, "=", secret_dir_, "/cluster-secret"));
  } else if (!options_.cluster_secret_file.empty()) {
    const std::string path = std::filesystem::absolute(options_.cluster_secret_file).string();
    launch.extra_env.push_back(absl::StrCat(kClusterSecretFileEnv, "=", path));
  }
  if (options_.dp > 1) {  // group g on GPUs g*tp .. g*tp+tp-1
    launch.extra_env.push_back(absl::StrCat("CUDA_VISIBLE_DEVICES=", GroupDevices(group.index, tp)));
  }
  // A worker that ends on its own (before Hello, too) is a lost worker now.
  launch.on_exit = [pool = group.pool.get()](const RankExit& e) {
    const bool clean = e.ok() && e.signal == 0 && !e.status_lost;
    if (!e.stopped) pool->ReportWorkerExit(e.rank, e.Describe(), clean);
  };
  absl::StatusOr<ProcessGroup> launched = LaunchLocal(std::move(launch));
  if (!launched.ok()) {
    return absl::Status(launched.status().code(),
                        absl::StrCat("--spawn-workers: ", launched.status().message()));
  }
  group.workers.emplace(*std::move(launched));
  CoordinatorLog(absl::StrCat("spawned ", tp, " workers", options_.dp > 1 ? absl::StrCat(" for group ", group.index) : ""));
  return absl::OkStatus();
}

// Waits for the workers' Hello, brings them to ready and starts the engine.
absl::Status Coordinator::ConnectWorkers() {
  std::vector<int64_t> num_blocks;
  for (auto& group : groups_) {
    TPSERVE_ASSIGN_OR_RETURN(const int64_t blocks, BringUpWorkers(*group));
    num_blocks.push_back(blocks);
  }
  DpRouterOptions routing{.groups = options_.dp, .block_size = options_.block_size,
                          .load_bound = options_.dp_load_bound};
  if (!options_.dp_routing.empty()) routing.policy = *ParseDpRouting(options_.dp_routing);
  router_ = std::make_unique<DpRouter>(routing);
  for (auto& group : groups_) StartEngine(*group, num_blocks[static_cast<size_t>(group->index)]);
  std::vector<EngineLoop*> loops;
  for (auto& group : groups_) loops.push_back(group->engine.get());
  engines_ = std::make_unique<EngineGroups>(std::move(loops), *router_);
  service_->SetEngine(engines_.get(), WorkerNames(), groups_[0]->backend);
  {
    absl::MutexLock lock(&serve_mu_);
    serving_.assign(static_cast<size_t>(options_.dp), true);
  }
  for (auto& group : groups_) {
    const int g = group->index;
    group->pool->SetOnLost([this, g](const absl::Status& lost) { OnWorkersLost(g, lost); });
    group->engine->Start();
  }
  service_->SetAvailability(absl::OkStatus());
  for (int g = 0; g < options_.dp; ++g) SetGroupHealth(g, true);
  if (options_.dp > 1) {
    CoordinatorLog(absl::StrCat(options_.dp, " groups of ", options_.tp, " workers, routing ",
                                DpRoutingName(routing.policy)));
  }
  CoordinatorLog("ready");
  for (auto& group : groups_) {
    if (absl::Status lost = group->pool->lost(); !lost.ok()) OnWorkersLost(group->index, lost);  // Serve recovers
  }
  return absl::OkStatus();
}

std::vector<std::string> Coordinator::WorkerNames() const {
  std::vector<std::string> names;
  for (const auto& group : groups_) {
    for (const std::string& n : group->names) {
      names.push_back(options_.dp > 1 ? absl::StrCat("group ", group->index, " ", n) : n);
    }
  }
  return names;
}

StartupOptions Coordinator::MakeStartupOptions(const WorkerGroup& group) const {
  StartupOptions startup;
  startup.model_dir = model_dir_;
  startup.backend = group.backend;
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
  if (options_.speculation.enabled()) {
    startup.num_speculative_tokens = static_cast<uint32_t>(options_.speculation.num_speculative_tokens);
    startup.speculative_method = options_.speculation.method;
    startup.prompt_lookup_min = static_cast<uint32_t>(options_.speculation.prompt_lookup_min);
    startup.prompt_lookup_max = static_cast<uint32_t>(options_.speculation.prompt_lookup_max);
  }
  // The collectives wait past the step timeout, so the watchdog names a
  // stalled rank before a peer's collective gives up on it.
  startup.collective_timeout_ms =
      static_cast<uint32_t>(absl::ToInt64Milliseconds(options_.step_timeout + kCollectiveGrace));
  return startup;
}

absl::StatusOr<int64_t> Coordinator::BringUpWorkers(WorkerGroup& group) {
  TPSERVE_RETURN_IF_ERROR(group.pool->WaitForWorkers(options_.worker_timeout, stop_));
  group.names.clear();
  bool all_gpu = true;
  for (const iv1::Hello& h : group.pool->workers()) {
    group.names.push_back(WorkerRoster::Describe(h));
    if (h.device() == "cpu" || h.device().empty()) all_gpu = false;
  }
  group.backend = options_.backend != "auto" ? options_.backend : all_gpu ? "cuda" : "cpu";
  TPSERVE_ASSIGN_OR_RETURN(const StartupResult started, StartWorkers(*group.pool, MakeStartupOptions(group)));
  TPSERVE_RETURN_IF_ERROR(ChooseWorkerTransport(group));
  group.pool->SetStepTimeout(options_.step_timeout);
  if (group.engine != nullptr) {  // a replaced group
    group.engine->Resume(started.num_blocks);
    service_->SetEngine(engines_.get(), WorkerNames(), groups_[0]->backend);
  }
  return started.num_blocks;
}

// Shared memory when every worker is on this host (the default, "auto"), or
// when asked ("shm": then an error if it cannot be); the gRPC streams
// otherwise. docs/architecture.md, "The step pipeline", has the numbers.
absl::Status Coordinator::ChooseWorkerTransport(WorkerGroup& group) {
  if (options_.worker_transport == "grpc") {
    CoordinatorLog("worker transport: gRPC streams (--worker-transport grpc)");
    return absl::OkStatus();
  }
  const absl::Status shm = group.pool->UseSharedMemory(kDefaultShmRingBytes, HostName());
  if (shm.ok()) {
    CoordinatorLog(absl::StrCat("worker transport: shared memory (", options_.tp, " workers on this host)"));
    return absl::OkStatus();
  }
  if (options_.worker_transport == "shm") {
    return absl::Status(shm.code(), absl::StrCat("--worker-transport shm: ", shm.message(),
                                                 "; use --worker-transport auto or grpc"));
  }
  CoordinatorLog(absl::StrCat("worker transport: gRPC streams (shared memory unavailable: ", shm.message(), ")"));
  return group.pool->lost();  // a worker lost meanwhile fails start-up; anything else falls back
}

// The engine loop sends each step to every worker and reads rank 0's result
// (one step in flight ahead unless --no-overlap); a lost worker ends its
// requests and the service's availability for good.
void Coordinator::StartEngine(WorkerGroup& group, int64_t num_blocks) {
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
    engine_options.scheduler.max_num_draft_tokens = MaxNumDraftTokens(options_);
  }
  engine_options.metrics = metrics_.get();
  engine_options.kv_events = kv_events_[static_cast<size_t>(group.index)].get();
  engine_options.output_threads = options_.output_threads;
  engine_options.dp_rank = group.index;
  SetWorkersUp(group.index, true);
  WorkerPool* pool = group.pool.get();
  const int first_rank = group.index * options_.tp;  // its ranks' number in the metrics
  StepTransport workers{
      .send = [pool](iv1::Step step) -> absl::StatusOr<uint64_t> {
        iv1::CoordinatorMessage command;
        *command.mutable_step() = std::move(step);
        return pool->Send(std::move(command));
      },
      .receive = [pool, first_rank, metrics = metrics_.get()](uint64_t seq) -> absl::StatusOr<iv1::StepResult> {
        TPSERVE_ASSIGN_OR_RETURN(std::vector<iv1::WorkerMessage> replies, pool->Await(seq));
        for (size_t rank = 0; rank < replies.size(); ++rank) {  // Await answers by rank
          metrics->OnWorkerStep(first_rank + static_cast<int>(rank), replies[rank].step().compute_seconds());
        }
        return std::move(*replies[0].mutable_step());
      },
  };
  // Behind the groups' Submit and router (docs/architecture.md, "Data-parallel groups and routing").
  kv_events_[static_cast<size_t>(group.index)]->FeedRouter(router_.get());
  engine_options.on_retired = [this](const std::string& client, const std::string& request_id) {
    engines_->OnRetired(client, request_id);
  };
  group.engine = std::make_unique<EngineLoop>(*tokenizer_, engine_options, std::move(workers));
}

void Coordinator::SetWorkersUp(int g, bool up) {
  for (int rank = 0; rank < options_.tp; ++rank) metrics_->SetWorkerUp(g * options_.tp + rank, up);
}

void Coordinator::OnWorkersLost(int g, const absl::Status& lost) {
  {
    absl::MutexLock lock(&serve_mu_);
    serving_[static_cast<size_t>(g)] = false;
  }
  UpdateAvailability(lost);  // with every group lost, what new requests are told
  SetGroupHealth(g, false);
  engines_->SetAvailable(g, false);  // nothing new goes there while another group serves
  groups_[static_cast<size_t>(g)]->engine->Suspend(lost);
  SetWorkersUp(g, false);  // the group is lost as a whole
  absl::MutexLock lock(&serve_mu_);
  if (pending_loss_[static_cast<size_t>(g)].ok()) pending_loss_[static_cast<size_t>(g)] = lost;
}

void Coordinator::SetGroupHealth(int g, bool serving) {
  grpc::HealthCheckServiceInterface* health = server_ != nullptr ? server_->GetHealthCheckService() : nullptr;
  if (options_.dp > 1 && health != nullptr) health->SetServingStatus(GroupReadinessService(g), serving);
}

void Coordinator::UpdateAvailability(const absl::Status& lost) {
  bool any = false;
  {
    absl::MutexLock lock(&serve_mu_);
    for (bool serving : serving_) any = any || serving;
  }
  // While one group serves, the service does; with every group lost, the last loss is what clients see.
  service_->SetAvailability(any ? absl::OkStatus() : lost);
}

void Coordinator::Serve() {
  while (true) {
    int g = -1;
    absl::Status lost;
    {
      absl::MutexLock lock(&serve_mu_);
      auto woken = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(serve_mu_) {
        if (stop_) return true;
        for (const absl::Status& s : pending_loss_) {
          if (!s.ok()) return true;
        }
        return false;
      };
      serve_mu_.Await(absl::Condition(&woken));
      if (stop_) return;
      for (size_t i = 0; i < pending_loss_.size() && g < 0; ++i) {
        if (!pending_loss_[i].ok()) g = static_cast<int>(i);
      }
      lost = pending_loss_[static_cast<size_t>(g)];
    }
    Recover(g, lost);
  }
}

void Coordinator::Recover(int g, const absl::Status& lost) {
  const absl::Time since = absl::Now();
  WorkerGroup& group = *groups_[static_cast<size_t>(g)];
  if (!group.engine->WaitSuspended()) return;  // stopped: no step goes out from here on
  absl::Duration backoff = absl::Seconds(1);
  const std::string which = options_.dp > 1 ? absl::StrCat(" ", g) : "";
  for (int attempt = 1; !stop_; ++attempt) {
    {
      absl::MutexLock lock(&serve_mu_);
      pending_loss_[static_cast<size_t>(g)] = absl::OkStatus();  // this try replaces whatever was lost so far
    }
    CoordinatorLog(absl::StrCat("replacing the worker group", which, " (try ", attempt, ")"));
    const absl::Status replaced = ReplaceWorkers(group);
    if (replaced.ok()) {
      SetWorkersUp(g, true);
      {
        absl::MutexLock lock(&serve_mu_);
        serving_[static_cast<size_t>(g)] = true;
      }
      engines_->SetAvailable(g, true);
      service_->SetAvailability(absl::OkStatus());
      SetGroupHealth(g, true);
      const absl::Duration took = absl::Trunc(absl::Now() - since, absl::Milliseconds(1));
      const absl::string_view what = lost.message().substr(0, lost.message().find(';'));  // without the advice
      CoordinatorLog(absl::StrCat("ready (recovered", which.empty() ? "" : absl::StrCat(" group", which), " in ",
                                  absl::FormatDuration(took), " after: ", what, ")"));
      return;
    }
    if (absl::IsCancelled(replaced)) return;
    const absl::Status why = absl::UnavailableError(
        absl::StrCat(lost.message(), "; replacing the workers failed: ", replaced.message()));
    CoordinatorLog(why.message());
    UpdateAvailability(why);
    group.engine->AbortAll(why);  // the waiting requests learn why rather than wait on
    if (!SleepUnlessStopped(backoff)) return;
    backoff = std::min(backoff * 2, absl::Seconds(30));
  }
}

absl::Status Coordinator::ReplaceWorkers(WorkerGroup& group) {
  if (group.workers) {
    (void)group.workers->Stop(absl::Seconds(2));  // a stopped (SIGSTOP) rank gets SIGKILL after the grace
    group.workers.reset();
  }
  TPSERVE_RETURN_IF_ERROR(group.pool->BeginNewGroup(absl::Seconds(10)));
  TPSERVE_RETURN_IF_ERROR(LaunchWorkers(group));
  // Workers started by the user: wait for all of them as long as it takes,
  // without starting over (which would send away the ranks already here);
  // the waiting requests end each time --worker-timeout passes.
  while (!options_.spawn_workers) {
    const absl::Status all_here = group.pool->WaitForWorkers(options_.worker_timeout, stop_);
    if (!absl::IsDeadlineExceeded(all_here)) {
      TPSERVE_RETURN_IF_ERROR(all_here);
      break;
    }
    CoordinatorLog(all_here.message());
    group.engine->AbortAll(
        absl::UnavailableError(absl::StrCat("no complete worker group connected: ", all_here.message())));
  }
  return BringUpWorkers(group).status();
}

bool Coordinator::SleepUnlessStopped(absl::Duration d) {
  absl::MutexLock lock(&serve_mu_);
  auto stopped = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(serve_mu_) { return stop_.load(); };
  return !serve_mu_.AwaitWithTimeout(absl::Condition(&stopped), d);
}

absl::Status Coordinator::Drain() {
  if (engines_ == nullptr) {  // Start did not succeed: it stopped everything already
    StopServers();
    return absl::OkStatus();
  }
  service_->SetAvailability(absl::UnavailableError(kDraining), /*permanent=*/true);
  for (int g = 0; g < options_.dp; ++g) SetGroupHealth(g, false);
  engines_->CloseAdmission(absl::UnavailableError(kDraining));
  // Without workers nothing waiting can run: it ends now, not after the drain timeout.
  for (auto& group : groups_) {
    if (absl::Status lost = group->pool->lost(); !lost.ok()) group->engine->AbortAll(lost);
  }
  if (!engines_->WaitIdle(absl::Now() + options_.drain_timeout)) {
    CoordinatorLog(absl::StrCat("drain timeout (", absl::FormatDuration(options_.drain_timeout),
                                ") passed; aborting the running streams"));
    engines_->AbortAll(absl::OkStatus());
    engines_->WaitIdle(absl::Now() + absl::Seconds(30));
  }
  absl::Status first_lost;
  for (auto& group : groups_) {
    group->engine->Stop();
    const absl::Status lost = group->pool->lost();
    if (lost.ok()) {
      iv1::CoordinatorMessage shutdown;
      shutdown.mutable_shutdown();
      if (auto s = group->pool->RunOnAll(shutdown); !s.ok()) {
        CoordinatorLog(absl::StrCat("shutdown: ", s.status().message()));
      }
    } else if (first_lost.ok()) {
      first_lost = lost;
    }
  }
  StopServers();
  CoordinatorLog(first_lost.ok() ? "stopped" : "stopped after losing a worker");
  return first_lost;
}

// Stops whatever Start brought up, in reverse; only the first call does.
void Coordinator::StopServers() {
  if (stopped_) return;
  stopped_ = true;
  const auto soon = [] { return absl::ToChronoTime(absl::Now() + absl::Seconds(2)); };
  if (server_) server_->Shutdown(soon());
  metrics_server_.reset();
  for (auto& group : groups_) {
    if (group->pool) group->pool->Close();
    if (group->server) group->server->Shutdown(soon());
    if (group->workers) (void)group->workers->Stop(absl::Seconds(10));
  }
  if (!secret_dir_.empty()) RemoveTempDir(secret_dir_);
}

}  // namespace tpserve
