#include "coordinator/worker_pool.h"

#include <algorithm>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "coordinator/grpc_status.h"
#include "coordinator/log.h"
#include "base/status_macros.h"

namespace tpserve {

namespace iv1 = tpserve::internal::v1;

namespace {

// How long a worker that ended as a consequence (it exited after a failed
// collective, or it was stopped by a signal) waits for a peer's session to
// break before the loss is blamed on it.
constexpr absl::Duration kPeerGrace = absl::Seconds(2);

}  // namespace

WorkerPool::WorkerPool(int world_size, std::optional<ClusterSecret> secret, uint32_t protocol_version,
                       DpGroup group)
    : roster_(world_size, protocol_version),
      slots_(static_cast<size_t>(world_size)),
      gate_(std::move(secret), world_size, group) {}

WorkerPool::~WorkerPool() {
  {
    absl::MutexLock lock(&mu_);
    stop_watch_ = true;
  }
  if (watchdog_.joinable()) watchdog_.join();
}

void WorkerPool::SetStepTimeout(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  step_timeout_ = timeout;
  if (!watchdog_.joinable()) watchdog_ = std::thread([this] { Watch(); });
}

void WorkerPool::Watch() {
  while (true) {
    std::optional<std::pair<int, std::string>> stalled;
    {
      absl::MutexLock lock(&mu_);
      // A tenth of the timeout, at most 100 ms: a stall is named soon after its deadline.
      const absl::Duration tick = std::min(absl::Milliseconds(100), step_timeout_ / 10);
      if (mu_.AwaitWithTimeout(absl::Condition(&stop_watch_), tick)) return;
      if (closed_ || !lost_.ok()) continue;
      stalled = FindStalled(absl::Now());
    }
    if (stalled) MarkLost(stalled->first, stalled->second, "stalled");
  }
}

std::optional<std::pair<int, std::string>> WorkerPool::FindStalled(absl::Time now) {
  std::vector<int> late, silent;
  uint64_t seq = 0;
  for (int r = 0; r < static_cast<int>(slots_.size()); ++r) {
    const Slot& slot = slots_[r];
    if (slot.sent.empty() || slot.sent.front().deadline > now) continue;
    late.push_back(r);
    seq = slot.sent.front().seq;
    if (now - slot.last_heartbeat > kHeartbeatStale) silent.push_back(r);
  }
  if (late.empty()) return std::nullopt;
  const std::string step = absl::StrCat("did not answer step command ", seq, " within ",
                                        absl::FormatDuration(step_timeout_), " (--step-timeout)");
  if (!silent.empty()) {
    return std::make_pair(silent.front(), absl::StrCat(step, " and sent no heartbeat for ",
                                                       absl::FormatDuration(absl::Trunc(now - slots_[silent.front()].last_heartbeat, absl::Milliseconds(100))),
                                                       ": its process is stopped or frozen"));
  }
  return std::make_pair(late.front(), absl::StrCat(step, " while alive: stuck in the step (ranks ",
                                                   absl::StrJoin(late, ", "),
                                                   " did not answer; a hung collective or device)"));
}

grpc::Status WorkerPool::Challenge(grpc::ServerContext*, const iv1::ChallengeRequest*,
                                   iv1::ChallengeResponse* response) {
  response->set_challenge(gate_.IssueChallenge());
  response->set_secret_required(gate_.secret_required());
  return grpc::Status::OK;
}

absl::StatusOr<std::string> WorkerPool::Authenticate(const iv1::Hello& hello, const std::string& peer) {
  absl::StatusOr<std::string> token = gate_.Verify(hello);
  if (!token.ok()) CoordinatorLog(absl::StrCat("refused a worker from ", peer, ": ", token.status().message()));
  return token;
}

grpc::Status WorkerPool::CheckStoreCaller(const grpc::ServerContext& context) const {
  const auto& metadata = context.client_metadata();
  auto it = metadata.find(kStoreTokenMetadata);
  const absl::string_view token =
      it == metadata.end() ? absl::string_view() : absl::string_view(it->second.data(), it->second.size());
  return ToGrpc(gate_.CheckStoreToken(token));
}

void WorkerPool::SetOnLost(std::function<void(const absl::Status&)> on_lost) {
  absl::MutexLock lock(&mu_);
  on_lost_ = std::move(on_lost);
}

void WorkerPool::SetLossAdvice(std::string advice) {
  absl::MutexLock lock(&mu_);
  loss_advice_ = std::move(advice);
}

void WorkerPool::MarkLost(int rank, absl::string_view why, absl::string_view what) {
  std::function<void(const absl::Status&)> callback;
  absl::Status status;
  std::shared_ptr<ShmHub> hub;
  {
    absl::MutexLock lock(&mu_);
    if (closed_ || replacing_ || !lost_.ok()) return;  // shutting down, replaced, or already reported
    const auto& hello = roster_.at(rank);
    lost_ = absl::UnavailableError(absl::StrCat(
        "worker rank ", rank, hello ? absl::StrCat(" (", hello->host(), ", pid ", hello->pid(), ")") : "",
        " ", what, ": ", why, loss_advice_));
    status = lost_;
    callback = on_lost_;
    hub = hub_;
    cv_.SignalAll();
  }
  if (hub != nullptr) hub->Close(status);  // wakes a Publish or Receive waiting on the dead worker
  CoordinatorLog(status.message());
  if (callback) callback(status);
}

void WorkerPool::ReportWorkerExit(int rank, absl::string_view what, bool clean) {
  bool shut_down;
  {
    absl::MutexLock lock(&mu_);
    shut_down = slots_.at(static_cast<size_t>(rank)).shutdown_seq != 0;
  }
  if (!shut_down) return MarkLost(rank, what);
  CoordinatorLog(clean ? absl::StrCat("worker rank ", rank, " shut down cleanly")
                       : absl::StrCat("worker rank ", rank, " ended badly after Shutdown: ", what));
}

grpc::Status WorkerPool::Session(grpc::ServerContext* context, Stream* stream) {
  WorkerMessage first;
  if (!stream->Read(&first)) {
    return grpc::Status(grpc::StatusCode::CANCELLED, "the session ended before Hello");
  }
  if (!first.has_hello()) {
    const std::string msg = absl::StrCat("the first message of a session must be Hello (", context->peer(), ")");
    CoordinatorLog(absl::StrCat("refused a worker: ", msg));
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, msg);
  }
  const iv1::Hello& hello = first.hello();
  const int rank = static_cast<int>(hello.rank());
  absl::StatusOr<std::string> store_token = Authenticate(hello, context->peer());
  if (!store_token.ok()) return ToGrpc(store_token.status());
  {
    absl::MutexLock lock(&mu_);
    absl::Status admitted =
        closed_      ? absl::UnavailableError("the coordinator is shutting down")
        : replacing_ ? absl::UnavailableError("the coordinator is ending its previous worker group; retry")
                     : roster_.Admit(hello);
    if (!admitted.ok()) {
      CoordinatorLog(absl::StrCat("refused a worker: ", admitted.message()));
      return ToGrpc(admitted);
    }
    slots_[rank].stream = stream;
    slots_[rank].context = context;
    slots_[rank].last_heartbeat = absl::Now();
    gate_.Grant(rank, *std::move(store_token));
    cv_.SignalAll();
  }
  CoordinatorLog(absl::StrCat("worker connected: ", WorkerRoster::Describe(hello)));
  const grpc::Status end = ReadReplies(rank, stream);
  // Retire the stream: once this handler returns no Send may write to it.
  absl::MutexLock send(&send_mu_);
  absl::MutexLock lock(&mu_);
  slots_[rank].stream = nullptr;
  slots_[rank].context = nullptr;
  gate_.Forget(rank);
  return end;
}

