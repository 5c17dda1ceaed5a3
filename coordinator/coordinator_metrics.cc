#include "coordinator/coordinator_metrics.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"

namespace tpserve {
namespace {

// vLLM's buckets (vllm/v1/metrics/loggers.py).
const std::vector<double> kTtftBuckets = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75,
                                          1.0,   2.5,   5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0};
const std::vector<double> kTokenLatencyBuckets = {0.01, 0.025, 0.05, 0.075, 0.1,  0.15, 0.2,  0.3,  0.4, 0.5,
                                                  0.75, 1.0,   2.5,  5.0,   7.5,  10.0, 20.0, 40.0, 80.0};
const std::vector<double> kRequestLatencyBuckets = {0.3,  0.5,  0.8,  1.0,  1.5,   2.0,   2.5,   5.0,   10.0,  15.0, 20.0,
                                                    30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};
const std::vector<double> kIterationTokenBuckets = {1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384};
// Not in vLLM: a step takes milliseconds on a GPU, seconds in a long CPU prefill.
const std::vector<double> kStepBuckets = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                          0.25,   0.5,   1.0,    2.5,   5.0,  10.0,  30.0, 60.0};
const std::vector<double> kBatchBuckets = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024};

// A counter that follows a total kept elsewhere, `last` the total seen
// before. A total below it started again from 0 (the engine rebuilt its
// scheduler and block manager for a new worker group): all of it is new.
void Follow(MetricCounter& counter, int64_t total, int64_t& last) {
  counter.Increment(static_cast<double>(total >= last ? total - last : total));
  last = total;
}

}  // namespace

CoordinatorMetrics::CoordinatorMetrics(int64_t max_model_len, int tp, int dp)
    : tp_(tp),
      failure_(registry_.Counter("tpserve:request_failure_total", "Requests that ended with an error status.")),
      prompt_tokens_(registry_.Counter("tpserve:prompt_tokens_total", "Number of prefill tokens processed.")),
      generation_tokens_(registry_.Counter("tpserve:generation_tokens_total", "Number of generation tokens processed.")),
      preemptions_(registry_.Counter("tpserve:num_preemptions_total", "Cumulative number of preemptions.")),
      prefix_queries_(registry_.Counter("tpserve:prefix_cache_queries_total",
                                        "Prefix cache queries, in terms of number of queried tokens.")),
      prefix_hits_(registry_.Counter("tpserve:prefix_cache_hits_total",
                                     "Prefix cache hits, in terms of number of cached tokens.")),
      ttft_(registry_.Histogram("tpserve:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
                                kTtftBuckets)),
      itl_(registry_.Histogram("tpserve:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.",
                               kTokenLatencyBuckets)),
      e2e_(registry_.Histogram("tpserve:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.",
                               kRequestLatencyBuckets)),
      queue_(registry_.Histogram("tpserve:request_queue_time_seconds",
                                 "Histogram of time spent in WAITING phase for request.", kRequestLatencyBuckets)),
      prefill_(registry_.Histogram("tpserve:request_prefill_time_seconds",
                                   "Histogram of time spent in PREFILL phase for request.", kRequestLatencyBuckets)),
      decode_(registry_.Histogram("tpserve:request_decode_time_seconds",
                                  "Histogram of time spent in DECODE phase for request.", kRequestLatencyBuckets)),
      inference_(registry_.Histogram("tpserve:request_inference_time_seconds",
                                     "Histogram of time spent in RUNNING phase for request.", kRequestLatencyBuckets)),
      prompt_len_(registry_.Histogram("tpserve:request_prompt_tokens", "Number of prefill tokens processed.",
                                      Buckets125(static_cast<double>(max_model_len)))),
      generation_len_(registry_.Histogram("tpserve:request_generation_tokens",
                                          "Number of generation tokens processed.",
                                          Buckets125(static_cast<double>(max_model_len)))),
      iteration_tokens_(registry_.Histogram("tpserve:iteration_tokens_total",
                                            "Histogram of number of tokens per engine_step.", kIterationTokenBuckets)),
      step_duration_(registry_.Histogram("tpserve:step_duration_seconds",
                                         "Histogram of step time, from sending a step to its result, in seconds.",
                                         kStepBuckets)),
      batch_size_(registry_.Histogram("tpserve:step_batch_size", "Histogram of sequences per step.", kBatchBuckets)) {
  for (const char* reason : {"stop", "length", "abort"}) {
    success_[reason] = &registry_.Counter("tpserve:request_success_total", "Count of successfully processed requests.",
                                          {{"finished_reason", reason}});
  }
  histograms_ = {{"time_to_first_token_seconds", &ttft_},     {"inter_token_latency_seconds", &itl_},
                 {"e2e_request_latency_seconds", &e2e_},       {"request_queue_time_seconds", &queue_},
                 {"request_prefill_time_seconds", &prefill_},  {"request_decode_time_seconds", &decode_},
                 {"request_inference_time_seconds", &inference_}, {"request_prompt_tokens", &prompt_len_},
                 {"request_generation_tokens", &generation_len_}, {"iteration_tokens_total", &iteration_tokens_},
                 {"step_duration_seconds", &step_duration_},   {"step_batch_size", &batch_size_}};
  AddGroups(dp);
  spec_drafts_ = &registry_.Counter("tpserve:spec_decode_num_drafts", "Number of spec decoding drafts.");
  spec_draft_tokens_ = &registry_.Counter("tpserve:spec_decode_num_draft_tokens", "Number of draft tokens.");
  spec_accepted_ = &registry_.Counter("tpserve:spec_decode_num_accepted_tokens", "Number of accepted tokens.");
  spec_pipelined_ = &registry_.Counter("tpserve:spec_decode_num_pipelined_drafts",
                                       "Drafts verified by a step sent while the sequence's step before it was in flight.");
  for (int pos = 0; pos < kSpecPositions; ++pos) {
    spec_accepted_at_.push_back(&registry_.Counter("tpserve:spec_decode_num_accepted_tokens_per_pos",
                                                   "Accepted tokens per draft position.",
                                                   {{"position", absl::StrCat(pos)}}));
  }
  for (int rank = 0; rank < tp; ++rank) {
    SetWorkerUp(rank, false);
    worker_step_.push_back(&registry_.Histogram("tpserve:worker_step_compute_seconds",
                                                "Histogram of a step's compute time on each rank, in seconds.",
                                                kStepBuckets, {{"rank", absl::StrCat(rank)}}));
    histograms_.emplace_back(absl::StrCat("worker_step_compute_seconds{rank=\"", rank, "\"}"), worker_step_.back());
  }
}

