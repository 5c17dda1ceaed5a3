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

WorkerGate::WorkerGate(std::optional<ClusterSecret> secret, int world_size)
    : secret_(std::move(secret)), store_tokens_(static_cast<size_t>(world_size)) {}

std::string WorkerGate::IssueChallenge(absl::Time now) {
  std::string bytes = RandomBytes(kChallengeBytes);
  absl::MutexLock lock(&mu_);
  while (!challenges_.empty() && (challenges_.size() >= kMaxChallenges || challenges_.front().expires <= now)) {
    challenges_.pop_front();
  }
  challenges_.push_back({bytes, now + kChallengeLifetime});
  return bytes;
}

absl::StatusOr<std::string> WorkerGate::Verify(const tpserve::internal::v1::Hello& hello, absl::Time now) {
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
