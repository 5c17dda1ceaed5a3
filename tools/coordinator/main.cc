// tpserve-coordinator: the serving process (coordinator/coordinator.h).
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
// (and with --metrics-listen "tpserve-coordinator: metrics on http://HOST:PORT/metrics")
// and "tpserve-coordinator: ready" once it serves.
// SIGTERM/SIGINT drain: admission stops (UNAVAILABLE), running streams finish
// or are cut (ABORTED) after --drain-timeout, the workers get Shutdown, exit 0.
// Exit status 1 when start-up fails or a worker was lost.
//
// This file parses the flags and handles the signals; Coordinator does the rest.
#include <csignal>
#include <cstdlib>
#include <cstdio>
#include <string>
#include <thread>

#include <pthread.h>
#include <unistd.h>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "auth/cluster_secret.h"
#include "base/flag_spelling.h"
#include "base/tool_usage.h"
#include "coordinator/coordinator.h"
#include "coordinator/log.h"

// The model and its workers.
ABSL_FLAG(std::string, model, "", "Hugging Face checkpoint folder (config.json, tokenizer.json, safetensors)");
ABSL_FLAG(int, tp, 1, "tensor-parallel size: the number of workers to wait for (per data-parallel group)");
ABSL_FLAG(int, dp, 1,
          "data-parallel groups of --tp workers each (1..64); group G's workers dial --worker-listen's port + G "
          "(a free port each when it is 0); --spawn-workers puts group G on GPUs G*tp..G*tp+tp-1");
ABSL_FLAG(std::string, dp_routing, "",
          "how a request picks its group: cache-aware (the longest cached prefix of its prompt, default), "
          "round-robin or least-load");
ABSL_FLAG(int64_t, dp_load_bound, 16,
          "cache-aware: the group holding the prefix is taken while its requests exceed the least loaded "
          "group's by at most this many");
ABSL_FLAG(std::string, backend, "auto", "cpu, cuda, or auto (cuda when every worker reports a GPU)");
ABSL_FLAG(bool, spawn_workers, false, "start the --tp local workers (torchrun-style environment)");
ABSL_FLAG(std::string, metrics_listen, "",
          "serve Prometheus metrics at http://ADDR/metrics: PORT (loopback) or HOST:PORT; off when empty");
ABSL_FLAG(std::string, worker_binary, "", "tpserve-worker for --spawn-workers (default: next to this binary, else PATH)");
ABSL_FLAG(std::string, kv_events_endpoint, "",
          "publish the prefix cache's KV events as vLLM does: a ZeroMQ PUB socket bound here (tcp://*:5557); off when "
          "empty (SubscribeKvEvents serves them over gRPC either way)");
ABSL_FLAG(std::string, kv_events_replay_endpoint, "",
          "with --kv-events-endpoint: the ZeroMQ ROUTER socket that replays missed batches (tcp://*:5558)");
ABSL_FLAG(std::string, kv_events_topic, "", "with --kv-events-endpoint: the topic of every message");

// Where it listens, and how long it waits.
ABSL_FLAG(std::string, listen, "127.0.0.1:50051", "public gRPC address (port 0 picks a free one)");
ABSL_FLAG(std::string, worker_listen, "127.0.0.1:0", "address the workers dial (port 0 picks a free one)");
ABSL_FLAG(std::string, cluster_secret_file, "",
          "file holding the secret every worker must prove (default: $TPSERVE_CLUSTER_SECRET_FILE; "
          "--spawn-workers makes a fresh one); required when --worker-listen is not a loopback address");
ABSL_FLAG(std::string, tls_cert, "", "PEM certificate chain of the public API (with --tls-key: TLS)");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of the public API (chmod 600)");
ABSL_FLAG(std::string, tls_client_ca, "", "PEM CA bundle: the public API then requires client certificates it signed");
ABSL_FLAG(std::string, worker_tls_cert, "", "PEM certificate chain of the worker port (with --worker-tls-key: TLS)");
ABSL_FLAG(std::string, worker_tls_key, "", "PEM private key of the worker port (chmod 600)");
ABSL_FLAG(std::string, worker_tls_ca, "",
          "PEM CA bundle of the cluster: workers check the worker port's certificate against it, and must "
          "present a certificate it signed (mutual TLS)");