absl::StatusOr<bool> WorkerPool::FileReply(int rank, WorkerMessage reply) {
  absl::Status error;
  bool shut_down = false;
  {
    absl::MutexLock lock(&mu_);
    Slot& slot = slots_[rank];
    if (slot.sent.empty() || reply.seq() != slot.sent.front().seq) {
      error = absl::InternalError(absl::StrCat(
          "protocol error: answered command ", reply.seq(), " while ",
          slot.sent.empty() ? std::string("none") : absl::StrCat(slot.sent.front().seq), " was expected"));
    } else {
      slot.sent.pop_front();
      shut_down = reply.seq() == slot.shutdown_seq;
      if (reply.exiting()) slot.exiting_error = reply.error();
      slot.replies.push_back(std::move(reply));
      cv_.SignalAll();
    }
  }
  if (!error.ok()) {
    MarkLost(rank, error.message());
    return error;
  }
  return shut_down;
}

bool WorkerPool::TakeExitNotice(int rank, const WorkerMessage& message) {
  absl::MutexLock lock(&mu_);
  if (message.stopping()) {  // over either transport: it comes on the stream, last
    slots_[rank].stopped_by = message.error().empty() ? "a signal" : message.error();
    return true;
  }
  if (hub_ == nullptr) return false;
  if (message.exiting()) slots_[rank].exiting_error = message.error();
  return true;
}

