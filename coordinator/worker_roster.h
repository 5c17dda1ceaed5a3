// Which worker ranks have said Hello, and whether a new Hello is acceptable
// (docs/architecture.md, "Start-up"): its protocol version must be ours, its world size the
// coordinator's --tp, its rank in range and not taken. Not thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "proto/protocol_version.h"
#include "tpserve/internal/v1/worker.pb.h"

namespace tpserve {

class WorkerRoster {
 public:
  explicit WorkerRoster(int world_size, uint32_t protocol_version = kWorkerProtocolVersion);

  // Records the worker, or says why it is refused: FAILED_PRECONDITION for a
  // protocol version or world size mismatch, INVALID_ARGUMENT for a rank out of
  // range, ALREADY_EXISTS for a rank already connected. The message is meant
  // for both the worker and the coordinator's log.
  absl::Status Admit(const tpserve::internal::v1::Hello& hello);
  void Remove(int rank);

  int world_size() const { return static_cast<int>(ranks_.size()); }
  uint32_t protocol_version() const { return protocol_version_; }
  bool complete() const;
  std::vector<int> missing() const;
  // "ranks 1, 3 of 4 have not connected" (for the start-up timeout).
  std::string DescribeMissing() const;
  const std::optional<tpserve::internal::v1::Hello>& at(int rank) const { return ranks_[rank]; }
  // "rank R: host device (pid P)".
  static std::string Describe(const tpserve::internal::v1::Hello& hello);

 private:
  uint32_t protocol_version_;
  std::vector<std::optional<tpserve::internal::v1::Hello>> ranks_;  // [world_size]
};

}  // namespace tpserve