ABSL_FLAG(std::string, api_key_file, "",
          "file of API keys, one per line (`KEY` or `NAME KEY`, chmod 600): every call then needs "
          "\"authorization: Bearer KEY\"");
ABSL_FLAG(std::vector<std::string>, trusted_fronts, {},
          "API key names (from --api-key-file) of fronts such as tpserve-http that may name the client a call "
          "is for (metadata x-tpserve-client; the client is then FRONT/NAME); from any other caller that "
          "metadata is refused");
ABSL_FLAG(int, max_streams_per_client, 512,
          "Generate streams one client (API key, else peer address) may hold open; 0 = no cap");
ABSL_FLAG(absl::Duration, worker_timeout, absl::Seconds(120), "how long to wait for the workers to connect");
ABSL_FLAG(absl::Duration, step_timeout, absl::Seconds(60),
          "a worker that does not answer a step this long is named and the service stops serving "
          "(the workers' collectives wait 30 s longer)");
ABSL_FLAG(absl::Duration, drain_timeout, absl::Seconds(30), "on SIGTERM, how long running streams may finish");

// The KV cache on every worker.
ABSL_FLAG(int, block_size, 16, "KV cache block size in tokens");
ABSL_FLAG(double, gpu_memory_utilization, 0.9, "fraction of each GPU's memory the worker may use");
ABSL_FLAG(int64_t, num_gpu_blocks_override, 0, "allocate this many KV blocks instead of the profiled number (tests)");
ABSL_FLAG(bool, enable_prefix_caching, true, "reuse KV blocks of identical prompt prefixes");
ABSL_FLAG(bool, overlap, true,
          "schedule step N+1 while step N runs (one step in flight ahead); --no-overlap: lock-step");
ABSL_FLAG(std::string, speculative_method, "off",
          "speculative decoding without a draft model: ngram (prompt lookup), suffix (suffix decoding over the "
          "sequence and recent outputs) or off; the output is the same token for token, only faster when "
          "proposals are accepted");
ABSL_FLAG(int, num_speculative_tokens, 4, "speculative decoding: most tokens proposed per sequence and step (1-16)");
ABSL_FLAG(bool, speculative_policy, true,
          "speculative decoding: choose each sequence's number of proposed tokens from its recent acceptance and "
          "the measured cost of a verification step at the batch size (none at large batches); false: always "
          "propose up to --num-speculative-tokens");
ABSL_FLAG(uint32_t, simulate_step_us, 0,
          "benchmarks only: workers sleep this many microseconds per step instead of running the model "
          "and emit made-up tokens");
ABSL_FLAG(std::string, worker_transport, "auto",
          "how steps reach the workers: auto (shared memory when every worker is on this host, "
          "else the gRPC streams), grpc, or shm");
ABSL_FLAG(bool, enforce_eager, false, "run every step eagerly: no CUDA graphs for decode steps (CUDA workers)");
ABSL_FLAG(bool, deterministic, false,
          "CUDA workers: batch-invariant kernels, sampler and all-reduce, so a request gets the same tokens and "
          "log-probs whatever else is in its steps (slower; CPU workers always are). Reaches the workers this "
          "coordinator spawns; start others with tpserve-worker --deterministic");

// Requests and steps.
ABSL_FLAG(std::string, chat_template, "auto",
          "auto (the checkpoint's Jinja2 chat_template in tokenizer_config.json), a Jinja2 template FILE to use "
          "instead, or a built-in format for checkpoints without one: llama3 or chatml");
