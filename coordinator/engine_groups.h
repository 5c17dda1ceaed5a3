// EngineGroups: D data-parallel groups behind one Submit (docs/architecture.md,
// "Data-parallel groups and routing"). Each group is an EngineLoop of its own
// (scheduler, block manager and prefix cache, step pipeline, workers); this
// routes each request to one of them with the DpRouter and keeps what spans
// the groups: a client's request ids (one id live once across all groups),
// Abort by id, admission, and the router's load count (released when the
// request's id is free again, EngineLoopOptions::on_retired).
//
//   DpRouter router({.groups = 2, ...});
//   KvEventPublisher events0(0, bs);  events0.FeedRouter(&router);   // per group: its index
//   EngineLoopOptions o0; o0.dp_rank = 0; o0.kv_events = &events0;
//   o0.on_retired = [&groups](auto& client, auto& id) { groups->OnRetired(client, id); };
//   ... EngineLoop loop0(tokenizer, o0, transport0), loop1(...) ...
//   EngineGroups groups({&loop0, &loop1}, router);
//   groups.Submit(client, id, std::move(prepared), queue);
//
// A group whose workers were lost (its loop suspended) is marked with
// SetAvailable(g, false): the router sends nothing new there while another
// group serves, and its requests that ran end with its loss alone; the other
// groups go on. Per-client fairness within a group is its scheduler's (fair
// admission between clients); across groups a client's requests spread as
// the router spreads everyone's, and the stream cap per client
// (GenerationService) sits above all the groups.
//
// Threads: any thread; one mutex (the id map), never held while a loop or
// the router is called but for the router's Route (a leaf).
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "coordinator/dp_router.h"
#include "coordinator/engine_loop.h"
#include "coordinator/request.h"
#include "coordinator/response_queue.h"

namespace tpserve {

class EngineGroups {
 public:
  // `loops[g]` serves group g (dp_rank g, its on_retired calling OnRetired);
  // `router` has loops.size() groups. Neither is owned; both outlive this.
  EngineGroups(std::vector<EngineLoop*> loops, DpRouter& router);

  EngineGroups(const EngineGroups&) = delete;
  EngineGroups& operator=(const EngineGroups&) = delete;

  // Routes the request by its prompt and submits it to that group's loop
  // (EngineLoop::Submit). ALREADY_EXISTS when `client` has `request_id` live
  // in any group; a group's own refusal (its workers lost, its queue full,
  // the prompt too long for its cache) as the group says it. `group`, when
  // set, gets the group it went to (or was refused by).
  absl::Status Submit(const std::string& client, const std::string& request_id, PreparedRequest request,
                      std::shared_ptr<ResponseQueue> out, int* group = nullptr);
  // EngineLoop::Abort on the group that has it; false when none has.
  bool Abort(const std::string& client, const std::string& request_id, absl::Status why);
  void AbortAll(const absl::Status& why);
  void CloseAdmission(const absl::Status& why);
  // Every group idle by `deadline` (EngineLoop::WaitIdle).
  bool WaitIdle(absl::Time deadline);
  // Whether the router may send new requests to group `g` (its workers serve).
  void SetAvailable(int g, bool available) { router_.SetAvailable(g, available); }

  // A request's id is free again (its group's EngineLoopOptions::on_retired).
  void OnRetired(const std::string& client, const std::string& request_id);

  int size() const { return static_cast<int>(loops_.size()); }
  EngineLoop& group(int g) const { return *loops_[static_cast<size_t>(g)]; }
  DpRouter& router() const { return router_; }

 private:
  const std::vector<EngineLoop*> loops_;
  DpRouter& router_;
  absl::Mutex mu_;
  // (client, request_id) -> the group of every request live in one.
  absl::flat_hash_map<std::pair<std::string, std::string>, int> live_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tpserve
