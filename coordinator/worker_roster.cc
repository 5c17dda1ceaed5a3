#include "coordinator/worker_roster.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace tpserve {

WorkerRoster::WorkerRoster(int world_size, uint32_t protocol_version)
    : protocol_version_(protocol_version), ranks_(static_cast<size_t>(world_size)) {}

std::string WorkerRoster::Describe(const tpserve::internal::v1::Hello& hello) {
  return absl::StrCat("rank ", hello.rank(), ": ", hello.host(), " ", hello.device(), " (pid ",
                      hello.pid(), ")");
}

absl::Status WorkerRoster::Admit(const tpserve::internal::v1::Hello& hello) {
  const std::string who = absl::StrCat("worker rank ", hello.rank(), " on ", hello.host(),
                                       " (pid ", hello.pid(), ")");
  if (hello.protocol_version() != protocol_version_) {
    return absl::FailedPreconditionError(absl::StrCat(
        who, " speaks protocol version ", hello.protocol_version(), " but this coordinator speaks ",
        protocol_version_, "; run tpserve-worker and tpserve-coordinator from the same build"));
  }
  if (hello.world_size() != ranks_.size()) {
    return absl::FailedPreconditionError(absl::StrCat(
        who, " was started with world size ", hello.world_size(), " but the coordinator serves --tp ",
        ranks_.size(), "; start exactly ", ranks_.size(), " workers (mpirun -np ", ranks_.size(),
        ")"));
  }
  if (hello.rank() >= ranks_.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(who, ": rank is outside 0..", ranks_.size() - 1));
  }
  if (const auto& have = ranks_[hello.rank()]; have.has_value()) {
    return absl::AlreadyExistsError(absl::StrCat(
        who, ": rank ", hello.rank(), " is already connected (", Describe(*have),
        "); two launchers are pointing at this coordinator, or the rank environment is wrong"));
  }
  ranks_[hello.rank()] = hello;
  return absl::OkStatus();
}

void WorkerRoster::Remove(int rank) {
  if (rank >= 0 && rank < world_size()) ranks_[rank].reset();
}

bool WorkerRoster::complete() const { return missing().empty(); }

std::vector<int> WorkerRoster::missing() const {
  std::vector<int> out;
  for (size_t r = 0; r < ranks_.size(); ++r) {
    if (!ranks_[r]) out.push_back(static_cast<int>(r));
  }
  return out;
}

std::string WorkerRoster::DescribeMissing() const {
  const std::vector<int> m = missing();
  return absl::StrCat(m.size() == 1 ? "rank " : "ranks ", absl::StrJoin(m, ", "), " of ",
                      ranks_.size(), m.size() == 1 ? " has" : " have", " not connected");
}

}  // namespace tpserve
