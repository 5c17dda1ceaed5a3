// The coordinator's side of the worker protocol (worker.proto): the internal
// gRPC service the workers dial. Each worker opens one Session stream and says
// Hello. Commands then flow one way and replies the other, pipelined: Send
// writes a command to every rank's stream from the caller's thread and
// returns; the session's handler thread reads the worker's replies as they
// come and files them by command; Await takes every rank's reply to one
// command. Each worker answers its commands in order, so several may be in
// flight (the engine loop keeps one step ahead). Rendezvous for the
// collectives (StoreSet/StoreGet) is an in-memory key-value map.
//
// A session that breaks after Hello (the worker process died, the connection
// closed) marks the pool lost: every Send and Await from then on (and those
// waiting) fail with UNAVAILABLE naming the rank, and the on_lost callback
// runs once, so the service can stop serving even while idle. The loss names
// the rank that failed first, not one that ended because of it: a rank that
// said it exits after a failed collective, or that it was stopped by a
// signal (its launcher stops the others when one rank dies, and their
// sessions may end before the dead rank's is seen to break), is named only
// when no other rank is lost within 2 s. The pool is
// then given a new group (BeginNewGroup; the coordinator's recovery) and
// serves again once it has connected.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "coordinator/worker_gate.h"
#include "coordinator/worker_roster.h"
#include "transport/shm_channel.h"
#include "tpserve/internal/v1/worker.grpc.pb.h"

namespace tpserve {

class WorkerPool final : public tpserve::internal::v1::Worker::Service {
 public:
  using CoordinatorMessage = tpserve::internal::v1::CoordinatorMessage;
  using WorkerMessage = tpserve::internal::v1::WorkerMessage;

  // With a `secret`, only workers that prove it are admitted and may use the
  // store (coordinator/worker_gate.h); without one, any caller may. `group`:
  // the data-parallel group this pool's port serves (a worker naming another
  // is refused).
  explicit WorkerPool(int world_size, std::optional<ClusterSecret> secret = std::nullopt,
                      uint32_t protocol_version = kWorkerProtocolVersion, DpGroup group = {});
  ~WorkerPool() override;  // stops the watchdog

  // The step watchdog (--step-timeout): from now on a Step command that some
  // rank has not answered `timeout` after it was sent loses the pool, as a
  // broken session does, naming the rank that went silent: the one whose
  // heartbeats (worker.proto) stopped (a stopped or frozen process), else
  // every rank that did not answer (stuck in the step: a hung collective or
  // device). Other commands (Load, Profile, ...) have no deadline here.
  void SetStepTimeout(absl::Duration timeout);
  // A rank whose last heartbeat is older than this counts as silent.
  static constexpr absl::Duration kHeartbeatStale = absl::Seconds(2);

  // Rendezvous store limits: what authenticated workers could still get wrong.
  static constexpr size_t kMaxStoreKeys = 4096;
  static constexpr size_t kMaxStoreKeyBytes = 1024;
  static constexpr size_t kMaxStoreValueBytes = 1 << 20;
  static constexpr int kMaxStoreWaiters = 256;

  grpc::Status Challenge(grpc::ServerContext* context, const tpserve::internal::v1::ChallengeRequest* request,
                         tpserve::internal::v1::ChallengeResponse* response) override;

  grpc::Status Session(grpc::ServerContext* context,
                       grpc::ServerReaderWriter<CoordinatorMessage, WorkerMessage>* stream) override;
  grpc::Status StoreSet(grpc::ServerContext* context,
                        const tpserve::internal::v1::StoreSetRequest* request,
                        tpserve::internal::v1::StoreSetResponse* response) override;
  grpc::Status StoreGet(grpc::ServerContext* context,
                        const tpserve::internal::v1::StoreGetRequest* request,
                        tpserve::internal::v1::StoreGetResponse* response) override;

  // Blocks until ranks 0..N-1 have all said Hello. DEADLINE_EXCEEDED naming the
  // missing ranks after `timeout`; CANCELLED when `cancel` becomes true; the
  // loss when a connected worker went away meanwhile.
  absl::Status WaitForWorkers(absl::Duration timeout, const std::atomic<bool>& cancel);

  // Writes `command` (its seq is set here) to every rank and returns its seq
  // without waiting for the replies. Sends are ordered: concurrent callers
  // are serialized. UNAVAILABLE when a worker is lost or the pool closed.
  absl::StatusOr<uint64_t> Send(CoordinatorMessage command);
  // Every rank's reply to command `seq`, by rank; blocks until all came.
  // Replies to earlier commands that nobody awaited are dropped. UNAVAILABLE
  // naming the rank when a worker is lost; INTERNAL with the workers'
  // messages when any reply carries an error.
  absl::StatusOr<std::vector<WorkerMessage>> Await(uint64_t seq);
  // Send, then Await.
  absl::StatusOr<std::vector<WorkerMessage>> RunOnAll(CoordinatorMessage command);

  // Moves the commands and replies of every worker to a shared-memory channel
  // (transport/shm_channel.h, rings of `ring_bytes`): no gRPC, no thread
  // hand-off on the hot path (the thread in Await reads the replies itself).
  // The streams stay open, so a worker's death is still seen at once (and
  // closes the channel). Only when every worker said Hello from `local_host`:
  // FAILED_PRECONDITION naming the rank otherwise; a channel the workers
  // cannot open (another /dev/shm, in a container) is their INTERNAL error.
  // On any error everything stays on the streams. Call between commands.
  absl::Status UseSharedMemory(size_t ring_bytes, const std::string& local_host);

