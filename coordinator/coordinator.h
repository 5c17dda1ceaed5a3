// Coordinator: the serving process put together (tools/coordinator/main.cc
// parses the flags into CoordinatorOptions and calls it).
//
//   Coordinator coordinator(options);
//   if (!coordinator.Start().ok()) ...   // listen, workers' Hello, Load..WarmUp, engine loop
//   coordinator.Serve();                 // until RequestStop()
//   absl::Status lost = coordinator.Drain();
//
// Start: both gRPC servers listen first (the public one answers UNAVAILABLE
// and health NOT_SERVING until warm), then it waits for the tp workers' Hello
// (spawned here with spawn_workers, else started by the user), runs Load /
// Profile / AllocateKv / WarmUp (coordinator/startup.h) and starts the engine
// loop, which runs each step on every worker through the WorkerPool.
//
// Lines on stderr (coordinator/log.h) that scripts and tests parse:
//   tpserve-coordinator: workers connect to HOST:PORT
//   tpserve-coordinator: serving tpserve.v1.Generation on HOST:PORT
//   tpserve-coordinator: ready
//
// Recovery: a lost worker (died, or named by the step watchdog) ends the
// requests that were running with UNAVAILABLE naming the rank, and health
// turns NOT_SERVING at once; new requests are refused with that status while
// requests that never ran wait. Serve then replaces the group: with
// spawn_workers it stops the old processes and spawns, loads and warms up a
// new group; otherwise it ends the old sessions and accepts a complete new
// group that the user (or mpirun's supervisor) starts. It serves again
// ("tpserve-coordinator: ready (recovered ...)"), the waiting requests run.
// While no group comes (worker_timeout per try) the waiting requests end with
// UNAVAILABLE saying why, and it keeps trying until a stop is asked.
//
// Threads: Start, Serve (and recovery) and Drain run on one thread (main's);
// RequestStop may be called from any thread (the signal thread), at any time.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "auth/cluster_secret.h"
#include "constrained/constraint_compiler.h"
#include "coordinator/coordinator_metrics.h"
#include "coordinator/dp_router.h"
#include "coordinator/engine_groups.h"
#include "coordinator/engine_loop.h"
#include "coordinator/kv_events_zmq.h"
#include "coordinator/generation_service.h"
#include "coordinator/metrics_server.h"
#include "coordinator/request.h"
#include "coordinator/startup.h"
#include "coordinator/worker_pool.h"
#include "launcher/process_group.h"
#include "model/config.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace tpserve {

