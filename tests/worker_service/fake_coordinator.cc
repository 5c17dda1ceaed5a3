#include "tests/worker_service/fake_coordinator.h"

#include "absl/strings/str_cat.h"

namespace tpserve::worker_service_test {

FakeCoordinator::FakeCoordinator(int world_size, int port, std::string reject)
    : world_size_(world_size), reject_(std::move(reject)), slots_(static_cast<size_t>(world_size)) {
  grpc::ServerBuilder builder;
  int bound = 0;
  builder.AddListeningPort(absl::StrCat("127.0.0.1:", port), grpc::InsecureServerCredentials(), &bound);
  builder.RegisterService(this);
  server_ = builder.BuildAndStart();
  address_ = absl::StrCat("127.0.0.1:", bound);
}

FakeCoordinator::~FakeCoordinator() { Stop(); }

void FakeCoordinator::Stop() {
  if (server_ == nullptr) return;
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(200));
  server_->Wait();
  server_.reset();
}

bool FakeCoordinator::WaitForWorkers(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto all = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    for (const Slot& s : slots_) {
      if (!s.hello) return false;
    }
    return true;
  };
  return mu_.AwaitWithTimeout(absl::Condition(&all), timeout);
}

std::vector<iv1::Hello> FakeCoordinator::hellos() const {
  absl::MutexLock lock(&mu_);
  std::vector<iv1::Hello> out;
  for (const Slot& s : slots_) out.push_back(s.hello.value_or(iv1::Hello()));
  return out;
}

bool FakeCoordinator::WaitGone(int rank, absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto gone = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return slots_[static_cast<size_t>(rank)].gone; };
  return mu_.AwaitWithTimeout(absl::Condition(&gone), timeout);
}

std::string FakeCoordinator::stopped_by(int rank) const {
  absl::MutexLock lock(&mu_);
  return slots_[static_cast<size_t>(rank)].stopped_by;
}

absl::StatusOr<std::vector<iv1::WorkerMessage>> FakeCoordinator::RunOnAll(iv1::CoordinatorMessage command,
                                                                         absl::Duration timeout) {
  {
    absl::MutexLock lock(&mu_);
    command.set_seq(next_seq_++);
  }
  for (int r = 0; r < world_size_; ++r) {
    absl::Mutex* write_mu = nullptr;
    {
      absl::MutexLock lock(&mu_);
      write_mu = slots_[static_cast<size_t>(r)].write_mu.get();
    }
    absl::MutexLock write_lock(write_mu);
    Stream* stream = nullptr;
    {
      absl::MutexLock lock(&mu_);
      stream = slots_[static_cast<size_t>(r)].stream;
    }
    if (stream == nullptr || !stream->Write(command)) {
      return absl::UnavailableError(absl::StrCat("rank ", r, " is not connected"));
    }
  }
  std::vector<iv1::WorkerMessage> replies;
  const absl::Time deadline = absl::Now() + timeout;
  absl::MutexLock lock(&mu_);
  for (int r = 0; r < world_size_; ++r) {
    Slot& slot = slots_[static_cast<size_t>(r)];
    auto ready = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !slot.replies.empty() || slot.gone; };
    if (!mu_.AwaitWithDeadline(absl::Condition(&ready), deadline)) {
      return absl::DeadlineExceededError(absl::StrCat("rank ", r, " did not answer command ", command.seq()));
    }
    if (slot.replies.empty()) return absl::UnavailableError(absl::StrCat("rank ", r, " went away"));
    replies.push_back(std::move(slot.replies.front()));
    slot.replies.pop_front();
    if (replies.back().seq() != command.seq()) {
      return absl::InternalError(absl::StrCat("rank ", r, " answered seq ", replies.back().seq(), " to command ",
                                              command.seq()));
    }
  }
  return replies;
}

grpc::Status FakeCoordinator::Session(grpc::ServerContext*, Stream* stream) {
  iv1::WorkerMessage first;
  if (!stream->Read(&first) || !first.has_hello()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "the first message must be Hello");
  }
  if (!reject_.empty()) return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, reject_);
  const int rank = static_cast<int>(first.hello().rank());
  absl::Mutex* write_mu = nullptr;
  {
    absl::MutexLock lock(&mu_);
    if (rank >= world_size_ || slots_[static_cast<size_t>(rank)].hello) {
      return grpc::Status(grpc::StatusCode::ALREADY_EXISTS, absl::StrCat("rank ", rank, " refused"));
    }
    Slot& slot = slots_[static_cast<size_t>(rank)];
    slot.hello = first.hello();
    slot.stream = stream;
    write_mu = slot.write_mu.get();
  }
  iv1::WorkerMessage message;
  while (stream->Read(&message)) {
    absl::MutexLock lock(&mu_);
    if (message.stopping()) {
      slots_[static_cast<size_t>(rank)].stopped_by = message.error();
    } else {
      slots_[static_cast<size_t>(rank)].replies.push_back(std::move(message));
    }
  }
  absl::MutexLock write_lock(write_mu);
  absl::MutexLock lock(&mu_);
  slots_[static_cast<size_t>(rank)].stream = nullptr;
  slots_[static_cast<size_t>(rank)].gone = true;
  return grpc::Status::OK;
}

grpc::Status FakeCoordinator::StoreSet(grpc::ServerContext*, const iv1::StoreSetRequest* request,
                                       iv1::StoreSetResponse*) {
  absl::MutexLock lock(&mu_);
  store_[request->key()] = request->value();
  return grpc::Status::OK;
}

grpc::Status FakeCoordinator::StoreGet(grpc::ServerContext*, const iv1::StoreGetRequest* request,
                                       iv1::StoreGetResponse* response) {
  absl::MutexLock lock(&mu_);
  auto has = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return store_.contains(request->key()); };
  if (!mu_.AwaitWithTimeout(absl::Condition(&has), absl::Milliseconds(request->timeout_ms()))) {
    return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, absl::StrCat("key ", request->key(), " not set"));
  }
  response->set_value(store_.at(request->key()));
  return grpc::Status::OK;
}

}  // namespace tpserve::worker_service_test
