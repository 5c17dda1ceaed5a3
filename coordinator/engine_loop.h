// The engine loop: one thread that owns the Scheduler and the BlockManager,
// and a small pool of output threads that own the requests' outputs
// (docs/architecture.md, "Threads and locks").
//
// gRPC threads talk to it only through its inbox (new requests, aborts) and
// read results from each request's ResponseQueue. Each iteration of the
// engine thread:
//   drain the inbox → Schedule → BuildStepPlan → send the step to the workers →
//   receive the oldest step's result → OnStepDone → each sampled token through
//   TokenStops (EOS, stop ids, max_tokens, the model's length: a stop frees
//   the sequence's blocks at once) → handed to its request's output thread
//   (coordinator/output_pool.h), which detokenizes, matches stop strings,
//   streams the Chunk and, at the end, the Complete.
// The engine thread schedules, sends steps and hands results on; nothing
// else. A stop string, or a stream that is over, comes back from the output
// thread as a finish through the inbox, like an abort.
// With nothing to do it blocks on the inbox (no spinning).
//
// Overlap (the default; docs/architecture.md, "The step pipeline"): step N+1
// is scheduled and sent before step N's result comes back, so the workers
// always have the next step queued. N+1 counts the tokens N will sample as
// pending (the workers feed them in themselves: decode_sampled); stops, EOS,
// max_tokens and aborts apply when N's tokens arrive, and a sequence that
// finished at N has the token N+1 computed for it dropped unseen. Without
// overlap each step is received before the next is scheduled (lock-step).
//
// Speculative decoding (EngineLoopOptions::speculation): a SpeculativeDrafter
// (coordinator/speculation.h) tells the scheduler which sequences speculate
// and how many proposals to ask of rank 0 (which makes them, worker.proto
// Load.speculative_method); a step's result may
// give a sequence several tokens, each through TokenStops and on to its
// output thread in order, so nothing after a stop is streamed.
//
// Failures: a step that fails with UNAVAILABLE (a worker was lost) suspends
// the loop (Suspend): every request that has been scheduled ends with that
// status (its KV cache went with the workers), requests that never ran stay
// queued, and nothing is sent until Resume gives it a new worker group (the
// coordinator's recovery, coordinator.h). Any other step failure ends the
// requests of that step with INTERNAL.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "scheduler/block_manager.h"
#include "coordinator/coordinator_metrics.h"
#include "coordinator/kv_events.h"
#include "coordinator/output_pool.h"
#include "coordinator/output_processor.h"
#include "coordinator/request.h"
#include "coordinator/response_queue.h"
#include "coordinator/speculation.h"
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
  // Called once per admitted request (no lock held; an output thread) when
  // its id is free again, its terminal outcome sent: EngineGroups releases
  // its route (coordinator/engine_groups.h). Empty: nothing.
  std::function<void(const std::string& client, const std::string& request_id)> on_retired;
  bool overlap = true;                  // one step in flight ahead (false: lock-step)
  // Records the live figures (coordinator_metrics.h) when set; must outlive the loop.
  CoordinatorMetrics* metrics = nullptr;
  // Output threads (OutputPool), each owning a shard of the requests (>= 1).
  int output_threads = 4;
  // The data-parallel group this loop serves: its metrics' dp_rank label.
  int dp_rank = 0;
  // Told of the prefix cache's changes, flushed once per iteration
  // (coordinator/kv_events.h), when set; must outlive the loop.
  KvEventPublisher* kv_events = nullptr;
  // Speculative decoding (coordinator/speculation.h; off by default). With a
  // method, num_speculative_tokens bounds each sequence's proposals and
  // scheduler.max_num_draft_tokens a step's.
  SpeculationOptions speculation;
};

// How the loop reaches the workers: the Coordinator wires the worker pool,
// tests a fake. Steps are answered in the order they were sent.
struct StepTransport {
  // Hands the step to every worker without waiting for it to run; the ticket
  // to receive its result with.
  std::function<absl::StatusOr<uint64_t>(tpserve::internal::v1::Step)> send;
  // Rank 0's result of the step sent with `ticket`; blocks until every
  // worker answered it.
  std::function<absl::StatusOr<tpserve::internal::v1::StepResult>(uint64_t ticket)> receive;
};

struct EngineStats {
  int64_t num_blocks = 0;
  int64_t free_blocks = 0;
  int32_t running = 0;       // scheduled, or retired with their end not yet sent (ending_)
  int32_t waiting = 0;      // in the scheduler's queue or the inbox
  double prefix_cache_hit_rate = 0;
  int64_t steps = 0;
  int64_t tokens_in_flight = 0;  // Scheduler::num_tokens_in_flight
};

