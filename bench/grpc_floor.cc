#include "bench/grpc_floor.h"

#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <memory>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "tpserve/v1/generation.grpc.pb.h"

namespace tpserve::bench {
namespace {

namespace v1 = tpserve::v1;

constexpr int kMaxTokensPerMessage = 64;  // more waiting go in the next message

// The messages, serialized once: [k] carries k tokens (k = 1..kMaxTokensPerMessage).
std::vector<grpc::ByteBuffer> ReadyMade() {
  std::vector<grpc::ByteBuffer> messages(kMaxTokensPerMessage + 1);
  for (int k = 1; k <= kMaxTokensPerMessage; ++k) {
    v1::GenerateResponse r;
    r.set_request_id("req-0123456789abcdef0123456789abcdef");
    for (int i = 0; i < k; ++i) r.mutable_chunk()->add_token_ids(300 + static_cast<uint32_t>(i));
    r.mutable_chunk()->set_text(std::string(static_cast<size_t>(k), 'x'));
    const std::string bytes = r.SerializeAsString();
    grpc::Slice slice(bytes);
    messages[static_cast<size_t>(k)] = grpc::ByteBuffer(&slice, 1);
  }
  return messages;
}

class Floor;

// One stream's tokens: made by the producer, written by whoever holds the
// stream's turn (the producer when it finds the stream idle, else OnWriteDone).
struct StreamState {
  absl::Mutex mu;
  int to_make ABSL_GUARDED_BY(mu) = 0;  // tokens the producer has still to make
  int ready ABSL_GUARDED_BY(mu) = 0;    // made, not yet written
  bool writing ABSL_GUARDED_BY(mu) = false;
  bool finished ABSL_GUARDED_BY(mu) = false;  // Finish was called
  bool cancelled ABSL_GUARDED_BY(mu) = false;
};

class FloorReactor final : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  FloorReactor(const std::vector<grpc::ByteBuffer>& messages, int tokens)
      : messages_(messages), state_(std::make_shared<StreamState>()) {
    absl::MutexLock lock(&state_->mu);
    state_->to_make = tokens;
  }
  const std::shared_ptr<StreamState>& state() const { return state_; }

  // The producer's share: one more token. False once the stream needs no more.
  bool Tick() {
    int write = 0;
    bool finish = false;
    bool more;
    {
      absl::MutexLock lock(&state_->mu);
      if (state_->finished || state_->cancelled) return false;
      if (state_->to_make > 0) {
        --state_->to_make;
        ++state_->ready;
      }
      if (!state_->writing) write = Take();
      if (write == 0 && !state_->writing && state_->to_make == 0) finish = state_->finished = true;
      more = state_->to_make > 0;
    }
    // Nothing can end the call between the unlock and these: the turn is ours.
    if (write > 0) StartWrite(&messages_[static_cast<size_t>(write)]);
    if (finish) Finish(grpc::Status::OK);
    return more;
  }

  void OnWriteDone(bool ok) override {
    int write = 0;
    bool finish = false;
    grpc::Status status = grpc::Status::OK;
    {
      absl::MutexLock lock(&state_->mu);
      state_->writing = false;
      if (!ok || state_->cancelled) {
        state_->cancelled = true;
        status = grpc::Status(grpc::StatusCode::CANCELLED, "the client went away");
      } else {
        write = Take();
      }
      if (write == 0 && (state_->cancelled || state_->to_make == 0)) finish = state_->finished = true;
    }
    if (write > 0) StartWrite(&messages_[static_cast<size_t>(write)]);
    if (finish) Finish(status);
  }

  void OnCancel() override {
    bool finish = false;
    {
      absl::MutexLock lock(&state_->mu);
      state_->cancelled = true;
      if (!state_->writing && !state_->finished) finish = state_->finished = true;
    }
    if (finish) Finish(grpc::Status(grpc::StatusCode::CANCELLED, "cancelled"));
  }

  void OnDone() override { delete this; }

 private:
  // The tokens of the next write (the turn is taken), 0 when none is ready.
  int Take() ABSL_EXCLUSIVE_LOCKS_REQUIRED(state_->mu) {
    const int k = std::min(state_->ready, kMaxTokensPerMessage);
    state_->ready -= k;
    state_->writing = k > 0;
    return k;
  }

  const std::vector<grpc::ByteBuffer>& messages_;
  const std::shared_ptr<StreamState> state_;
};

class Floor final : public v1::Generation::WithRawCallbackMethod_Generate<v1::Generation::CallbackService> {
 public:
  explicit Floor(int step_us) : step_(absl::Microseconds(step_us)), messages_(ReadyMade()) {
    producer_ = std::thread([this] { Produce(); });
  }
  ~Floor() override {
    stop_.store(true);
    producer_.join();
  }

  grpc::ServerWriteReactor<grpc::ByteBuffer>* Generate(grpc::CallbackServerContext*,
                                                        const grpc::ByteBuffer* wire) override {
    v1::GenerateRequest request;
    std::vector<grpc::Slice> slices;
    int tokens = 16;
    if (wire->Dump(&slices).ok()) {
      std::string bytes;
      for (const grpc::Slice& s : slices) bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
      if (request.ParseFromString(bytes) && request.stopping().has_max_tokens()) {
        tokens = static_cast<int>(request.stopping().max_tokens());
      }
    }
    auto* reactor = new FloorReactor(messages_, std::max(tokens, 1));
    absl::MutexLock lock(&mu_);
    incoming_.push_back(reactor);
    return reactor;
  }

 private:
  // One step: a token for every stream that wants one.
  void Produce() {
    std::vector<FloorReactor*> streams;
    absl::Time next = absl::Now();
    while (!stop_.load()) {
      next += step_;
      absl::SleepFor(next - absl::Now());
      {
        absl::MutexLock lock(&mu_);
        streams.insert(streams.end(), incoming_.begin(), incoming_.end());
        incoming_.clear();
      }
      // A reactor the producer dropped is never touched by it again; one it
      // keeps cannot finish without its last token, which only Tick makes.
      std::erase_if(streams, [](FloorReactor* r) { return !r->Tick(); });
    }
  }

  const absl::Duration step_;
  const std::vector<grpc::ByteBuffer> messages_;
  absl::Mutex mu_;
  std::vector<FloorReactor*> incoming_ ABSL_GUARDED_BY(mu_);  // new streams, for the producer
  std::atomic<bool> stop_{false};
  std::thread producer_;
};

}  // namespace

int RunGrpcFloorServer(int step_us) {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);  // before any thread starts: only sigwait sees them
  // As tpserve-coordinator does (tools/coordinator/main.cc): no debug
  // deadlock detector in Debian's abseil, whose Mutex gRPC locks with too.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  Floor floor(step_us);
  int port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&floor);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    std::fprintf(stderr, "grpc-floor: could not listen\n");
    return 1;
  }
  std::printf("%s127.0.0.1:%d\n", kGrpcFloorMarker, port);
  std::fflush(stdout);
  int sig = 0;
  sigwait(&signals, &sig);
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  return 0;
}

}  // namespace tpserve::bench