ABSL_FLAG(int64_t, max_model_len, 0, "longest sequence (prompt + output); 0 = the model's max_position_embeddings");
ABSL_FLAG(int, max_num_seqs, 256, "most sequences running at once (and so in one step)");
ABSL_FLAG(int64_t, max_num_batched_tokens, 2048, "token budget of one step");
ABSL_FLAG(int, max_queue, 1024, "waiting requests beyond this get RESOURCE_EXHAUSTED");
ABSL_FLAG(int, max_chat_messages, tpserve::kDefaultMaxChatMessages,
          "most messages in one chat (Generate, Tokenize); more is INVALID_ARGUMENT before anything is rendered");
ABSL_FLAG(int64_t, max_buffered_chunks, 1024,
          "responses held for a stream whose client is not reading; one more aborts its request "
          "with RESOURCE_EXHAUSTED");

ABSL_FLAG(int, output_threads, 4,
          "threads that turn sampled tokens into streamed responses (detokenizing, stop strings, "
          "writes), each owning a share of the requests; the engine thread only schedules");

namespace tpserve {
namespace {

CoordinatorOptions OptionsFromFlags() {
  CoordinatorOptions o;
  o.model = absl::GetFlag(FLAGS_model);
  o.tp = absl::GetFlag(FLAGS_tp);
  o.dp = absl::GetFlag(FLAGS_dp);
  o.dp_routing = absl::GetFlag(FLAGS_dp_routing);
  o.dp_load_bound = absl::GetFlag(FLAGS_dp_load_bound);
  o.listen = absl::GetFlag(FLAGS_listen);
  o.worker_listen = absl::GetFlag(FLAGS_worker_listen);
  o.backend = absl::GetFlag(FLAGS_backend);
  o.block_size = absl::GetFlag(FLAGS_block_size);
  o.gpu_memory_utilization = absl::GetFlag(FLAGS_gpu_memory_utilization);
  o.max_model_len = absl::GetFlag(FLAGS_max_model_len);
  o.max_num_seqs = absl::GetFlag(FLAGS_max_num_seqs);
  o.max_num_batched_tokens = absl::GetFlag(FLAGS_max_num_batched_tokens);
  o.max_queue = absl::GetFlag(FLAGS_max_queue);
  o.max_buffered_chunks = absl::GetFlag(FLAGS_max_buffered_chunks);
  o.output_threads = absl::GetFlag(FLAGS_output_threads);
  o.max_chat_messages = absl::GetFlag(FLAGS_max_chat_messages);
  o.enforce_eager = absl::GetFlag(FLAGS_enforce_eager);
  o.num_gpu_blocks_override = absl::GetFlag(FLAGS_num_gpu_blocks_override);
  o.enable_prefix_caching = absl::GetFlag(FLAGS_enable_prefix_caching);
  o.overlap = absl::GetFlag(FLAGS_overlap);
  o.speculation.method = absl::GetFlag(FLAGS_speculative_method);
  o.speculation.num_speculative_tokens = absl::GetFlag(FLAGS_num_speculative_tokens);
  o.speculation.policy = absl::GetFlag(FLAGS_speculative_policy);
  o.simulate_step_us = absl::GetFlag(FLAGS_simulate_step_us);
  o.worker_transport = absl::GetFlag(FLAGS_worker_transport);
  o.drain_timeout = absl::GetFlag(FLAGS_drain_timeout);
  o.step_timeout = absl::GetFlag(FLAGS_step_timeout);
  o.worker_timeout = absl::GetFlag(FLAGS_worker_timeout);
  o.chat_template = absl::GetFlag(FLAGS_chat_template);
  o.spawn_workers = absl::GetFlag(FLAGS_spawn_workers);
  o.worker_binary = absl::GetFlag(FLAGS_worker_binary);
  o.metrics_listen = absl::GetFlag(FLAGS_metrics_listen);
  o.kv_events_endpoint = absl::GetFlag(FLAGS_kv_events_endpoint);
  o.kv_events_replay_endpoint = absl::GetFlag(FLAGS_kv_events_replay_endpoint);
  o.kv_events_topic = absl::GetFlag(FLAGS_kv_events_topic);
  o.cluster_secret_file = absl::GetFlag(FLAGS_cluster_secret_file);
  o.tls_cert = absl::GetFlag(FLAGS_tls_cert);
  o.tls_key = absl::GetFlag(FLAGS_tls_key);
  o.tls_client_ca = absl::GetFlag(FLAGS_tls_client_ca);
  o.worker_tls_cert = absl::GetFlag(FLAGS_worker_tls_cert);
  o.worker_tls_key = absl::GetFlag(FLAGS_worker_tls_key);
  o.worker_tls_ca = absl::GetFlag(FLAGS_worker_tls_ca);
  o.api_key_file = absl::GetFlag(FLAGS_api_key_file);
  o.max_streams_per_client = absl::GetFlag(FLAGS_max_streams_per_client);
  o.trusted_fronts = absl::GetFlag(FLAGS_trusted_fronts);
  if (const char* env = std::getenv(kClusterSecretFileEnv); o.cluster_secret_file.empty() && env != nullptr) {
    o.cluster_secret_file = env;
  }
  return o;
}

// Waits for SIGTERM/SIGINT (blocked in every thread) and asks for a drain.
void SignalThread(sigset_t set, Coordinator* coordinator) {
  int sig = 0;
  sigwait(&set, &sig);
  CoordinatorLog(absl::StrCat("got ", sig == SIGINT ? "SIGINT" : "SIGTERM", "; draining"));
  coordinator->RequestStop();
}

int Run(Coordinator& coordinator) {
  if (absl::Status started = coordinator.Start(); !started.ok()) {
    return absl::IsCancelled(started) ? 0 : 1;  // cancelled: a signal came while it waited
  }
  coordinator.Serve();
  return coordinator.Drain().ok() ? 0 : 1;
}

}  // namespace
}  // namespace tpserve

