#include "coordinator/worker_pool.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "coordinator/grpc_status.h"
#include "coordinator/log.h"

namespace tpserve {

namespace iv1 = tpserve::internal::v1;

namespace {

// How often an idle session looks whether its worker hung up.
constexpr absl::Duration kIdlePoll = absl::Milliseconds(100);

}  // namespace

WorkerPool::WorkerPool(int world_size, uint32_t protocol_version)
    : roster_(world_size, protocol_version), slots_(static_cast<size_t>(world_size)) {}

void WorkerPool::SetOnLost(std::function<void(const absl::Status&)> on_lost) {
  absl::MutexLock lock(&mu_);
  on_lost_ = std::move(on_lost);
}

void WorkerPool::MarkLost(int rank, absl::string_view why) {
  std::function<void(const absl::Status&)> callback;
  absl::Status status;
  {
    absl::MutexLock lock(&mu_);
    if (closed_ || !lost_.ok()) return;  // shutting down, or already reported
    const auto& hello = roster_.at(rank);
    lost_ = absl::UnavailableError(absl::StrCat(
        "worker rank ", rank, hello ? absl::StrCat(" (", hello->host(), ", pid ", hello->pid(), ")") : "",
        " died: ", why, "; restart the coordinator and its workers"));
    status = lost_;
    callback = on_lost_;
    cv_.SignalAll();
  }
  CoordinatorLog(status.message());
  if (callback) callback(status);
}

grpc::Status WorkerPool::Session(grpc::ServerContext* context,
                                 grpc::ServerReaderWriter<CoordinatorMessage, WorkerMessage>* stream) {
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
  {
    absl::MutexLock lock(&mu_);
    absl::Status admitted = closed_ ? absl::UnavailableError("the coordinator is shutting down")
                                    : roster_.Admit(hello);
    if (!admitted.ok()) {
      CoordinatorLog(absl::StrCat("refused a worker: ", admitted.message()));
      return ToGrpc(admitted);
    }
    cv_.SignalAll();
  }
  CoordinatorLog(absl::StrCat("worker connected: ", WorkerRoster::Describe(hello)));

  while (true) {
    std::optional<CoordinatorMessage> next;
    {
      absl::MutexLock lock(&mu_);
      while (!closed_ && !slots_[rank].command && !context->IsCancelled()) {
        cv_.WaitWithTimeout(&mu_, kIdlePoll);
      }
      if (closed_) return grpc::Status::OK;
      next.swap(slots_[rank].command);
    }
    if (!next) {  // cancelled while idle: the worker hung up
      MarkLost(rank, "its connection closed (process exited or was killed)");
      return grpc::Status(grpc::StatusCode::CANCELLED, "the worker went away");
    }
    CoordinatorMessage command = std::move(*next);
    if (!stream->Write(command)) {
      MarkLost(rank, "its connection broke while a command was being sent");
      return grpc::Status(grpc::StatusCode::UNAVAILABLE, "the session broke");
    }
    WorkerMessage reply;
    if (!stream->Read(&reply)) {
      MarkLost(rank, "its connection closed before it answered (process exited or was killed)");
      return grpc::Status(grpc::StatusCode::UNAVAILABLE, "the session broke");
    }
    if (reply.seq() != command.seq()) {
      MarkLost(rank, absl::StrCat("protocol error: answered command ", reply.seq(), " while ",
                                  command.seq(), " was expected"));
      return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "reply out of order");
    }
    {
      absl::MutexLock lock(&mu_);
      slots_[rank].reply = std::move(reply);
      cv_.SignalAll();
    }
    if (command.has_shutdown()) return grpc::Status::OK;
  }
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

absl::StatusOr<std::vector<WorkerPool::WorkerMessage>> WorkerPool::RunOnAll(CoordinatorMessage command) {
  absl::MutexLock lock(&mu_);
  if (!lost_.ok()) return lost_;
  if (closed_) return absl::UnavailableError("the worker sessions are closed");
  command.set_seq(next_seq_++);
  for (Slot& slot : slots_) {
    slot.reply.reset();
    slot.command = command;
  }
  cv_.SignalAll();
  auto all_replied = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    for (const Slot& slot : slots_) {
      if (!slot.reply) return false;
    }
    return true;
  };
  while (lost_.ok() && !closed_ && !all_replied()) cv_.Wait(&mu_);
  if (!lost_.ok()) return lost_;
  if (closed_) return absl::UnavailableError("the worker sessions were closed");
  std::vector<WorkerMessage> replies;
  std::vector<std::string> errors;
  for (size_t r = 0; r < slots_.size(); ++r) {
    if (!slots_[r].reply->error().empty()) {
      errors.push_back(absl::StrCat("rank ", r, ": ", slots_[r].reply->error()));
    }
    replies.push_back(std::move(*slots_[r].reply));
    slots_[r].reply.reset();
  }
  if (!errors.empty()) return absl::InternalError(absl::StrJoin(errors, "; "));
  return replies;
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
  absl::MutexLock lock(&mu_);
  closed_ = true;
  cv_.SignalAll();
}

grpc::Status WorkerPool::StoreSet(grpc::ServerContext*, const iv1::StoreSetRequest* request,
                                  iv1::StoreSetResponse*) {
  absl::MutexLock lock(&store_mu_);
  store_[request->key()] = request->value();
  store_cv_.SignalAll();
  return grpc::Status::OK;
}

grpc::Status WorkerPool::StoreGet(grpc::ServerContext* context, const iv1::StoreGetRequest* request,
                                  iv1::StoreGetResponse* response) {
  const absl::Duration wait =
      request->timeout_ms() == 0 ? absl::Minutes(5) : absl::Milliseconds(request->timeout_ms());
  const absl::Time deadline = absl::Now() + wait;
  absl::MutexLock lock(&store_mu_);
  while (!store_.contains(request->key())) {
    if (context->IsCancelled()) return grpc::Status(grpc::StatusCode::CANCELLED, "cancelled");
    if (absl::Now() >= deadline) {
      return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED,
                          absl::StrCat("rendezvous key \"", request->key(), "\" was not set within ",
                                       absl::FormatDuration(wait), "; is every rank running?"));
    }
    store_cv_.WaitWithTimeout(&store_mu_, absl::Milliseconds(100));
  }
  response->set_value(store_.at(request->key()));
  return grpc::Status::OK;
}

}  // namespace tpserve
