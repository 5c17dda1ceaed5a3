// The worker process's life (tpserve-worker): dial the coordinator, open the
// Session stream, say Hello, answer every command in order until Shutdown.
// After UseSharedMemory (a coordinator on this host) the commands come, and
// the replies go, through that shared-memory channel (transport/); a second
// thread then only reads the stream, to see it end, and closes the channel
// when it does, so the worker still notices a coordinator that went away.
//
//   * The coordinator is dialled again and again until `connect_timeout`
//     passes (it may still be starting); then the error names the address,
//     or the cause when one is found (a failed TLS handshake: an untrusted
//     or misnamed certificate, a refused client certificate, plain text
//     against TLS; worker_service/dial_diagnosis.h), which is also logged as
//     soon as it is seen.
//   * Before Hello the worker asks for a challenge and proves the cluster
//     secret with it; a coordinator that wants a secret this worker lacks is
//     logged with the fix, exit 1.
//   * A Hello the coordinator refuses (duplicate rank, wrong world size,
//     protocol version) ends the stream with its reason: logged, exit 1.
//   * The stream breaking without Shutdown (the coordinator died) is logged
//     with the gRPC status: exit 1.
//   * A failed collective: the error is replied, then exit 1.
//   * Stop() (SIGTERM, SIGINT) says so on the stream (WorkerMessage.stopping,
//     its last message: a launcher stops every rank when one dies, and the
//     coordinator must not blame a rank it stopped) and ends the session,
//     cancelled if the coordinator has not ended it within kStopGrace: exit 0.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include <grpcpp/security/credentials.h>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "auth/cluster_secret.h"
#include "worker_service/command_handler.h"

namespace grpc {
class ClientContext;
}

namespace tpserve {

// How often a worker tells the coordinator it is alive (worker.proto
// WorkerMessage.heartbeat), from a thread of its own.
inline constexpr absl::Duration kHeartbeatInterval = absl::Milliseconds(500);

struct SessionOptions {
  std::string coordinator;                       // HOST:PORT
  absl::Duration connect_timeout = absl::Seconds(60);
  WorkerOptions worker;
  // Proven in Hello (auth/cluster_secret.h). A coordinator that requires a
  // secret refuses a worker without one: logged, exit 1.
  std::optional<ClusterSecret> secret;
  // How to dial the coordinator (auth/tls_credentials.h); null: plain text.
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  // With TLS: the name the coordinator's certificate must carry, when it is
  // not the host of `coordinator` (--tls-server-name).
  std::string tls_server_name;
  // The files behind `credentials` (--tls-ca, --tls-cert, --tls-key), to name
  // the cause of a failed handshake; `tls`: the credentials are TLS ones.
  bool tls = false;
  std::string tls_ca, tls_cert, tls_key;
};

// How long a stopped worker gives the coordinator to end its session after
// saying it stops, before it cancels the session itself.
inline constexpr absl::Duration kStopGrace = absl::Seconds(1);

// Lets another thread (the signal handler's) end a running session.
class SessionStopper {
 public:
  // The notice that the worker stops (`why`: "SIGTERM"), written on the
  // session stream as its last message (StreamWriter::SayStopping).
  using Notice = std::function<void(const std::string& why)>;

  // Ends the running session, because of `why`. With a notice attached it is
  // written first (on a thread of its own, so a stream that does not drain
  // cannot hold the stop), and the coordinator gets kStopGrace to end the
  // session before it is cancelled; without one it is cancelled at once.
  // Returns once the session is detached or cancelled.
  void Stop(const std::string& why);
  bool stopped() const;
  // The context of the RPC in flight, cancelled by Stop (nullptr: none), and
  // the notice for its stream. Detaching waits while a notice is being
  // written: detach before Finish, and before the stream goes.
  void Attach(grpc::ClientContext* context, Notice notice = nullptr);

 private:
  mutable absl::Mutex mu_;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  bool noticing_ ABSL_GUARDED_BY(mu_) = false;  // Stop's thread is writing the notice
  grpc::ClientContext* context_ ABSL_GUARDED_BY(mu_) = nullptr;
  Notice notice_ ABSL_GUARDED_BY(mu_);
};

// Runs the worker until Shutdown, Stop or an error; returns the exit code.
// Logs to stderr, each line prefixed "tpserve-worker[rank R]: ".
int RunWorkerSession(const SessionOptions& options, SessionStopper& stopper);

}  // namespace tpserve
