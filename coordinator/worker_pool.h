// The coordinator's side of the worker protocol (worker.proto): the internal
// gRPC service the workers dial. Each worker opens one Session stream and says
// Hello; the session's handler thread then carries the commands RunOnAll hands
// it, one at a time, and brings back the worker's reply. Rendezvous for the
// collectives (StoreSet/StoreGet) is an in-memory key-value map.
//
// A session that breaks after Hello (the worker process died, the connection
// closed) marks the pool lost: every RunOnAll from then on (and the one in
// flight) fails with UNAVAILABLE naming the rank, and the on_lost callback runs
// once, so the service can stop serving even while idle.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "coordinator/worker_roster.h"
#include "tpserve/internal/v1/worker.grpc.pb.h"

namespace tpserve {

class WorkerPool final : public tpserve::internal::v1::Worker::Service {
 public:
  using CoordinatorMessage = tpserve::internal::v1::CoordinatorMessage;
  using WorkerMessage = tpserve::internal::v1::WorkerMessage;

  explicit WorkerPool(int world_size, uint32_t protocol_version = kWorkerProtocolVersion);

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

  // Sends `command` (its seq is set here) to every rank and waits for all the
  // replies, by rank. UNAVAILABLE naming the rank when a worker is lost;
  // INTERNAL with the workers' messages when any reply carries an error.
  absl::StatusOr<std::vector<WorkerMessage>> RunOnAll(CoordinatorMessage command);

  // The Hello of every connected rank, by rank (empty until all connected).
  std::vector<tpserve::internal::v1::Hello> workers() const;
  // OK, or the UNAVAILABLE status of the first worker lost.
  absl::Status lost() const;
  // Called once (from a session thread, no lock held) when a worker is lost.
  void SetOnLost(std::function<void(const absl::Status&)> on_lost);
  // Ends every session (after Shutdown): their handlers return OK.
  void Close();
  // A worker process ended (the launcher of --spawn-workers saw it): the pool
  // is lost as when its session breaks, so WaitForWorkers returns at once
  // with `what` instead of waiting out its timeout for a rank that is gone.
  void ReportWorkerExit(int rank, absl::string_view what) { MarkLost(rank, what); }

 private:
  struct Slot {
    std::optional<CoordinatorMessage> command;  // waiting to be sent
    std::optional<WorkerMessage> reply;         // to the last command sent
  };
  void MarkLost(int rank, absl::string_view why);

  mutable absl::Mutex mu_;
  absl::CondVar cv_;
  WorkerRoster roster_ ABSL_GUARDED_BY(mu_);
  std::vector<Slot> slots_ ABSL_GUARDED_BY(mu_);  // [world_size]
  uint64_t next_seq_ ABSL_GUARDED_BY(mu_) = 1;
  absl::Status lost_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  std::function<void(const absl::Status&)> on_lost_ ABSL_GUARDED_BY(mu_);

  absl::Mutex store_mu_;
  absl::CondVar store_cv_;
  absl::flat_hash_map<std::string, std::string> store_ ABSL_GUARDED_BY(store_mu_);
};

}  // namespace tpserve