grpc::Status WorkerPool::ReadReplies(int rank, Stream* stream) {
  WorkerMessage reply;
  while (stream->Read(&reply)) {
    if (reply.heartbeat()) {
      absl::MutexLock lock(&mu_);
      slots_[rank].last_heartbeat = absl::Now();
      continue;
    }
    if (TakeExitNotice(rank, reply)) continue;
    absl::StatusOr<bool> shut_down = FileReply(rank, std::move(reply));
    if (!shut_down.ok()) return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "reply out of order");
    if (*shut_down) return grpc::Status::OK;  // the worker exits; its stream ends here
  }
  std::string why;
  {
    absl::MutexLock lock(&mu_);
    // Closed, replaced, or shut down while the replies came through shared memory.
    if (closed_ || replacing_ || slots_[rank].shutdown_seq != 0) return grpc::Status::OK;
    const Slot& slot = slots_[rank];
    if (!slot.exiting_error.empty()) {
      why = absl::StrCat("it exited after a failed collective: ", slot.exiting_error);
    } else if (!slot.stopped_by.empty()) {
      why = absl::StrCat("it was stopped by ", slot.stopped_by,
                         " (by its launcher or an operator) and no other rank was lost within ",
                         absl::FormatDuration(kPeerGrace));
    }
    if (!why.empty()) {
      // A rank that ended as a consequence was most often ended by a peer
      // that died first: its collective failed, or its launcher stopped it
      // because the peer died (whose session may break after this one's).
      // Give that peer's session time to break, so the loss names the rank
      // that died, whatever order the sessions end in.
      auto peer_lost = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !lost_.ok() || closed_ || replacing_; };
      mu_.AwaitWithTimeout(absl::Condition(&peer_lost), kPeerGrace);
    }
  }
  MarkLost(rank, why.empty() ? "its connection closed (process exited or was killed)" : why);
  return grpc::Status(grpc::StatusCode::UNAVAILABLE, "the session broke");
}

absl::Status WorkerPool::WaitForWorkers(absl::Duration timeout, const std::atomic<bool>& cancel) {
  const absl::Time deadline = absl::Now() + timeout;
  absl::MutexLock lock(&mu_);
  while (lost_.ok() && !roster_.complete()) {
    if (cancel.load()) return absl::CancelledError("stopped while waiting for the workers");
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          "waited ", absl::FormatDuration(timeout), " for ", roster_.world_size(),
          " workers: ", roster_.DescribeMissing(),
          "; start them with `mpirun -np ", roster_.world_size(),
          " tpserve-worker --coordinator HOST:PORT` (or --spawn-workers), or raise --worker-timeout"));
    }
    cv_.WaitWithTimeout(&mu_, absl::Milliseconds(100));
  }
  return lost_;
}

absl::StatusOr<uint64_t> WorkerPool::Send(CoordinatorMessage command) {
  int broken = -1;
  {
    absl::MutexLock send(&send_mu_);
    command.set_seq(next_seq_++);
    std::vector<Stream*> streams;
    std::shared_ptr<ShmHub> hub;
    {
      absl::MutexLock lock(&mu_);
      if (!lost_.ok()) return lost_;
      if (closed_) return absl::UnavailableError("the worker sessions are closed");
      for (const Slot& slot : slots_) {
        if (slot.stream == nullptr) return absl::UnavailableError("not every worker has connected");
      }
      hub = hub_;
      const absl::Time deadline =
          command.has_step() ? absl::Now() + step_timeout_ : absl::InfiniteFuture();
      for (Slot& slot : slots_) {
        slot.sent.push_back({command.seq(), deadline});
        if (command.has_shutdown()) slot.shutdown_seq = command.seq();
        if (hub == nullptr) streams.push_back(slot.stream);  // the channel needs no stream list
      }
    }
    if (hub != nullptr) {  // one copy for every worker; a loss closes the hub
      command.SerializeToString(&send_buffer_);
      if (absl::Status published = hub->Publish(send_buffer_); !published.ok()) {
        const absl::Status loss = lost();
        return loss.ok() ? published : loss;
      }
      return command.seq();
    }
    // The streams stay valid: a session retires its stream under send_mu_.
    for (size_t r = 0; r < streams.size() && broken < 0; ++r) {
      if (!streams[r]->Write(command)) broken = static_cast<int>(r);
    }
    if (broken < 0) return command.seq();
  }
  MarkLost(broken, "its connection broke while a command was being sent");
  return lost();
}

