// tpserve-worker --coordinator HOST:PORT [--rank R --world-size N --local-rank L] [--dp-rank G]
//                [--connect-timeout 60s] [--comm-host ADDR] [--threads 0]
//
// One tensor-parallel rank. Started by `mpirun -np N tpserve-worker ...`, by
// `tpserve-launch --nproc-per-node N -- tpserve-worker ...` or by the
// coordinator's --spawn-workers; reads its rank from the launcher's environment
// (comm/rank_env.h) unless the flags say otherwise, dials the coordinator and
// serves its commands until Shutdown (exit 0). SIGTERM / SIGINT end it cleanly
// (exit 0); a coordinator that cannot be reached or goes away, or a failed
// collective, is exit 1 with the reason on stderr.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "auth/cluster_secret.h"
#include "auth/tls_credentials.h"
#include "base/flag_spelling.h"
#include "base/status_macros.h"
#include "base/tool_usage.h"
#include "comm/rank_env.h"
#include "comm/route_address.h"
#include "worker_service/session.h"

ABSL_FLAG(std::string, coordinator, "", "the coordinator's worker address, HOST:PORT (required)");
ABSL_FLAG(int, rank, -1, "this worker's rank (default: from mpirun / PMI / torchrun environment)");
ABSL_FLAG(int, world_size, -1, "number of ranks (default: from the launcher's environment)");
ABSL_FLAG(int, local_rank, -1, "rank on this host = device index (default: from the environment)");
ABSL_FLAG(int, dp_rank, -1,
          "the data-parallel group (tpserve-coordinator --dp) this worker joins: the coordinator refuses it on "
          "another group's port (default: $TPSERVE_DP_RANK, which tpserve-launch --dp-rank sets; unset: the "
          "group whose port it dials)");
ABSL_FLAG(absl::Duration, connect_timeout, absl::Seconds(60), "how long to keep dialling the coordinator");
ABSL_FLAG(std::string, comm_host, "",
          "address this rank's gloo transport listens on, which the other ranks dial (default: this host's "
          "address toward --coordinator, so 127.0.0.1 when it is on this host and the address of the route "
          "to it when ranks span hosts)");
ABSL_FLAG(std::string, cluster_secret_file, "",
          "file holding the coordinator's cluster secret (default: $TPSERVE_CLUSTER_SECRET_FILE); "
          "a coordinator with a secret admits only workers that prove it");
ABSL_FLAG(std::string, tls_ca, "",
          "PEM CA bundle the coordinator's worker-port certificate must chain to (turns TLS on)");
ABSL_FLAG(std::string, tls_cert, "", "PEM client certificate, for a coordinator with --worker-tls-ca");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls-cert (chmod 600)");
ABSL_FLAG(std::string, tls_server_name, "",
          "the name the coordinator's certificate carries, if not the host of --coordinator");
ABSL_FLAG(int, threads, 0, "CPU backend GEMM threads (0 = cores / ranks on this host)");
ABSL_FLAG(bool, deterministic, false,
          "CUDA backend: batch-invariant kernels, sampler and all-reduce (also TPSERVE_DETERMINISTIC=1; the "
          "CPU backend always is)");

namespace {

int g_signal_pipe[2] = {-1, -1};

// Why `address` is not HOST:PORT ("" when it is): a host, a colon, a port in
// 1..65535 ("[::1]:P" for IPv6). A unix:PATH address is accepted as it is.
std::string CheckAddress(const std::string& address) {
  if (address.starts_with("unix:")) return "";
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos) return "no port";
  const std::string host = address.substr(0, colon), port = address.substr(colon + 1);
  if (host.empty()) return "no host";
  if (host.find(':') != std::string::npos && (host.front() != '[' || host.back() != ']')) {
    return "an IPv6 host goes in brackets, [::1]:PORT";
  }
  int value = 0;
  if (port.empty() || port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos ||
      (value = std::stoi(port)) < 1 || value > 65535) {
    return "the port must be a number in 1..65535";
  }
  return "";
}

void OnSignal(int sig) {
  const char byte = static_cast<char>(sig);
  (void)!write(g_signal_pipe[1], &byte, 1);
}