class EngineLoop {
 public:
  // `tokenizer` must outlive the loop.
  EngineLoop(const Tokenizer& tokenizer, EngineLoopOptions options, StepTransport workers);
  ~EngineLoop();  // Stop()

  void Start();
  // Ends the loop thread and the output threads; requests still live end
  // with UNAVAILABLE.
  void Stop();

  // A live request is named by its client (the caller's identity: see
  // ClientIdentity in generation_service.h) and its request_id: clients share
  // no ids, so one can neither collide with nor abort another's requests.
  // Responses carry the bare request_id.
  //
  // Queues a request; its responses go to `out`. UNAVAILABLE once admission is
  // closed, RESOURCE_EXHAUSTED when max_queue requests are waiting already,
  // ALREADY_EXISTS when `client` has a live `request_id`.
  absl::Status Submit(const std::string& client, const std::string& request_id,
                      PreparedRequest request, std::shared_ptr<ResponseQueue> out);
  // Ends a live request at the next step boundary (its blocks are freed). With
  // an OK `why` its stream gets Complete{ABORTED}; otherwise it ends with `why`.
  // Either way it counts as finished with reason "abort" in the metrics when
  // `why` is OK, CANCELLED or DEADLINE_EXCEEDED (the client ended it: an Abort
  // call, a cancelled stream, a passed deadline), as a failure otherwise.
  // False when `client` has no live request with this id.
  bool Abort(const std::string& client, const std::string& request_id, absl::Status why);
  void AbortAll(absl::Status why);
  // Refuses new requests from now on with `why` (UNAVAILABLE: draining).
  void CloseAdmission(absl::Status why);
  // The workers were lost (any thread; returns at once): no step is sent from
  // now on, every live request that has been scheduled ends with `why`, new
  // requests are refused with it; requests that never ran wait (an Abort or
  // AbortAll still ends them). A second call while suspended changes nothing.
  void Suspend(absl::Status why);
  // Blocks until the loop thread has acted on Suspend: no step is in flight
  // and none will be sent until Resume. True; false if the loop stopped.
  bool WaitSuspended();
  // A new worker group is ready with `num_blocks` KV blocks each: the loop
  // starts from an empty cache (no prefix-cache entry survives), re-queues
  // the waiting requests in arrival order and admits again. Blocks until the
  // loop thread has done so. Only after WaitSuspended.
  void Resume(int64_t num_blocks);
  // Blocks until no request is live (each has had its terminal outcome sent
  // to its stream), or `deadline`; true when none is.
  bool WaitIdle(absl::Time deadline);

  EngineStats stats() const;
  KvEventPublisher* kv_events() const { return options_.kv_events; }  // null: none
  // The figures it records into (EngineLoopOptions::metrics), or null.
  const CoordinatorMetrics* metrics() const { return options_.metrics; }

 private:
  struct Live;  // one admitted request, as the engine thread sees it
  struct Inbound {
    uint64_t seq_id;
    std::unique_ptr<Live> live;
  };
  struct InFlight {  // a step sent and not yet received
    ScheduledStep step;
    uint64_t step_id = 0;
    uint64_t ticket = 0;
    absl::Time sent;  // for the step-duration metric
  };
  // What the engine thread takes from the inbox in one go.
  struct Taken {
    std::vector<Inbound> adds;
    std::vector<std::pair<uint64_t, absl::Status>> aborts;
    std::vector<uint64_t> finishes;  // sequences their output threads ended
    absl::Status suspended;
  };