// One field per tpserve-coordinator flag (--block-size is block_size).
struct CoordinatorOptions {
  std::string model;                      // Hugging Face checkpoint folder (required)
  int tp = 1;                             // workers to wait for, per data-parallel group
  // Data-parallel groups of tp workers each, routed between by dp_routing
  // ("cache-aware", "round-robin", "least-load"; "" = cache-aware) with
  // dp_load_bound (coordinator/dp_router.h). Group g's workers dial its own
  // port: --worker-listen's port + g (or a free port each when it is 0).
  int dp = 1;
  std::string dp_routing;
  int64_t dp_load_bound = 16;
  std::string listen = "127.0.0.1:50051";  // public gRPC address; port 0 picks a free one
  std::string worker_listen = "127.0.0.1:0";  // the address the workers dial
  std::string backend = "auto";           // cpu, cuda, or auto (cuda when every worker has a GPU)
  int block_size = 16;                    // KV cache block size in tokens
  double gpu_memory_utilization = 0.9;    // fraction of each GPU a worker may use
  int64_t max_model_len = 0;              // prompt + output; 0 = max_position_embeddings
  int max_num_seqs = 256;                 // most sequences running at once (so also in one step)
  int64_t max_num_batched_tokens = 2048;  // token budget of one step
  int max_queue = 1024;                   // waiting requests beyond this: RESOURCE_EXHAUSTED
  // Responses held for a stream whose client is not reading; one more aborts
  // its request with RESOURCE_EXHAUSTED (coordinator/response_queue.h).
  int64_t max_buffered_chunks = 1024;
  // Output threads, each owning a shard of the requests: detokenization, stop
  // strings, the responses and the writes they start (coordinator/output_pool.h).
  int output_threads = 4;
  // Messages one chat may hold; more is INVALID_ARGUMENT naming chat.messages
  // before it is rendered (coordinator/request.h).
  int max_chat_messages = kDefaultMaxChatMessages;
  bool enforce_eager = false;             // no CUDA graphs for decode steps
  int64_t num_gpu_blocks_override = 0;    // > 0: allocate this many KV blocks (tests)
  bool enable_prefix_caching = true;
  // Schedule and send step N+1 before step N's tokens come back (one step in
  // flight ahead); false: lock-step, for comparison and debugging (--no-overlap).
  bool overlap = true;
  // Speculative decoding (--speculative-method, --num-speculative-tokens,
  // --speculative-policy; coordinator/speculation.h): off by default.
  SpeculationOptions speculation;
  // Benchmarks only: the workers replace each forward by a sleep of this many
  // microseconds and emit made-up tokens (--simulate-step-us).
  uint32_t simulate_step_us = 0;
  // How commands reach the workers after start-up: "auto" (shared memory
  // when every worker is on this host, else the gRPC streams), "grpc", "shm".
  std::string worker_transport = "auto";
  absl::Duration drain_timeout = absl::Seconds(30);    // Drain: how long streams may finish
  absl::Duration worker_timeout = absl::Seconds(120);  // Start: how long workers may take to connect
  // The step watchdog: a rank that has not answered a step this long after
  // it was sent is lost, named (WorkerPool::SetStepTimeout). Generous enough
  // for a long prefill on CPUs; a GPU step takes milliseconds.
  absl::Duration step_timeout = absl::Seconds(60);
  std::string chat_template = "auto";     // auto (tokenizer_config.json), llama3, chatml or a Jinja2 file
  bool spawn_workers = false;             // start the tp local workers (torchrun-style environment)
  // The secret a worker must prove (auth/cluster_secret.h); "" = none, then
  // --spawn-workers makes a fresh one, and otherwise the worker port must be
  // a loopback address.
  std::string cluster_secret_file;
  // The public API's doors (README, "Security"): TLS when tls_cert and
  // tls_key are set (PEM files), mutual TLS when tls_client_ca is also set;
  // bearer API keys from api_key_file (auth/api_keys.h); and a cap on the
  // Generate streams one client may hold open (0 = none).
  std::string tls_cert;
  std::string tls_key;
  std::string tls_client_ca;
  // The worker port's TLS (--worker-tls-cert/-key): the workers check the
  // certificate against --worker-tls-ca, and with that CA set every worker
  // must present a certificate it signed (mutual TLS). Spawned workers are
  // given the CA and, as their client certificate, this same pair.
  std::string worker_tls_cert;
  std::string worker_tls_key;
  std::string worker_tls_ca;
  std::string api_key_file;
  // API key names that may name the client a call is for (tpserve-http
  // passing its callers' key names: AccessOptions::trusted_fronts); needs api_key_file.
  std::vector<std::string> trusted_fronts;
  int max_streams_per_client = 512;
  std::string worker_binary;              // for spawn_workers; "" = next to this binary, else PATH
  // Prometheus text exposition at http://HOST:PORT/metrics ("PORT" = loopback;
  // coordinator/metrics_server.h); "" = off.
  std::string metrics_listen;
  // KV events in vLLM's format (coordinator/kv_events_zmq.h): a ZeroMQ PUB
  // socket bound here ("" = off), a replay ROUTER socket ("" = none), the topic;
  // with --dp each group its own pair, ports offset by the group as vLLM's
  // (ZmqEndpointForGroup), each batch naming its data_parallel_rank.
  std::string kv_events_endpoint;
  std::string kv_events_replay_endpoint;
  std::string kv_events_topic;
};

// grpc.health.v1 service names (besides "" and "tpserve.v1.Generation", which
// say readiness as well): liveness is SERVING while the process serves (a
// lost worker group is replaced in place, so a restart would not help);
// readiness is SERVING when warm, not draining and every worker up (with
// --dp > 1: while one group's workers are up). With --dp > 1 each group has
// its own readiness too, "tpserve.readiness.dpG" (GroupReadinessService).
inline constexpr char kLivenessService[] = "tpserve.liveness";
inline constexpr char kReadinessService[] = "tpserve.readiness";
std::string GroupReadinessService(int group);

class Coordinator {
 public:
  explicit Coordinator(CoordinatorOptions options);
  ~Coordinator();  // stops what Start started (servers, sessions, spawned workers)

  Coordinator(const Coordinator&) = delete;
  Coordinator& operator=(const Coordinator&) = delete;

  // Brings the server up to "ready" (see the top of this file). On failure it
  // logs "error: <why>", stops what it started and returns the error, whose
  // message names the flag to change: INVALID_ARGUMENT for options, the
  // failing phase's error otherwise. CANCELLED (nothing logged) when
  // RequestStop came while it waited for the workers.
  absl::Status Start();

  // Blocks until RequestStop, replacing lost worker groups meanwhile. After Start.
  void Serve();

  // Admission stops (UNAVAILABLE), running streams finish or are cut with
  // ABORTED after drain_timeout, the workers get Shutdown (unless one was
  // lost), the servers stop. OK, or the UNAVAILABLE status of the lost worker.
  // Without a successful Start it only makes sure everything is stopped.
  absl::Status Drain();

  // Asks Serve to return, or Start to stop waiting for the workers.
  void RequestStop();