int main(int argc, char** argv) {
  tpserve::InitToolUsage(argc, argv,
      "tpserve-coordinator --model DIR --tp N [flags]: serves a model through tensor-parallel workers.\n"
      "\n"
      "It listens for the workers (--worker-listen), waits for --tp of them, loads, profiles and\n"
      "warms them up, then serves tpserve.v1.Generation on --listen. SIGTERM drains.\n"
      "\n"
      "Examples:\n"
      "  tpserve-coordinator --model /models/Qwen3-8B --tp 4 --spawn-workers --listen 0.0.0.0:50051\n"
      "  tpserve-coordinator --model M --tp 4 --worker-listen 0.0.0.0:50052 --tls-cert s.pem --tls-key s.key\n"
      "  tpserve-coordinator --model M --dp 4 --tp 2 --spawn-workers --dp-routing cache-aware  # 8 GPUs, 4 groups\n",
      {__FILE__});
  tpserve::ParseFlagsWithDashes(argc, argv);  // --max-model-len as well as --max_model_len
  // --spawn-workers' workers inherit the environment (cuda/kernel_set.h, kDeterministicEnv).
  if (absl::GetFlag(FLAGS_deterministic)) setenv("TPSERVE_DETERMINISTIC", "1", 1);
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);  // before any thread: only SignalThread takes them
  std::signal(SIGPIPE, SIG_IGN);
  // Debian's abseil is built without NDEBUG, so every absl::Mutex (gRPC's
  // locks are absl::Mutex too) would run the debug deadlock detector, which
  // keeps a graph of all mutexes under one global lock: a lock and unlock cost
  // 2.6x as much, and the threads contend on that one lock. A release build
  // of abseil has it off.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  // Never destroyed: the detached signal thread may still use it at exit.
  auto* coordinator = new tpserve::Coordinator(tpserve::OptionsFromFlags());
  std::thread(tpserve::SignalThread, set, coordinator).detach();
  const int code = tpserve::Run(*coordinator);
  std::fflush(nullptr);
  _exit(code);  // the detached signal thread may still sit in sigwait
}