absl::Status WorkerPool::ReceiveShmReplies(uint64_t seq) {
  absl::MutexLock receive(&receive_mu_);
  for (int rank = 0; rank < static_cast<int>(slots_.size()); ++rank) {
    std::shared_ptr<ShmHub> hub;
    while (true) {
      {
        absl::MutexLock lock(&mu_);
        if (!lost_.ok()) return lost_;
        Slot& slot = slots_[rank];
        // Answered already, or not yet sent to it: nothing to read.
        if (slot.sent.empty() || slot.sent.front().seq > seq) break;
        hub = hub_;
      }
      absl::StatusOr<std::string> bytes = hub->Receive(rank);
      if (!bytes.ok()) {
        const absl::Status loss = lost();
        return loss.ok() ? bytes.status() : loss;
      }
      WorkerMessage reply;
      if (!reply.ParseFromString(*bytes)) {
        MarkLost(rank, "protocol error: a reply in shared memory does not parse");
        return lost();
      }
      TPSERVE_RETURN_IF_ERROR(FileReply(rank, std::move(reply)).status());
    }
  }
  return absl::OkStatus();
}

bool WorkerPool::AllAnswered(uint64_t seq) {
  bool all = true;
  for (Slot& slot : slots_) {
    while (!slot.replies.empty() && slot.replies.front().seq() < seq) slot.replies.pop_front();
    all = all && !slot.replies.empty() && slot.replies.front().seq() == seq;
  }
  return all;
}

absl::StatusOr<std::vector<WorkerPool::WorkerMessage>> WorkerPool::Await(uint64_t seq) {
  bool shm;
  {
    absl::MutexLock lock(&mu_);
    shm = hub_ != nullptr;
  }
  if (shm) TPSERVE_RETURN_IF_ERROR(ReceiveShmReplies(seq));  // this thread reads them
  absl::MutexLock lock(&mu_);
  while (lost_.ok() && !closed_ && !AllAnswered(seq)) cv_.Wait(&mu_);
  if (!lost_.ok()) return lost_;
  if (!AllAnswered(seq)) return absl::UnavailableError("the worker sessions were closed");
  std::vector<WorkerMessage> replies;
  std::vector<std::string> errors;
  for (size_t r = 0; r < slots_.size(); ++r) {
    WorkerMessage& reply = slots_[r].replies.front();
    if (!reply.error().empty()) errors.push_back(absl::StrCat("rank ", r, ": ", reply.error()));
    replies.push_back(std::move(reply));
    slots_[r].replies.pop_front();
  }
  if (!errors.empty()) return absl::InternalError(absl::StrJoin(errors, "; "));
  return replies;
}

absl::StatusOr<std::vector<WorkerPool::WorkerMessage>> WorkerPool::RunOnAll(CoordinatorMessage command) {
  TPSERVE_ASSIGN_OR_RETURN(const uint64_t seq, Send(std::move(command)));
  return Await(seq);
}

std::vector<iv1::Hello> WorkerPool::workers() const {
  absl::MutexLock lock(&mu_);
  std::vector<iv1::Hello> out;
  if (!roster_.complete()) return out;
  for (int r = 0; r < roster_.world_size(); ++r) out.push_back(*roster_.at(r));
  return out;
}

absl::Status WorkerPool::lost() const {
  absl::MutexLock lock(&mu_);
  return lost_;
}

void WorkerPool::Close() {
  std::shared_ptr<ShmHub> hub;
  {
    absl::MutexLock lock(&mu_);
    closed_ = true;
    for (const Slot& slot : slots_) {
      if (slot.context != nullptr) slot.context->TryCancel();  // its Read returns: the session ends OK
    }
    hub = hub_;
    cv_.SignalAll();
  }
  if (hub != nullptr) hub->Close(absl::UnavailableError("the coordinator closed the worker sessions"));
}