 private:
  absl::Status LoadModel();
  // The cluster secret: read, made for the spawned workers, or none.
  absl::Status SetUpClusterSecret();
  struct WorkerGroup;
  absl::Status ListenForWorkers(WorkerGroup& group);
  absl::Status ListenPublic();
  absl::Status ListenMetrics();  // with metrics_listen
  absl::Status PublishKvEvents();  // the publisher; ZeroMQ with kv_events_endpoint
  // The public port's credentials: TLS from the files, or insecure.
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> PublicCredentials() const;
  absl::Status LaunchWorkers(WorkerGroup& group);
  absl::Status ConnectWorkers();
  // Waits for the group's Hello and brings it to ready (Load..WarmUp, the
  // transport, the watchdog); the KV blocks each rank holds.
  absl::StatusOr<int64_t> BringUpWorkers(WorkerGroup& group);
  StartupOptions MakeStartupOptions(const WorkerGroup& group) const;
  // A group's pool's on_lost: its engine suspended, the router sends it
  // nothing new; with every group lost the reason every client sees and
  // health NOT_SERVING. Serve is woken to recover it.
  void OnWorkersLost(int g, const absl::Status& lost);
  // The worker_up gauge of every rank of group g (it comes and goes as a whole).
  void SetWorkersUp(int g, bool up);
  // Replaces lost group g until one serves or a stop is asked.
  void Recover(int g, const absl::Status& lost);
  // One try: the old group ended, a new one started (spawned) or awaited.
  absl::Status ReplaceWorkers(WorkerGroup& group);
  // Sleeps `d` unless a stop is asked first; whether to go on.
  bool SleepUnlessStopped(absl::Duration d);
  absl::Status ChooseWorkerTransport(WorkerGroup& group);
  void StartEngine(WorkerGroup& group, int64_t num_blocks);
  // The service's availability from the groups' (OK while one serves).
  void UpdateAvailability(const absl::Status& lost);
  // Group g's own readiness (GroupReadinessService), with dp > 1.
  void SetGroupHealth(int g, bool serving);
  // Every group's workers, for GetServerInfo: "rank R: ..." (with dp > 1 "group G rank R: ...").
  std::vector<std::string> WorkerNames() const;
  void StopServers();

  CoordinatorOptions options_;
  std::atomic<bool> stop_{false};
  absl::Mutex serve_mu_;  // Serve waits on it for a stop or a lost group
  std::vector<absl::Status> pending_loss_ ABSL_GUARDED_BY(serve_mu_);  // [dp] not OK: lost, not yet replaced
  std::vector<bool> serving_ ABSL_GUARDED_BY(serve_mu_);  // [dp] the group's workers serve

  // Set by Start, in this order.
  std::string model_dir_;  // absolute: the workers may run elsewhere
  std::optional<ModelConfig> config_;
  std::unique_ptr<Tokenizer> tokenizer_;
  // Validates constrained output against the model's vocabulary (built at
  // the first constrained request; RequestLimits::constraints).
  std::unique_ptr<ConstraintCompiler> constraints_;
  absl::StatusOr<ChatTemplate> chat_format_ = absl::UnknownError("not loaded");
  int64_t max_model_len_ = 0;
  // One data-parallel group: its workers, their port and pool, its engine loop.
  struct WorkerGroup {
    int index = 0;  // dp_rank
    std::unique_ptr<WorkerPool> pool;
    std::unique_ptr<grpc::Server> server;  // the port its workers dial (after pool: stops first)
    int port = 0;
    std::string address;                   // HOST:PORT its workers dial
    std::optional<ProcessGroup> workers;   // spawn_workers only
    std::string backend;                   // "cpu" or "cuda", once its workers said Hello
    std::vector<std::string> names;        // "rank R: host device (pid P)"
    std::unique_ptr<EngineLoop> engine;    // last: stops before the pool goes
  };
  // The prefix cache's changes (SubscribeKvEvents), one publisher per group:
  // before server_ and the engines, so they outlive both (a stream's end unsubscribes).
  std::vector<std::unique_ptr<KvEventPublisher>> kv_events_;
  std::vector<std::unique_ptr<ZmqKvEvents>> kv_events_zmq_;  // [dp] with kv_events_endpoint
  std::unique_ptr<GenerationService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::optional<ClusterSecret> secret_;
  std::string secret_dir_;  // a fresh secret for the spawned workers lives here (removed at stop)
  std::unique_ptr<CoordinatorMetrics> metrics_;    // from ListenMetrics on
  std::unique_ptr<MetricsServer> metrics_server_;  // with metrics_listen
  // The data-parallel groups' router and Submit, before groups_: they
  // outlive the engines (their on_retired and their events call them).
  std::unique_ptr<DpRouter> router_;
  std::unique_ptr<EngineGroups> engines_;
  std::vector<std::unique_ptr<WorkerGroup>> groups_;  // [dp]
  bool stopped_ = false;  // StopServers ran
};

}  // namespace tpserve