  void Run();
  // One iteration; false when it found nothing to run.
  bool Iterate(Taken taken);
  // The parts of an iteration, in order.
  void Admit(std::vector<Inbound> adds);  // to the scheduler
  // A sequence just added: its drafts start, unless its request opted out or is constrained.
  void MaySpeculate(uint64_t seq_id);
  // Makes an inbound request live and hands its output side to its shard.
  void Adopt(Inbound in);
  // Suspended: ends the requests that ran, drops the steps in flight.
  void Park(const absl::Status& why);
  // Resume on the loop thread: a fresh cache of `num_blocks`, the parked requests re-queued.
  void Rebuild(int64_t num_blocks) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ApplyAborts(std::vector<std::pair<uint64_t, absl::Status>> aborts);
  void EndUnservable(std::span<const uint64_t> ids);  // too long for the whole KV cache
  // Schedules the next step and sends it; false when there was nothing to run.
  bool ScheduleAndSend();
  // Receives the oldest step in flight and applies its result.
  void ReceiveOldest();
  // Receives every step in flight and drops the results (stopping).
  void DrainInFlight();
  // UNAVAILABLE suspends the loop; anything else ends the step's requests with INTERNAL.
  void OnStepFailed(const ScheduledStep& step, uint64_t step_id, const absl::Status& status);
  // Advances the scheduler and hands every sampled token on.
  void OnStepDone(const ScheduledStep& step, uint64_t step_id, std::vector<StepToken> tokens);
  // One token: its TokenStops verdict (a stop finishes the sequence), then
  // to its request's output thread.
  void HandOn(uint64_t seq_id, SampledToken sampled, absl::Time now);
  void EndAll(const absl::Status& status);
  // Retires a live request: its sequence finished and its blocks freed,
  // stats published; then its output thread gets End (`reason`, `status`:
  // see EngineEnd), which sends the terminal outcome and records the
  // finished request's metrics. Nothing when it is not live.
  void Finish(uint64_t seq_id, StopReason reason, absl::Status status);
  void End(uint64_t seq_id, absl::Status status) { Finish(seq_id, StopReason::kNone, std::move(status)); }
  // An output thread ended a request (a stop string, a stream that is over): any thread.
  void FinishFromOutput(uint64_t seq_id);
  // The request's terminal outcome is out: its id is free (any thread).
  // `last`: the request's last choice; its id is free (any thread).
  void Retired(const std::string& client, const std::string& request_id, bool last);
  void Publish();  // stats snapshot
  void PublishLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Tokenizer& tokenizer_;
  EngineLoopOptions options_;
  StepTransport workers_;

  // Engine thread only. Made anew by Rebuild (a new worker group, an empty cache).
  std::unique_ptr<BlockManager> blocks_;
  std::unique_ptr<Scheduler> scheduler_;
  std::unique_ptr<SpeculativeDrafter> drafter_;  // with speculative decoding; outlives every scheduler
  absl::flat_hash_map<uint64_t, std::unique_ptr<Live>> live_;
  std::deque<InFlight> in_flight_;  // oldest first; at most 2 with overlap, else 1
  uint64_t next_step_id_ = 1;
  // OnStepDone's, reused from step to step.
  std::vector<std::pair<uint64_t, int32_t>> sampled_;
  std::vector<size_t> sampled_index_;  // [sampled_] index into the step's tokens
  std::unique_ptr<OutputPool> output_;  // its own threads; Begin/Token/End/Flush on the engine thread

  mutable absl::Mutex mu_;
  absl::CondVar cv_;  // inbox changed / stop / live set changed
  std::vector<Inbound> inbox_ ABSL_GUARDED_BY(mu_);
  // Taken from the inbox, not yet in published stats: Submit's queue bound
  // counts them, so it holds while an iteration runs a step.
  int64_t admitting_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::pair<uint64_t, absl::Status>> aborts_ ABSL_GUARDED_BY(mu_);
  std::vector<uint64_t> finishes_ ABSL_GUARDED_BY(mu_);  // from the output threads (FinishFromOutput)
  // Retired by the engine thread, their outcome not yet sent by their output
  // thread: still counted as running, so that whoever sees a request gone
  // (nothing running, its blocks free) sees its end sent and counted.
  int64_t ending_ ABSL_GUARDED_BY(mu_) = 0;
  // (client, request_id) -> sequence id of every live request: from Submit
  // until its output thread sends the terminal outcome (Retired)
  absl::flat_hash_map<std::pair<std::string, std::string>, uint64_t> ids_ ABSL_GUARDED_BY(mu_);
  uint64_t next_seq_id_ ABSL_GUARDED_BY(mu_) = 1;
  absl::Status admission_ ABSL_GUARDED_BY(mu_);  // not OK: refuse with it
  absl::Status suspended_ ABSL_GUARDED_BY(mu_);  // not OK: the workers were lost (Suspend)
  bool parked_ ABSL_GUARDED_BY(mu_) = false;    // the loop thread acted on suspended_
  int64_t resume_blocks_ ABSL_GUARDED_BY(mu_) = 0;  // > 0: Resume asked for this cache
  int64_t num_blocks_ ABSL_GUARDED_BY(mu_);     // of the current worker group (Submit's check)
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  EngineStats stats_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace tpserve