// Fails with the message to print (the flag named) when the flags do not make a session.
absl::StatusOr<tpserve::SessionOptions> OptionsFromFlags() {
  tpserve::SessionOptions options;
  options.coordinator = absl::GetFlag(FLAGS_coordinator);
  if (options.coordinator.empty()) {
    return absl::InvalidArgumentError("--coordinator HOST:PORT is required (the coordinator's worker address)");
  }
  if (std::string why = CheckAddress(options.coordinator); !why.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--coordinator ", options.coordinator, " is not HOST:PORT: ", why,
        " (give the address the coordinator prints as 'workers connect to HOST:PORT', its --worker-listen)"));
  }
  tpserve::RankOverrides overrides;
  if (absl::GetFlag(FLAGS_rank) >= 0) overrides.rank = absl::GetFlag(FLAGS_rank);
  if (absl::GetFlag(FLAGS_world_size) >= 0) overrides.world_size = absl::GetFlag(FLAGS_world_size);
  if (absl::GetFlag(FLAGS_local_rank) >= 0) overrides.local_rank = absl::GetFlag(FLAGS_local_rank);
  if (absl::GetFlag(FLAGS_dp_rank) >= 0) overrides.dp_rank = absl::GetFlag(FLAGS_dp_rank);
  TPSERVE_ASSIGN_OR_RETURN(options.worker.rank, tpserve::ReadRankEnv(overrides));
  options.connect_timeout = absl::GetFlag(FLAGS_connect_timeout);
  options.worker.comm_host = absl::GetFlag(FLAGS_comm_host);
  if (options.worker.comm_host.empty()) {
    absl::StatusOr<std::string> local = tpserve::LocalAddressToward(options.coordinator);
    if (!local.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("cannot choose --comm-host from --coordinator ",
                                                     options.coordinator, ": ", local.status().message(),
                                                     " (give --comm-host, an address of this host the other "
                                                     "ranks reach)"));
    }
    options.worker.comm_host = *local;
  }
  options.worker.cpu_threads = absl::GetFlag(FLAGS_threads);
  options.worker.deterministic = absl::GetFlag(FLAGS_deterministic);
  std::string secret_file = absl::GetFlag(FLAGS_cluster_secret_file);
  const char* secret_env = std::getenv(tpserve::kClusterSecretFileEnv);
  const bool from_env = secret_file.empty() && secret_env != nullptr && *secret_env != '\0';
  if (from_env) secret_file = secret_env;
  if (!secret_file.empty()) {
    TPSERVE_ASSIGN_OR_RETURN(options.secret, tpserve::ClusterSecret::FromFile(
                                                 secret_file, from_env ? tpserve::kClusterSecretFileEnv
                                                                       : "--cluster-secret-file"));
  }
  const tpserve::TlsFiles tls{.cert = absl::GetFlag(FLAGS_tls_cert), .key = absl::GetFlag(FLAGS_tls_key),
                              .ca = absl::GetFlag(FLAGS_tls_ca)};
  TPSERVE_ASSIGN_OR_RETURN(options.credentials, tpserve::MakeChannelCredentials(tls));
  options.tls_server_name = absl::GetFlag(FLAGS_tls_server_name);
  options.tls = tls.any();
  options.tls_ca = tls.ca;
  options.tls_cert = tls.cert;
  options.tls_key = tls.key;
  return options;
}

// Runs the session; SIGTERM / SIGINT stop it. The handler only writes a byte
// to a pipe (a library may start threads before main, as OpenBLAS did when
// the CPU backend used it, so masking the signals and sigwait-ing in one
// thread would not catch them all); a thread reads it and stops the session.
int RunUntilSignalled(const tpserve::SessionOptions& options) {
  if (pipe(g_signal_pipe) != 0) {
    std::perror("tpserve-worker: pipe");
    return 1;
  }
  struct sigaction action {};
  action.sa_handler = OnSignal;
  sigemptyset(&action.sa_mask);
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGINT, &action, nullptr);
  tpserve::SessionStopper stopper;
  std::atomic<bool> done{false};
  std::thread waiter([&] {
    char byte = 0;
    while (read(g_signal_pipe[0], &byte, 1) < 0 && errno == EINTR) {
    }
    // Said to the coordinator: a rank its launcher stopped is not the one that failed.
    if (!done.load()) stopper.Stop(byte == SIGINT ? "SIGINT" : "SIGTERM");
  });
  const int code = tpserve::RunWorkerSession(options, stopper);
  done.store(true);
  const char byte = 0;
  (void)!write(g_signal_pipe[1], &byte, 1);  // wake the waiter
  waiter.join();
  return code;
}

}  // namespace

int main(int argc, char** argv) {
  tpserve::InitToolUsage(argc, argv,
      "tpserve-worker --coordinator HOST:PORT [flags]: serves one tensor-parallel rank for tpserve-coordinator.\n"
      "\n"
      "Its rank comes from the launcher's environment (Open MPI, PMI, torchrun) unless --rank says.\n"
      "\n"
      "Examples:\n"
      "  mpirun -np 4 tpserve-worker --coordinator host:50052\n"
      "  tpserve-launch --nproc-per-node 4 -- tpserve-worker --coordinator 127.0.0.1:50052\n",
      {__FILE__});
  // Flags are spelled with dashes (--connect-timeout) or underscores.
  const std::vector<std::string> rest = tpserve::ParseFlagsWithDashes(argc, argv);
  if (rest.size() > 1) {
    std::fprintf(stderr, "tpserve-worker: unexpected argument '%s'; see --help\n", rest[1].c_str());
    return 2;
  }
  absl::StatusOr<tpserve::SessionOptions> options = OptionsFromFlags();
  if (!options.ok()) {
    std::fprintf(stderr, "tpserve-worker: %s\n", std::string(options.status().message()).c_str());
    return 2;
  }
  return RunUntilSignalled(*options);
}