void CoordinatorMetrics::OnWorkerStep(int rank, double compute_seconds) {
  if (rank >= 0 && rank < tp_) worker_step_[static_cast<size_t>(rank)]->Observe(compute_seconds);
}

void CoordinatorMetrics::OnRequestFinished(const std::string& finished_reason, const RequestTimes& t,
                                           int64_t prompt_tokens, int64_t generation_tokens) {
  success_.at(finished_reason)->Increment();
  e2e_.Observe(t.end);
  queue_.Observe(t.first_scheduled);
  inference_.Observe(t.end - t.first_scheduled);
  if (t.has_token) {
    ttft_.Observe(t.first_token);
    prefill_.Observe(t.first_token - t.first_scheduled);
    decode_.Observe(t.end - t.first_token);
  }
  prompt_len_.Observe(static_cast<double>(prompt_tokens));
  generation_len_.Observe(static_cast<double>(generation_tokens));
}

void CoordinatorMetrics::OnFirstToken(int64_t prompt_tokens) {
  prompt_tokens_.Increment(static_cast<double>(prompt_tokens));
  generation_tokens_.Increment();
}

void CoordinatorMetrics::OnNextToken(double gap_seconds) {
  generation_tokens_.Increment();
  itl_.Observe(gap_seconds);
}

void CoordinatorMetrics::OnStep(double seconds, int64_t sequences, int64_t tokens) {
  step_duration_.Observe(seconds);
  batch_size_.Observe(static_cast<double>(sequences));
  iteration_tokens_.Observe(static_cast<double>(tokens));
}

void CoordinatorMetrics::OnSpeculation(int64_t proposed, int64_t accepted, bool pipelined) {
  if (proposed <= 0) return;
  spec_drafts_->Increment();
  if (pipelined) spec_pipelined_->Increment();
  spec_draft_tokens_->Increment(static_cast<double>(proposed));
  spec_accepted_->Increment(static_cast<double>(accepted));
  int64_t longest = spec_longest_draft_.load();
  while (proposed > longest && !spec_longest_draft_.compare_exchange_weak(longest, proposed)) {
  }
  for (int64_t pos = 0; pos < std::min<int64_t>(accepted, kSpecPositions); ++pos) {
    spec_accepted_at_[static_cast<size_t>(pos)]->Increment();
  }
}

