// Who may talk to the coordinator's internal port (auth/cluster_secret.h has
// the protocol). With a cluster secret a Hello must carry a fresh challenge
// from IssueChallenge and its proof, and each store call the store token of
// an admitted session; without one (loopback only, Coordinator::Start checks)
// anything goes. Challenges are single use, at most kMaxChallenges are held
// (the oldest dropped first) and each expires after kChallengeLifetime, so
// callers that only ask for challenges cannot grow the coordinator.
// With data-parallel groups each group's port has its own gate, which knows
// the group it serves: a Hello naming another group (Hello.dp_rank, the
// worker's --dp-rank) is refused naming both, secret or not; a Hello naming
// none joins the port's group.
// Thread-safe.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "auth/cluster_secret.h"
#include "tpserve/internal/v1/worker.pb.h"

namespace tpserve {

// The data-parallel group a worker port serves: group `rank` of `size` (--dp).
struct DpGroup {
  int rank = 0;
  int size = 1;
};

class WorkerGate {
 public:
  static constexpr size_t kMaxChallenges = 256;
  static constexpr absl::Duration kChallengeLifetime = absl::Minutes(1);

  WorkerGate(std::optional<ClusterSecret> secret, int world_size, DpGroup group = {});

  bool secret_required() const { return secret_.has_value(); }
  std::string IssueChallenge(absl::Time now = absl::Now());

  // The session's store token when the Hello's challenge is one this gate
  // issued (and not yet used or expired) and its proof matches ("" without a
  // secret); UNAUTHENTICATED saying what is wrong otherwise. The challenge
  // is used up either way. Then its group (CheckGroup).
  absl::StatusOr<std::string> Verify(const tpserve::internal::v1::Hello& hello, absl::Time now = absl::Now());
  // OK when the Hello names no group or this port's; FAILED_PRECONDITION
  // naming both groups (and the port to dial) otherwise.
  absl::Status CheckGroup(const tpserve::internal::v1::Hello& hello) const;
  // Makes `token` valid for `rank` (once its Hello is admitted) until Forget.
  void Grant(int rank, std::string token);
  void Forget(int rank);

  // OK when `token` is the store token of an admitted session (or there is
  // no secret); UNAUTHENTICATED otherwise.
  absl::Status CheckStoreToken(absl::string_view token) const;

 private:
  absl::StatusOr<std::string> VerifyProof(const tpserve::internal::v1::Hello& hello, absl::Time now);

  struct Challenge {
    std::string bytes;
    absl::Time expires;
  };
  const std::optional<ClusterSecret> secret_;
  const DpGroup group_;
  mutable absl::Mutex mu_;
  std::deque<Challenge> challenges_ ABSL_GUARDED_BY(mu_);     // oldest first
  std::vector<std::string> store_tokens_ ABSL_GUARDED_BY(mu_);  // [world_size], "" = none
};

}  // namespace tpserve
