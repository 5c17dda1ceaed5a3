#include "coordinator/worker_gate.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "auth/secret_file.h"

namespace tpserve {

namespace {

constexpr char kNoSecretFix[] =
    "give the worker the coordinator's cluster secret (--cluster-secret-file FILE or "
    "TPSERVE_CLUSTER_SECRET_FILE)";

}  // namespace

WorkerGate::WorkerGate(std::optional<ClusterSecret> secret, int world_size, DpGroup group)
    : secret_(std::move(secret)), group_(group), store_tokens_(static_cast<size_t>(world_size)) {}

std::string WorkerGate::IssueChallenge(absl::Time now) {
  std::string bytes = RandomBytes(kChallengeBytes);
  absl::MutexLock lock(&mu_);
  while (!challenges_.empty() && (challenges_.size() >= kMaxChallenges || challenges_.front().expires <= now)) {
    challenges_.pop_front();
  }
  challenges_.push_back({bytes, now + kChallengeLifetime});
  return bytes;
}

absl::Status WorkerGate::CheckGroup(const tpserve::internal::v1::Hello& hello) const {
  if (!hello.has_dp_rank() || hello.dp_rank() == static_cast<uint32_t>(group_.rank)) return absl::OkStatus();
  const std::string who = absl::StrCat("worker rank ", hello.rank(), " on ", hello.host(), " (pid ", hello.pid(), ")");
  if (hello.dp_rank() >= static_cast<uint32_t>(group_.size)) {
    return absl::FailedPreconditionError(absl::StrCat(
        who, " names data-parallel group ", hello.dp_rank(), " (--dp-rank) but this coordinator serves ",
        group_.size, group_.size == 1 ? " group (no --dp)" : " groups (--dp)", ", 0..", group_.size - 1,
        "; fix the worker's --dp-rank"));
  }
  return absl::FailedPreconditionError(absl::StrCat(
      who, " names data-parallel group ", hello.dp_rank(), " (--dp-rank) but dialled the port of group ",
      group_.rank, "; dial group ", hello.dp_rank(), "'s port (--worker-listen's port + ", hello.dp_rank(),
      ", logged as 'group ", hello.dp_rank(), ": workers connect to ADDR') or fix --dp-rank"));
}

absl::StatusOr<std::string> WorkerGate::Verify(const tpserve::internal::v1::Hello& hello, absl::Time now) {
  absl::StatusOr<std::string> token = VerifyProof(hello, now);
  if (!token.ok()) return token;
  if (absl::Status group = CheckGroup(hello); !group.ok()) return group;
  return token;
}

absl::StatusOr<std::string> WorkerGate::VerifyProof(const tpserve::internal::v1::Hello& hello, absl::Time now) {
  if (!secret_) return std::string();
  if (hello.proof().empty()) {
    return absl::UnauthenticatedError(absl::StrCat("rank ", hello.rank(),
                                                   " sent no proof of the cluster secret; ", kNoSecretFix));
  }
  absl::MutexLock lock(&mu_);
  auto it = std::find_if(challenges_.begin(), challenges_.end(), [&](const Challenge& c) {
    return ConstantTimeEquals(c.bytes, hello.challenge());
  });
  if (it == challenges_.end() || it->expires <= now) {
    return absl::UnauthenticatedError(absl::StrCat(
        "rank ", hello.rank(), "'s Hello answers no live challenge (used already, expired, or never issued)"));
  }
  challenges_.erase(it);  // single use, proof right or wrong
  const std::string expected = secret_->HelloProof(hello.challenge(), hello.rank(), hello.world_size());
  if (!ConstantTimeEquals(expected, hello.proof())) {
    return absl::UnauthenticatedError(absl::StrCat(
        "rank ", hello.rank(), " proved a different cluster secret; ", kNoSecretFix));
  }
  return secret_->StoreToken(hello.challenge());
}

void WorkerGate::Grant(int rank, std::string token) {
  absl::MutexLock lock(&mu_);
  if (rank >= 0 && static_cast<size_t>(rank) < store_tokens_.size()) store_tokens_[rank] = std::move(token);
}

void WorkerGate::Forget(int rank) {
  absl::MutexLock lock(&mu_);
  if (rank >= 0 && static_cast<size_t>(rank) < store_tokens_.size()) store_tokens_[rank].clear();
}

absl::Status WorkerGate::CheckStoreToken(absl::string_view token) const {
  if (!secret_) return absl::OkStatus();
  absl::MutexLock lock(&mu_);
  bool found = false;
  for (const std::string& admitted : store_tokens_) {
    if (!admitted.empty() && ConstantTimeEquals(admitted, token)) found = true;
  }
  if (found) return absl::OkStatus();
  return absl::UnauthenticatedError(
      "the rendezvous store answers only the admitted workers of this coordinator (no valid store token)");
}

}  // namespace tpserve
