#include "coordinator/engine_groups.h"

#include "absl/strings/str_cat.h"
#include "base/check.h"

namespace tpserve {

EngineGroups::EngineGroups(std::vector<EngineLoop*> loops, DpRouter& router)
    : loops_(std::move(loops)), router_(router) {
  TPSERVE_CHECK(!loops_.empty() && static_cast<int>(loops_.size()) == router_.options().groups,
                "EngineGroups: ", loops_.size(), " loops for a router of ", router_.options().groups, " groups");
}

absl::Status EngineGroups::Submit(const std::string& client, const std::string& request_id,
                                  PreparedRequest request, std::shared_ptr<ResponseQueue> out, int* group) {
  std::pair<std::string, std::string> key(client, request_id);
  // Hashed once, outside the lock: the router reads them, the group's block manager keeps them.
  if (request.block_hashes.empty() && router_.reads_block_hashes()) {
    BlockManager::ExtendBlockHashes(request.prompt, router_.options().block_size, request.block_hashes);
  }
  int g = 0;
  {
    absl::MutexLock lock(&mu_);
    if (live_.contains(key)) {
      return absl::AlreadyExistsError(
          absl::StrCat("request_id \"", request_id, "\" is already running for this client; use a unique id"));
    }
    g = router_.Route(request.block_hashes).group;
    live_.emplace(key, g);  // before the loop can retire it
  }
  if (group != nullptr) *group = g;
  absl::Status submitted = loops_[static_cast<size_t>(g)]->Submit(client, request_id, std::move(request), std::move(out));
  if (!submitted.ok()) {
    {
      absl::MutexLock lock(&mu_);
      live_.erase(key);
    }
    router_.Release(g);
  }
  return submitted;
}

void EngineGroups::OnRetired(const std::string& client, const std::string& request_id) {
  int g = -1;
  {
    absl::MutexLock lock(&mu_);
    auto it = live_.find(std::pair(client, request_id));
    if (it == live_.end()) return;  // submitted to a loop directly, not through here
    g = it->second;
    live_.erase(it);
  }
  router_.Release(g);
}

bool EngineGroups::Abort(const std::string& client, const std::string& request_id, absl::Status why) {
  int g = -1;
  {
    absl::MutexLock lock(&mu_);
    auto it = live_.find(std::pair(client, request_id));
    if (it == live_.end()) return false;
    g = it->second;
  }
  return loops_[static_cast<size_t>(g)]->Abort(client, request_id, std::move(why));
}

void EngineGroups::AbortAll(const absl::Status& why) {
  for (EngineLoop* loop : loops_) loop->AbortAll(why);
}

void EngineGroups::CloseAdmission(const absl::Status& why) {
  for (EngineLoop* loop : loops_) loop->CloseAdmission(why);
}

bool EngineGroups::WaitIdle(absl::Time deadline) {
  bool idle = true;
  for (EngineLoop* loop : loops_) idle = loop->WaitIdle(deadline) && idle;
  return idle;
}

}  // namespace tpserve
