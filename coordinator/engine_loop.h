// The engine loop: one thread that owns the Scheduler, the BlockManager and
// every live request's OutputProcessor (docs/architecture.md, "Threads and locks").
//
// gRPC threads talk to it only through its inbox (new requests, aborts) and
// read results from each request's ResponseQueue. Each iteration:
//   drain the inbox → Schedule → BuildStepPlan → run the step on every worker →
//   OnStepDone → each sampled token through its request's OutputProcessor →
//   Chunk to the stream; Complete and Finish for requests that stopped.
// With nothing to do it blocks on the inbox (no spinning).
//
// Failures: a step that fails with UNAVAILABLE (a worker was lost) ends every
// live request with that status and closes admission for good; any other step
// failure ends the requests of that step with INTERNAL.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "scheduler/block_manager.h"
#include "coordinator/output_processor.h"
#include "coordinator/request.h"
#include "coordinator/response_queue.h"
#include "scheduler/scheduler.h"
#include "scheduler/step_plan.h"
#include "tokenizer/tokenizer.h"
#include "tpserve/internal/v1/worker.pb.h"

namespace tpserve {

struct EngineLoopOptions {
  SchedulerConfig scheduler;
  int64_t num_blocks = 0;               // KV blocks every worker allocated
  int32_t block_size = 16;
  bool enable_prefix_caching = true;
  int64_t max_model_len = 0;
  std::vector<int32_t> eos_token_ids;   // generation_config.json
};

struct EngineStats {
  int64_t num_blocks = 0;
  int64_t free_blocks = 0;
  int32_t running = 0;
  int32_t waiting = 0;      // in the scheduler's queue or the inbox
  double prefix_cache_hit_rate = 0;
  int64_t steps = 0;
};

class EngineLoop {
 public:
  // Runs one step on every worker; returns rank 0's result. The step is
  // handed over (by value: it can move into the command sent to the workers).
  using RunStepFn = std::function<absl::StatusOr<tpserve::internal::v1::StepResult>(
      tpserve::internal::v1::Step)>;

  // `tokenizer` must outlive the loop.
  EngineLoop(const Tokenizer& tokenizer, EngineLoopOptions options, RunStepFn run_step);
  ~EngineLoop();  // Stop()

  void Start();
  // Ends the loop thread; requests still live end with UNAVAILABLE.
  void Stop();

  // Queues a request; its responses go to `out`. UNAVAILABLE once admission is
  // closed, RESOURCE_EXHAUSTED when max_queue requests are waiting already,
  // ALREADY_EXISTS when `request_id` is live.
  absl::Status Submit(const std::string& request_id, PreparedRequest request,
                      std::shared_ptr<ResponseQueue> out);
  // Ends a live request at the next step boundary (its blocks are freed). With
  // an OK `why` its stream gets Complete{ABORTED}; otherwise it ends with `why`.
  // False when no live request has this id.
  bool Abort(const std::string& request_id, absl::Status why);
  void AbortAll(absl::Status why);
  // Refuses new requests from now on with `why` (UNAVAILABLE: draining).
  void CloseAdmission(absl::Status why);
  // A worker was lost: every live request ends with `why`, admission closes.
  void Fail(absl::Status why);
  // Blocks until no request is live, or `deadline`; true when none is.
  bool WaitIdle(absl::Time deadline);

  EngineStats stats() const;

 private:
  struct Live;  // one admitted request (engine thread only)
  struct Inbound {
    uint64_t seq_id;
    std::unique_ptr<Live> live;
  };

  void Run();
  // One iteration; false when it found nothing to run.
  bool Iterate(std::vector<Inbound> adds, std::vector<std::pair<uint64_t, absl::Status>> aborts,
               const absl::Status& failed);
  // The parts of an iteration, in order.
  void Admit(std::vector<Inbound> adds, const absl::Status& failed);  // to the scheduler, or End
  void ApplyAborts(std::vector<std::pair<uint64_t, absl::Status>> aborts);
  void EndUnservable(std::span<const uint64_t> ids);  // too long for the whole KV cache
  // Sends the step to the workers (run_step_); rank 0's tokens.
  absl::StatusOr<std::vector<StepToken>> RunStep(const ScheduledStep& step, uint64_t step_id);
  // UNAVAILABLE fails the loop; anything else ends the step's requests with INTERNAL.
  void OnStepFailed(const ScheduledStep& step, uint64_t step_id, const absl::Status& status);
  // Advances the scheduler and streams every sampled token.
  void OnStepDone(const ScheduledStep& step, uint64_t step_id, std::span<const StepToken> tokens);
  // One token through its request's OutputProcessor to its stream; Complete when it stops.
  void Stream(uint64_t seq_id, const StepToken& token, absl::Time now);
  void EndAll(const absl::Status& status);
  void End(uint64_t seq_id, absl::Status status);                 // error end
  void Complete(uint64_t seq_id, StopReason reason, std::string matched_stop);
  void Publish();  // stats snapshot
  void PublishLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Tokenizer& tokenizer_;
  EngineLoopOptions options_;
  RunStepFn run_step_;

  // Engine thread only.
  BlockManager blocks_;
  Scheduler scheduler_;
  absl::flat_hash_map<uint64_t, std::unique_ptr<Live>> live_;
  uint64_t next_step_id_ = 1;

  mutable absl::Mutex mu_;
  absl::CondVar cv_;  // inbox changed / stop / live set changed
  std::vector<Inbound> inbox_ ABSL_GUARDED_BY(mu_);
  std::vector<std::pair<uint64_t, absl::Status>> aborts_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, uint64_t> ids_ ABSL_GUARDED_BY(mu_);  // live request ids
  uint64_t next_seq_id_ ABSL_GUARDED_BY(mu_) = 1;
  absl::Status admission_ ABSL_GUARDED_BY(mu_);  // not OK: refuse with it
  absl::Status failed_ ABSL_GUARDED_BY(mu_);     // not OK: a worker was lost
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  EngineStats stats_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace tpserve