  // The Hello of every connected rank, by rank (empty until all connected).
  std::vector<tpserve::internal::v1::Hello> workers() const;
  // OK, or the UNAVAILABLE status of the first worker lost.
  absl::Status lost() const;
  // Called once (from a session thread, no lock held) when a worker is lost.
  void SetOnLost(std::function<void(const absl::Status&)> on_lost);
  // What a client should do after a loss (the coordinator's recovery), the
  // end of every loss's message from now on: "; retry shortly".
  void SetLossAdvice(std::string advice);
  // Ends every session (after Shutdown): their handlers return OK.
  void Close();
  // Recovery: ends every session of the current group (its workers see the
  // stream end and exit), waits up to `timeout` for their handlers to
  // return, then forgets the group: roster, commands and replies, the
  // shared-memory channel, the rendezvous store and the loss. A complete new
  // group may then say Hello (WaitForWorkers); Hellos that come meanwhile are
  // refused (UNAVAILABLE, to retry). DEADLINE_EXCEEDED naming the rank whose
  // session did not end. Only while nothing is sent or awaited (the engine
  // loop is suspended).
  absl::Status BeginNewGroup(absl::Duration timeout);
  // A worker process ended (the launcher of --spawn-workers saw it): the pool
  // is lost as when its session breaks, so WaitForWorkers returns at once
  // with `what` instead of waiting out its timeout for a rank that is gone.
  // After its Shutdown the exit is expected: logged (a `clean` one, status 0,
  // as such), the pool not lost.
  void ReportWorkerExit(int rank, absl::string_view what, bool clean);

 private:
  using Stream = grpc::ServerReaderWriter<CoordinatorMessage, WorkerMessage>;
  struct Sent {
    uint64_t seq = 0;
    absl::Time deadline = absl::InfiniteFuture();  // steps only: by when it must be answered
  };
  struct Slot {
    Stream* stream = nullptr;               // while its Session runs (writes under send_mu_)
    grpc::ServerContext* context = nullptr;  // to end the session (Close)
    std::deque<Sent> sent;                  // written and not answered, in order
    absl::Time last_heartbeat;              // Hello, then each heartbeat
    std::deque<WorkerMessage> replies;      // answered and not awaited, in order
    uint64_t shutdown_seq = 0;              // the Shutdown sent, if any: its reply ends the session
    std::string exiting_error;              // its reply said it exits (out of step), and why
    std::string stopped_by;                 // it said it was stopped (WorkerMessage.stopping), by what
  };
  // `what` happened to it: "died" (its session broke) or "stalled" (the watchdog).
  void MarkLost(int rank, absl::string_view why, absl::string_view what = "died");
  // The watchdog thread's loop (SetStepTimeout) and one look: the rank to
  // blame and why when a step is overdue at `now`.
  void Watch();
  std::optional<std::pair<int, std::string>> FindStalled(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The handler's loop after Hello: files every reply until the stream ends.
  grpc::Status ReadReplies(int rank, Stream* stream);
  // Files rank's reply to its oldest unanswered command; whether it answered
  // the Shutdown. A reply out of order loses the worker (INTERNAL).
  absl::StatusOr<bool> FileReply(int rank, WorkerMessage reply);
  // A stopping notice (either transport), or with shared memory the reply
  // after which the worker exits (worker_service/session.cc, the stream's
  // only other message then): recorded, true. False for a reply to file.
  bool TakeExitNotice(int rank, const WorkerMessage& message);
  // Reads the shared-memory replies of every rank up to command `seq`.
  absl::Status ReceiveShmReplies(uint64_t seq);
  // Whether every rank has answered `seq` (older unawaited replies dropped).
  bool AllAnswered(uint64_t seq) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Held for the whole of Send, so commands reach every rank in one order; a
  // session takes it to retire its stream, so no write uses a dead one.
  absl::Mutex send_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  std::string send_buffer_ ABSL_GUARDED_BY(send_mu_);  // a command serialized for the channel
  // One thread reads the channel's replies at a time (ShmHub's contract).
  absl::Mutex receive_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  mutable absl::Mutex mu_;
  absl::CondVar cv_;
  WorkerRoster roster_ ABSL_GUARDED_BY(mu_);
  std::vector<Slot> slots_ ABSL_GUARDED_BY(mu_);  // [world_size]
  uint64_t next_seq_ ABSL_GUARDED_BY(send_mu_) = 1;
  absl::Status lost_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  bool replacing_ ABSL_GUARDED_BY(mu_) = false;  // BeginNewGroup is ending the old sessions
  std::shared_ptr<ShmHub> hub_ ABSL_GUARDED_BY(mu_);  // after UseSharedMemory
  std::function<void(const absl::Status&)> on_lost_ ABSL_GUARDED_BY(mu_);
  std::string loss_advice_ ABSL_GUARDED_BY(mu_);
  absl::Duration step_timeout_ ABSL_GUARDED_BY(mu_) = absl::InfiniteDuration();
  bool stop_watch_ ABSL_GUARDED_BY(mu_) = false;
  std::thread watchdog_;

  // The Hello's proof; UNAUTHENTICATED (logged) when it fails.
  absl::StatusOr<std::string> Authenticate(const tpserve::internal::v1::Hello& hello, const std::string& peer);
  // Whether `context` carries an admitted session's store token.
  grpc::Status CheckStoreCaller(const grpc::ServerContext& context) const;

  WorkerGate gate_;
  absl::Mutex store_mu_;
  absl::CondVar store_cv_;
  absl::flat_hash_map<std::string, std::string> store_ ABSL_GUARDED_BY(store_mu_);
  int store_waiters_ ABSL_GUARDED_BY(store_mu_) = 0;
};

}  // namespace tpserve