absl::Status WorkerPool::BeginNewGroup(absl::Duration timeout) {
  std::shared_ptr<ShmHub> hub;
  {
    absl::MutexLock lock(&mu_);
    if (closed_) return absl::UnavailableError("the worker sessions are closed");
    replacing_ = true;
    for (const Slot& slot : slots_) {
      if (slot.context != nullptr) slot.context->TryCancel();  // its Read returns: the session ends
    }
    hub = std::move(hub_);
    cv_.SignalAll();
  }
  if (hub != nullptr) hub->Close(absl::UnavailableError("the coordinator replaces its worker group"));
  {
    absl::MutexLock lock(&mu_);
    auto retired = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return std::all_of(slots_.begin(), slots_.end(), [](const Slot& s) { return s.stream == nullptr; });
    };
    if (!mu_.AwaitWithTimeout(absl::Condition(&retired), timeout)) {
      for (size_t r = 0; r < slots_.size(); ++r) {
        if (slots_[r].stream == nullptr) continue;
        replacing_ = false;
        return absl::DeadlineExceededError(absl::StrCat("the session of worker rank ", r, " did not end within ",
                                                        absl::FormatDuration(timeout)));
      }
    }
    roster_ = WorkerRoster(roster_.world_size(), roster_.protocol_version());
    slots_.assign(slots_.size(), Slot{});
    lost_ = absl::OkStatus();
    replacing_ = false;
  }
  absl::MutexLock lock(&store_mu_);
  store_.clear();  // the next group rendezvouses under a new prefix (StartupOptions::store_prefix)
  return absl::OkStatus();
}

absl::Status WorkerPool::UseSharedMemory(size_t ring_bytes, const std::string& local_host) {
  {
    absl::MutexLock lock(&mu_);
    for (int r = 0; r < roster_.world_size(); ++r) {
      const auto& hello = roster_.at(r);
      if (!hello || hello->host() != local_host) {
        return absl::FailedPreconditionError(absl::StrCat(
            "worker rank ", r, " runs on ", hello ? hello->host() : "?", ", not on this host (", local_host, ")"));
      }
    }
    if (hub_ != nullptr) return absl::OkStatus();
  }
  TPSERVE_ASSIGN_OR_RETURN(std::unique_ptr<ShmHub> hub, ShmHub::Create(static_cast<int>(slots_.size()), ring_bytes));
  CoordinatorMessage command;
  command.mutable_use_shared_memory()->set_name(hub->name());
  absl::StatusOr<std::vector<WorkerMessage>> acked = RunOnAll(std::move(command));
  if (!acked.ok()) return acked.status();  // the hub goes; the workers stay on their streams
  absl::MutexLock lock(&mu_);
  hub_ = std::move(hub);
  return absl::OkStatus();
}

grpc::Status WorkerPool::StoreSet(grpc::ServerContext* context, const iv1::StoreSetRequest* request,
                                  iv1::StoreSetResponse*) {
  if (grpc::Status caller = CheckStoreCaller(*context); !caller.ok()) return caller;
  if (request->key().size() > kMaxStoreKeyBytes || request->value().size() > kMaxStoreValueBytes) {
    return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                        absl::StrCat("a rendezvous key holds at most ", kMaxStoreKeyBytes, " bytes and its value ",
                                     kMaxStoreValueBytes, " (got ", request->key().size(), " and ",
                                     request->value().size(), ")"));
  }
  absl::MutexLock lock(&store_mu_);
  if (store_.size() >= kMaxStoreKeys && !store_.contains(request->key())) {
    return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                        absl::StrCat("the rendezvous store holds at most ", kMaxStoreKeys, " keys"));
  }
  store_[request->key()] = request->value();
  store_cv_.SignalAll();
  return grpc::Status::OK;
}

grpc::Status WorkerPool::StoreGet(grpc::ServerContext* context, const iv1::StoreGetRequest* request,
                                  iv1::StoreGetResponse* response) {
  const absl::Duration wait =
      request->timeout_ms() == 0 ? absl::Minutes(5) : absl::Milliseconds(request->timeout_ms());
  const absl::Time deadline = absl::Now() + wait;
  if (grpc::Status caller = CheckStoreCaller(*context); !caller.ok()) return caller;
  absl::MutexLock lock(&store_mu_);
  if (store_waiters_ >= kMaxStoreWaiters) {
    return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                        absl::StrCat("at most ", kMaxStoreWaiters, " rendezvous reads may wait at once"));
  }
  ++store_waiters_;
  grpc::Status status = grpc::Status::OK;
  while (!store_.contains(request->key())) {
    if (context->IsCancelled()) {
      status = grpc::Status(grpc::StatusCode::CANCELLED, "cancelled");
      break;
    }
    if (absl::Now() >= deadline) {
      status = grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED,
                            absl::StrCat("rendezvous key \"", request->key(), "\" was not set within ",
                                         absl::FormatDuration(wait), "; is every rank running?"));
      break;
    }
    store_cv_.WaitWithTimeout(&store_mu_, absl::Milliseconds(100));
  }
  --store_waiters_;
  if (status.ok()) response->set_value(store_.at(request->key()));
  return status;
}

}  // namespace tpserve
