#include "tests/testing/fake_worker.h"

#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include "proto/step_convert.h"

namespace tpserve::testing_util {

namespace iv1 = tpserve::internal::v1;

absl::StatusOr<iv1::StepResult> RunFakeStep(FakeStepWorker& model, const iv1::Step& step) {
  absl::StatusOr<StepPlan> plan = StepPlanFromProto(step);
  if (!plan.ok()) return plan.status();
  absl::StatusOr<std::vector<StepToken>> tokens = model.Run(*plan);
  if (!tokens.ok()) return tokens.status();
  iv1::StepResult result;
  result.set_step_id(step.step_id());
  AppendTokens(*tokens, result);
  return result;
}

iv1::Hello FakeHello(uint32_t rank, uint32_t world, uint32_t version) {
  iv1::Hello h;
  h.set_protocol_version(version);
  h.set_rank(rank);
  h.set_world_size(world);
  h.set_local_rank(rank);
  h.set_host("testhost");
  h.set_device("cpu");
  h.set_pid(1000 + rank);
  return h;
}

iv1::WorkerMessage FakeAnswer(const iv1::CoordinatorMessage& command, FakeStepWorker* model) {
  iv1::WorkerMessage m;
  if (command.has_profile()) {
    m.mutable_profile()->set_max_num_blocks(100);
  } else if (command.has_step() && model != nullptr) {
    absl::StatusOr<iv1::StepResult> result = RunFakeStep(*model, command.step());
    if (result.ok()) {
      *m.mutable_step() = std::move(*result);
    } else {
      m.set_error(std::string(result.status().message()));
    }
  } else if (command.has_step()) {
    m.mutable_step()->set_step_id(command.step().step_id());
  } else {
    m.mutable_ack();
  }
  return m;
}

FakeWorkerSession::FakeWorkerSession(const std::string& address, iv1::Hello hello, Answer answer)
    : stub_(iv1::Worker::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()))) {
  if (!answer) answer = [this](const iv1::CoordinatorMessage& c) { return FakeAnswer(c, &model_); };
  thread_ = std::thread([this, hello = std::move(hello), answer = std::move(answer)] {
    auto stream = stub_->Session(&context_);
    iv1::WorkerMessage first;
    *first.mutable_hello() = hello;
    {
      absl::MutexLock lock(&write_mu_);
      stream->Write(first);
      stream_ = stream.get();
    }
    iv1::CoordinatorMessage command;
    while (stream->Read(&command)) {
      ++commands_;
      iv1::WorkerMessage reply = answer(command);
      reply.set_seq(command.seq());
      absl::MutexLock lock(&write_mu_);
      if (writes_done_ || !stream->Write(reply)) break;
    }
    {
      absl::MutexLock lock(&write_mu_);
      if (!writes_done_) stream->WritesDone();
      writes_done_ = true;
      stream_ = nullptr;
    }
    status_ = stream->Finish();
    done_ = true;
  });
}

void FakeWorkerSession::SayStopping(const std::string& why) {
  absl::MutexLock lock(&write_mu_);
  if (stream_ == nullptr || writes_done_) return;
  iv1::WorkerMessage notice;
  notice.set_stopping(true);
  notice.set_error(why);
  stream_->Write(notice);
  stream_->WritesDone();
  writes_done_ = true;
}

FakeWorkerSession::~FakeWorkerSession() {
  context_.TryCancel();
  thread_.join();
}

grpc::Status FakeWorkerSession::WaitStatus() {
  while (!done_) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  return status_;
}

}  // namespace tpserve::testing_util
