// The coordinator's live figures, named as vLLM names its own with the
// `tpserve:` prefix and vLLM's histogram buckets, so dashboards and alerts
// written for vLLM read them (README, "Operations"). The engine thread records
// each step and its state (engine_loop.cc), the output threads each streamed
// token and each request's end (output_pool.cc); the metrics endpoint renders
// them (metrics_server.h) and GetServerInfo reads them back. Every method may
// be called from any thread (the registry's metrics are atomics or locked).
//
//   gauges      per data-parallel group, labelled {dp_rank="G"} (what routers read,
//               as GetLoads answers it): tpserve:num_requests_running,
//               tpserve:num_requests_waiting, tpserve:kv_cache_usage_perc (0..1),
//               tpserve:kv_cache_blocks_used, tpserve:kv_cache_blocks_total,
//               tpserve:num_tokens_in_flight (prompt + output so far of the running
//               and waiting sequences); and tpserve:worker_up{rank}
//   counters    tpserve:request_success_total{finished_reason=stop|length|abort}
//               (abort: the client ended it: an Abort call, a cancelled stream, a
//               passed deadline; or the drain timeout cut it),
//               tpserve:request_failure_total (the server ended it with an error:
//               lost workers, a failed step, a client that stopped reading),
//               tpserve:prompt_tokens_total, tpserve:generation_tokens_total,
//               tpserve:num_preemptions_total, tpserve:prefix_cache_queries_total and
//               tpserve:prefix_cache_hits_total (in tokens, as vLLM counts them)
//   histograms  tpserve:time_to_first_token_seconds, tpserve:inter_token_latency_seconds,
//               tpserve:e2e_request_latency_seconds, tpserve:request_queue_time_seconds,
//               tpserve:request_prefill_time_seconds, tpserve:request_decode_time_seconds,
//               tpserve:request_inference_time_seconds, tpserve:request_prompt_tokens,
//               tpserve:request_generation_tokens, tpserve:iteration_tokens_total (tokens
//               per step), tpserve:step_duration_seconds (send to result, as the
//               coordinator sees a step), tpserve:step_batch_size (sequences per step),
//               tpserve:worker_step_compute_seconds{rank} (a step's compute on each
//               rank, as the worker measured it: StepResult.compute_seconds)
// A request's phases: queue = arrival to first scheduled; prefill = first
// scheduled to first token; decode = first token to end; inference = prefill + decode.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "coordinator/metrics_registry.h"

namespace tpserve {

class CoordinatorMetrics {
 public:
  // `max_model_len` bounds the token-count buckets; `tp` workers get a
  // worker_up gauge each; `dp` groups their {dp_rank} gauges each.
  CoordinatorMetrics(int64_t max_model_len, int tp, int dp = 1);

  // A request's times in seconds from its arrival (first_scheduled <= first_token <= end).
  struct RequestTimes {
    double first_scheduled = 0, first_token = 0, end = 0;
    bool has_token = false;  // first_token is set
  };
  // finished_reason: "stop", "length" or "abort".
  void OnRequestFinished(const std::string& finished_reason, const RequestTimes& t, int64_t prompt_tokens,
                         int64_t generation_tokens);
  void OnRequestFailed() { failure_.Increment(); }
  // A request's first token (its prompt counted), or a later one `gap_seconds` after the previous.
  void OnFirstToken(int64_t prompt_tokens);
  void OnNextToken(double gap_seconds);
  void OnStep(double seconds, int64_t sequences, int64_t tokens);
  // Speculative decoding, vLLM's spec_decode counters: one draft of
  // `proposed` tokens verified for one sequence, its first `accepted` kept;
  // `pipelined`: its step was sent while the sequence's step before it was
  // in flight (tpserve:spec_decode_num_pipelined_drafts).
  void OnSpeculation(int64_t proposed, int64_t accepted, bool pipelined = false);
  // A group's engine state after an iteration: its {dp_rank} gauges, and the
  // totals the counters follow. The totals grow, or start again from 0 when
  // the engine is rebuilt for a new worker group.
  struct EngineState {
    int64_t running = 0, waiting = 0;
    int64_t kv_blocks_used = 0, kv_blocks_total = 0;
    int64_t tokens_in_flight = 0;
    int64_t preemptions_total = 0, prefix_query_tokens_total = 0, prefix_hit_tokens_total = 0;
  };
  // `dp_rank` in [0, dp); others are ignored.
  void OnEngineState(int dp_rank, const EngineState& state);
  // A group's running count alone, when a finished request's end has gone
  // out after the engine's last OnEngineState (its output thread sent it).
  void OnRunning(int dp_rank, int64_t running);
  void OnWorkerStep(int rank, double compute_seconds);
  // 1 from warm-up on; 0 once the worker group is lost (all ranks: the group
  // is lost as a whole and only a restart brings it back).
  void SetWorkerUp(int rank, bool up);

