// A fake tpserve-worker for the coordinator's tests: the wire side of
// FakeStepWorker (tests/testing/fake_step_worker.h) and a process stand-in that
// speaks worker.proto over gRPC.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include <grpcpp/grpcpp.h>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "proto/protocol_version.h"
#include "tests/testing/fake_step_worker.h"
#include "tpserve/internal/v1/worker.grpc.pb.h"

namespace tpserve::testing_util {

// `step` through `model` as a worker reads and answers it (StepPlanFromProto,
// then AppendTokens); the model's error, or the conversion's.
absl::StatusOr<tpserve::internal::v1::StepResult> RunFakeStep(FakeStepWorker& model,
                                                              const tpserve::internal::v1::Step& step);

// A rank's Hello as tpserve-worker sends it (host "testhost", device "cpu").
tpserve::internal::v1::Hello FakeHello(uint32_t rank, uint32_t world,
                                       uint32_t version = kWorkerProtocolVersion);

// What a healthy worker answers to `command`: a Profile with 100 blocks, a Step
// with its step id (and, with `model`, the tokens of RunFakeStep, or its error),
// an Ack to anything else.
tpserve::internal::v1::WorkerMessage FakeAnswer(const tpserve::internal::v1::CoordinatorMessage& command,
                                                FakeStepWorker* model = nullptr);

// A fake tpserve-worker process: opens a Session with the coordinator's Worker
// service at `address`, says `hello`, then answers every command with `answer`
// (by default FakeAnswer over its own FakeStepWorker) until the stream ends.
class FakeWorkerSession {
 public:
  using Answer =
      std::function<tpserve::internal::v1::WorkerMessage(const tpserve::internal::v1::CoordinatorMessage&)>;
  FakeWorkerSession(const std::string& address, tpserve::internal::v1::Hello hello, Answer answer = nullptr);
  ~FakeWorkerSession();  // cancels the session and joins its thread
  FakeWorkerSession(const FakeWorkerSession&) = delete;
  FakeWorkerSession& operator=(const FakeWorkerSession&) = delete;

  // Cancels the session: what the coordinator sees when the process dies.
  void Kill() { context_.TryCancel(); }
  // What tpserve-worker does on SIGTERM (worker_service/session.cc): says it
  // stops (WorkerMessage.stopping naming `why`), then closes its side; the
  // session ends when the coordinator ends it.
  void SayStopping(const std::string& why = "SIGTERM");
  // Waits for the session to end; the status the coordinator ended it with.
  grpc::Status WaitStatus();
  int commands() const { return commands_; }

 private:
  std::unique_ptr<tpserve::internal::v1::Worker::Stub> stub_;
  FakeStepWorker model_;  // the default answer's (only the session's thread touches it)
  grpc::ClientContext context_;
  absl::Mutex write_mu_;  // one writer at a time: the session's thread, SayStopping
  grpc::ClientReaderWriter<tpserve::internal::v1::WorkerMessage, tpserve::internal::v1::CoordinatorMessage>* stream_
      ABSL_GUARDED_BY(write_mu_) = nullptr;  // while the session's thread has it
  bool writes_done_ ABSL_GUARDED_BY(write_mu_) = false;
  std::atomic<bool> done_{false};
  std::atomic<int> commands_{0};
  grpc::Status status_;
  std::thread thread_;  // last: it starts once everything above is built
};

}  // namespace tpserve::testing_util
