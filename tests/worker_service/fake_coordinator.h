// A minimal stand-in for the coordinator's side of worker.proto, for testing
// tpserve-worker processes: it accepts the workers' Session streams and Hello,
// serves StoreSet/StoreGet from memory, and lets the test send one command to
// every rank and collect the replies. No scheduling: the tests build the steps.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "tpserve/internal/v1/worker.grpc.pb.h"

namespace tpserve::worker_service_test {

namespace iv1 = tpserve::internal::v1;

class FakeCoordinator final : public iv1::Worker::Service {
 public:
  // Listens on 127.0.0.1 (`port` 0 = any free port). A non-empty `reject`
  // refuses every Hello with FAILED_PRECONDITION and that message.
  explicit FakeCoordinator(int world_size, int port = 0, std::string reject = "");
  ~FakeCoordinator() override;

  const std::string& address() const { return address_; }
  // True once ranks 0..N-1 have said Hello.
  bool WaitForWorkers(absl::Duration timeout);
  std::vector<iv1::Hello> hellos() const;
  // True when rank `r`'s stream has ended.
  bool WaitGone(int rank, absl::Duration timeout);
  // What rank `r` said stopped it (WorkerMessage.stopping), "" if it did not.
  std::string stopped_by(int rank) const;

  // Sends `command` (seq set here) to every rank; the replies by rank, or an
  // error naming the rank that went away or did not answer in time.
  absl::StatusOr<std::vector<iv1::WorkerMessage>> RunOnAll(iv1::CoordinatorMessage command,
                                                           absl::Duration timeout = absl::Seconds(60));

  // Stops the server (cancels the sessions).
  void Stop();

  grpc::Status Session(grpc::ServerContext* context,
                       grpc::ServerReaderWriter<iv1::CoordinatorMessage, iv1::WorkerMessage>* stream) override;
  grpc::Status StoreSet(grpc::ServerContext* context, const iv1::StoreSetRequest* request,
                        iv1::StoreSetResponse* response) override;
  grpc::Status StoreGet(grpc::ServerContext* context, const iv1::StoreGetRequest* request,
                        iv1::StoreGetResponse* response) override;
  // A fixed challenge, no secret required: this fake checks no proof.
  grpc::Status Challenge(grpc::ServerContext*, const iv1::ChallengeRequest*,
                         iv1::ChallengeResponse* response) override {
    response->set_challenge("fake-coordinator-challenge");
    return grpc::Status::OK;
  }

 private:
  using Stream = grpc::ServerReaderWriter<iv1::CoordinatorMessage, iv1::WorkerMessage>;
  struct Slot {
    std::optional<iv1::Hello> hello;
    Stream* stream = nullptr;  // while the session runs
    bool gone = false;
    std::string stopped_by;  // its stopping notice's error
    std::deque<iv1::WorkerMessage> replies;
    std::unique_ptr<absl::Mutex> write_mu = std::make_unique<absl::Mutex>();  // one writer at a time
  };

  int world_size_;
  std::string reject_;
  std::string address_;
  std::unique_ptr<grpc::Server> server_;
  mutable absl::Mutex mu_;
  std::vector<Slot> slots_ ABSL_GUARDED_BY(mu_);
  uint64_t next_seq_ ABSL_GUARDED_BY(mu_) = 1;
  absl::flat_hash_map<std::string, std::string> store_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tpserve::worker_service_test