  // The figures GetServerInfo reports.
  struct Totals {
    double kv_cache_usage = 0;  // over all groups: blocks used / blocks
    std::map<std::string, uint64_t> requests_finished;  // by finished_reason
    uint64_t requests_failed = 0, prompt_tokens = 0, generation_tokens = 0, preemptions = 0,
             prefix_cache_queries = 0, prefix_cache_hits = 0;
    uint64_t spec_drafts = 0, spec_draft_tokens = 0, spec_accepted_tokens = 0;  // speculative decoding
    uint64_t spec_pipelined_drafts = 0;  // of spec_drafts, those one step ahead
    // [positions] drafts whose token at position i (from 0) was accepted, for
    // the positions of the longest draft so far (at most 16): vLLM's
    // num_accepted_tokens_per_pos; divided by spec_drafts, its per-position rate.
    std::vector<uint64_t> spec_accepted_per_pos;
    struct Histogram {
      std::string name;  // without the prefix
      uint64_t count = 0;
      double sum = 0;
    };
    std::vector<Histogram> histograms;
  };
  Totals totals() const;

  MetricsRegistry& registry() { return registry_; }
  const MetricsRegistry& registry() const { return registry_; }

 private:
  MetricsRegistry registry_;
  const int tp_;
  // One data-parallel group's gauges ({dp_rank}) and the totals its counters followed last.
  struct Group {
    MetricGauge *running, *waiting, *kv_usage, *blocks_used, *blocks_total, *tokens_in_flight;
    int64_t last_preemptions = 0, last_prefix_queries = 0, last_prefix_hits = 0;  // under follow_mu_
  };
  MetricCounter &failure_, &prompt_tokens_, &generation_tokens_, &preemptions_, &prefix_queries_, &prefix_hits_;
  MetricHistogram &ttft_, &itl_, &e2e_, &queue_, &prefill_, &decode_, &inference_, &prompt_len_, &generation_len_,
      &iteration_tokens_, &step_duration_, &batch_size_;
  std::vector<std::pair<std::string, const MetricHistogram*>> histograms_;  // (name without prefix, metric)
  std::map<std::string, MetricCounter*> success_;                           // by finished_reason
  std::vector<MetricHistogram*> worker_step_;                               // [tp]
  // tpserve:spec_decode_num_drafts / _num_draft_tokens / _num_accepted_tokens,
  // and _num_accepted_tokens_per_pos{position} for positions [0, kSpecPositions).
  static constexpr int kSpecPositions = 16;
  MetricCounter *spec_drafts_ = nullptr, *spec_draft_tokens_ = nullptr, *spec_accepted_ = nullptr;
  MetricCounter* spec_pipelined_ = nullptr;  // tpserve:spec_decode_num_pipelined_drafts
  std::vector<MetricCounter*> spec_accepted_at_;  // [kSpecPositions]
  std::atomic<int64_t> spec_longest_draft_{0};    // tokens of the longest draft so far
  void AddGroups(int dp);  // the constructor's: dp groups' gauges
  mutable absl::Mutex follow_mu_;                  // the totals OnEngineState saw last
  std::vector<Group> groups_ ABSL_GUARDED_BY(follow_mu_);  // [dp]; the gauge pointers are fixed at construction
};

}  // namespace tpserve