void CoordinatorMetrics::AddGroups(int dp) {
  absl::MutexLock lock(&follow_mu_);
  for (int rank = 0; rank < dp; ++rank) {
    const MetricLabels labels = {{"dp_rank", absl::StrCat(rank)}};
    Group g;
    g.running = &registry_.Gauge("tpserve:num_requests_running", "Number of requests in model execution batches.",
                                 labels);
    g.waiting = &registry_.Gauge("tpserve:num_requests_waiting", "Number of requests waiting to be processed.", labels);
    g.kv_usage = &registry_.Gauge("tpserve:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", labels);
    g.blocks_used = &registry_.Gauge("tpserve:kv_cache_blocks_used",
                                     "KV-cache blocks held by sequences (cached blocks nobody holds are free).", labels);
    g.blocks_total = &registry_.Gauge("tpserve:kv_cache_blocks_total", "KV-cache blocks of the group.", labels);
    g.tokens_in_flight = &registry_.Gauge("tpserve:num_tokens_in_flight",
                                          "Tokens (prompt + output so far) of the running and waiting requests.",
                                          labels);
    groups_.push_back(g);
  }
}

void CoordinatorMetrics::OnEngineState(int dp_rank, const EngineState& s) {
  absl::MutexLock lock(&follow_mu_);
  if (dp_rank < 0 || dp_rank >= static_cast<int>(groups_.size())) return;
  Group& g = groups_[static_cast<size_t>(dp_rank)];
  g.running->Set(static_cast<double>(s.running));
  g.waiting->Set(static_cast<double>(s.waiting));
  g.kv_usage->Set(s.kv_blocks_total > 0 ? static_cast<double>(s.kv_blocks_used) / static_cast<double>(s.kv_blocks_total)
                                        : 0.0);
  g.blocks_used->Set(static_cast<double>(s.kv_blocks_used));
  g.blocks_total->Set(static_cast<double>(s.kv_blocks_total));
  g.tokens_in_flight->Set(static_cast<double>(s.tokens_in_flight));
  Follow(preemptions_, s.preemptions_total, g.last_preemptions);
  Follow(prefix_queries_, s.prefix_query_tokens_total, g.last_prefix_queries);
  Follow(prefix_hits_, s.prefix_hit_tokens_total, g.last_prefix_hits);
}

void CoordinatorMetrics::OnRunning(int dp_rank, int64_t running) {
  absl::MutexLock lock(&follow_mu_);
  if (dp_rank < 0 || dp_rank >= static_cast<int>(groups_.size())) return;
  groups_[static_cast<size_t>(dp_rank)].running->Set(static_cast<double>(running));
}

CoordinatorMetrics::Totals CoordinatorMetrics::totals() const {
  Totals t;
  auto count = [](const MetricCounter& c) { return static_cast<uint64_t>(c.value()); };
  {
    absl::MutexLock lock(&follow_mu_);
    double used = 0, total = 0;
    for (const Group& g : groups_) {
      used += g.blocks_used->value();
      total += g.blocks_total->value();
    }
    t.kv_cache_usage = total > 0 ? used / total : 0.0;
  }
  for (const auto& [reason, counter] : success_) t.requests_finished[reason] = count(*counter);
  t.requests_failed = count(failure_);
  t.prompt_tokens = count(prompt_tokens_);
  t.generation_tokens = count(generation_tokens_);
  t.preemptions = count(preemptions_);
  t.prefix_cache_queries = count(prefix_queries_);
  t.prefix_cache_hits = count(prefix_hits_);
  t.spec_drafts = count(*spec_drafts_);
  t.spec_draft_tokens = count(*spec_draft_tokens_);
  t.spec_accepted_tokens = count(*spec_accepted_);
  t.spec_pipelined_drafts = count(*spec_pipelined_);
  const int64_t positions = std::min<int64_t>(spec_longest_draft_.load(), kSpecPositions);
  for (int64_t pos = 0; pos < positions; ++pos) {
    t.spec_accepted_per_pos.push_back(count(*spec_accepted_at_[static_cast<size_t>(pos)]));
  }
  for (const auto& [name, h] : histograms_) {
    const MetricHistogram::Snapshot s = h->snapshot();
    t.histograms.push_back({name, s.count, s.sum});
  }
  return t;
}

void CoordinatorMetrics::SetWorkerUp(int rank, bool up) {
  if (rank < 0 || rank >= tp_) return;
  registry_.Gauge("tpserve:worker_up", "1 while the worker of this rank is connected and serving, else 0.",
                  {{"rank", absl::StrCat(rank)}})
      .Set(up ? 1 : 0);
}

}  // namespace tpserve
