#include "coordinator/output_pool.h"

#include <pthread.h>

#include <thread>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "auth/secret_file.h"
#include "base/check.h"

namespace tpserve {


namespace {

// OpenAI's shape of a call id: "call_" and 24 random letters and digits.
std::string ToolCallId() {
  static constexpr char kAlphabet[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  const std::string bytes = RandomBytes(24);
  std::string id = "call_";
  for (unsigned char b : bytes) id += kAlphabet[b % 62];
  return id;
}

// A status that says the client ended the request (it cancelled, or its
// deadline passed): counted as an abort, not as a failure.
bool ClientWentAway(const absl::Status& why) {
  return absl::IsCancelled(why) || absl::IsDeadlineExceeded(why);
}

v1::FinishReason FinishReasonOf(StopReason reason) {
  switch (reason) {
    case StopReason::kLength: return v1::LENGTH;
    case StopReason::kEos: return v1::EOS;
    case StopReason::kStop: return v1::STOP_SEQUENCE;
    case StopReason::kAborted:
    case StopReason::kNone: break;
  }
  return v1::ABORTED;
}

}  // namespace

// One output thread and the requests it owns. The engine thread queues events
// in `pending_` (its own, no lock) and Flush moves them to `inbox_`; the
// shard's thread swaps the inbox out and handles it without the lock. The
// three vectors trade places, so their capacity is reused from step to step.
class OutputPool::Shard {
 public:
  Shard(int index, CoordinatorMetrics* metrics, const Hooks& hooks)
      : index_(index), metrics_(metrics), hooks_(hooks) {}

  void Start() {
    thread_ = std::thread([this] { Run(); });
    pthread_setname_np(thread_.native_handle(), absl::StrCat("tpserve-out-", index_).c_str());
  }
  void Stop() {
    {
      absl::MutexLock lock(&mu_);
      stop_ = true;
    }
    if (thread_.joinable()) thread_.join();
  }

  std::vector<Event>& pending() { return pending_; }  // the engine thread's
  void NoteTokens() { pending_tokens_ = true; }

  void Flush() {
    if (pending_.empty()) return;
    absl::MutexLock lock(&mu_);
    if (inbox_.empty()) {
      inbox_.swap(pending_);  // pending_ gets the inbox's emptied buffer
    } else {
      for (Event& e : pending_) inbox_.push_back(std::move(e));
      pending_.clear();
    }
    if (pending_tokens_) ++flushed_batches_;
    pending_tokens_ = false;
  }

  void WaitBehind(int64_t max_batches) {
    absl::MutexLock lock(&mu_);
    auto caught_up = [this, max_batches]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return flushed_batches_ - done_batches_ < max_batches || stop_;
    };
    mu_.Await(absl::Condition(&caught_up));
  }

 private:
  void Run() {
    std::vector<Event> work;
    while (true) {
      int64_t batches;
      {
        absl::MutexLock lock(&mu_);
        auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !inbox_.empty() || stop_; };
        mu_.Await(absl::Condition(&ready));
        if (inbox_.empty()) break;  // stopping, and everything handed over is handled
        work.swap(inbox_);
        batches = flushed_batches_;
      }
      for (Event& e : work) Handle(e);
      work.clear();
      absl::MutexLock lock(&mu_);
      done_batches_ = batches;
    }
    // Nothing ended these (the engine ends every request it admitted; this
    // is the guard that no stream is left open).
    for (auto& [seq_id, r] : requests_) {
      ChoiceGroup& g = *r->group;
      if (!g.ended && metrics_ != nullptr) metrics_->OnRequestFailed();
      g.ended = true;
      if (hooks_.retired) hooks_.retired(r->client, r->request_id, --g.open == 0);
      r->out->End(absl::UnavailableError("the server is shutting down"));
    }
    requests_.clear();
  }

  void Handle(Event& e) {
    switch (e.kind) {
      case Event::Kind::kBegin:
        requests_.emplace(e.seq_id, std::move(e.request));
        return;
      case Event::Kind::kToken:
        return OnToken(e);
      case Event::Kind::kEnd:
        return OnEnd(e.seq_id, e.end);
      case Event::Kind::kPromptLogprobs:
        return OnPromptLogprobs(e.seq_id, e.prompt);
    }
  }

  // Appends the positions the group does not hold yet (entry i is position i + 1).
  void OnPromptLogprobs(uint64_t seq_id, const tpserve::PromptLogprobs& p) {
    auto it = requests_.find(seq_id);
    if (it == requests_.end() || !it->second->group->wants_prompt_logprobs) return;
    v1::PromptLogprobs& got = it->second->group->prompt_logprobs;
    for (size_t k = 0; k < p.tokens.size(); ++k) {
      if (p.first_position + static_cast<int64_t>(k) != got.logprobs_size() + 1) continue;
      const ScoredToken& t = p.tokens[k];
      v1::TokenLogprob* lp = got.add_logprobs();
      lp->set_token_id(static_cast<uint32_t>(t.scored.token));
      lp->set_logprob(t.scored.logprob);
      lp->set_rank(static_cast<uint32_t>(t.rank));
      for (const auto& [top_id, logprob] : t.scored.top) {
        v1::TopLogprob* top = lp->add_top();
        top->set_token_id(static_cast<uint32_t>(top_id));
        top->set_logprob(logprob);
      }
    }
  }

  void OnToken(Event& e) {
    auto it = requests_.find(e.seq_id);
    if (it == requests_.end()) return;
    OutputRequest& r = *it->second;
    if (r.verdict != OutputRequest::Verdict::kNone) return;  // computed past its end: dropped
    if (metrics_ != nullptr) {
      if (!r.group->has_token) {  // a request's first token, whichever choice
        metrics_->OnFirstToken(r.num_prompt_tokens);
      } else if (r.first_token) {
        metrics_->OnNextToken(absl::ToDoubleSeconds(e.at - r.last_token));
      }
    }
    if (!r.first_token) r.first_token = e.at;
    r.group->has_token = true;
    r.last_token = e.at;
    const int32_t id = e.sampled.token;
    r.processor.Append(id, delta_);
    calls_.clear();
    for (ParsedToolCall& call : delta_.tool_calls) {
      v1::ToolCall& c = calls_.emplace_back();
      c.set_id(ToolCallId());
      c.set_type("function");
      c.set_name(std::move(call.name));
      c.set_arguments(std::move(call.arguments));
      r.tool_calls.push_back(c);
    }
    const bool pushed = r.out->PushChunk(static_cast<uint32_t>(r.index), [&](v1::GenerateResponse& response) {
      if (response.request_id() != r.request_id) response.set_request_id(r.request_id);
      v1::Chunk* chunk = response.mutable_chunk();
      chunk->add_token_ids(static_cast<uint32_t>(id));
      chunk->mutable_text()->append(delta_.text);
      if (!delta_.reasoning.empty()) chunk->mutable_reasoning_text()->append(delta_.reasoning);
      for (v1::ToolCall& c : calls_) *chunk->add_tool_calls() = std::move(c);
      if (r.group->wants_prompt_logprobs && !r.prompt_logprobs_sent) {
        *chunk->mutable_prompt_logprobs() = r.group->prompt_logprobs;
        r.prompt_logprobs_sent = true;
      }
      if (r.logprobs) {
        v1::TokenLogprob* lp = chunk->add_logprobs();
        lp->set_token_id(static_cast<uint32_t>(id));
        lp->set_logprob(e.sampled.logprob);
        for (const auto& [top_id, logprob] : e.sampled.top) {
          v1::TopLogprob* top = lp->add_top();
          top->set_token_id(static_cast<uint32_t>(top_id));
          top->set_logprob(logprob);
        }
      }
    });
    if (!pushed) {
      // The stream is over: its client went away (an abort, as when its
      // cancellation arrives first through Abort) or fell
      // --max-buffered-chunks behind (a failure). Generation stops for it.
      r.verdict = r.out->cancelled() ? OutputRequest::Verdict::kCancelled : OutputRequest::Verdict::kOverflow;
      if (!e.last) hooks_.finish(e.seq_id);
      return;
    }
    if (delta_.finish != StopReason::kNone) {
      r.verdict = OutputRequest::Verdict::kFinished;
      r.finish = delta_.finish;
      r.matched_stop = std::move(delta_.matched_stop);
      if (!e.last) hooks_.finish(e.seq_id);  // a stop string: the engine learns of it now
    }
  }

  // The request's times as the metrics record them, ending `now`.
  static CoordinatorMetrics::RequestTimes TimesOf(const OutputRequest& r, const EngineEnd& end, absl::Time now) {
    const absl::Time scheduled = end.first_scheduled.value_or(now), first = r.first_token.value_or(now);
    return {.first_scheduled = absl::ToDoubleSeconds(scheduled - r.arrival),
            .first_token = absl::ToDoubleSeconds(first - r.arrival),
            .end = absl::ToDoubleSeconds(now - r.arrival),
            .has_token = r.first_token.has_value()};
  }

  void OnEnd(uint64_t seq_id, const EngineEnd& end) {
    auto it = requests_.find(seq_id);
    if (it == requests_.end()) return;
    std::unique_ptr<OutputRequest> r = std::move(it->second);
    requests_.erase(it);
    ChoiceGroup& g = *r->group;
    g.output_tokens += r->processor.num_output_tokens();
    const bool last = --g.open == 0;
    if (g.ended) {  // another choice ended the stream with an error: nothing more is sent
      hooks_.retired(r->client, r->request_id, last);
      return;
    }
    const absl::Time now = absl::Now();
    using Verdict = OutputRequest::Verdict;
    switch (r->verdict) {
      case Verdict::kFinished:
        return Complete(*r, r->finish, std::move(r->matched_stop), end, now, last);
      case Verdict::kCancelled:
        return EndWith(seq_id, *r, absl::CancelledError("the client went away"), /*abort=*/true, end, now, last);
      case Verdict::kOverflow:
        return EndWith(seq_id, *r, absl::ResourceExhaustedError("the client stopped reading its stream"), false, end,
                       now, last);
      case Verdict::kNone:
        break;
    }
    if (end.status.ok()) return Complete(*r, end.reason, "", end, now, last);
    EndWith(seq_id, *r, end.status, ClientWentAway(end.status), end, now, last);
  }

  // The end without a Complete: `status`, counted as an abort (the client
  // ended it) or a failure. The request's other choices are finished unseen.
  void EndWith(uint64_t seq_id, OutputRequest& r, const absl::Status& status, bool abort, const EngineEnd& end,
               absl::Time now, bool last) {
    ChoiceGroup& g = *r.group;
    g.ended = true;
    if (metrics_ != nullptr) {
      if (abort) {
        metrics_->OnRequestFinished("abort", TimesOf(r, end, now), r.num_prompt_tokens, g.output_tokens);
      } else {
        metrics_->OnRequestFailed();
      }
    }
    const uint64_t first = FirstChoiceOf(seq_id);
    for (int32_t i = 0; i < g.n && !last; ++i) {
      if (first + static_cast<uint64_t>(i) != seq_id && requests_.contains(first + static_cast<uint64_t>(i))) {
        hooks_.finish(first + static_cast<uint64_t>(i));
      }
    }
    hooks_.retired(r.client, r.request_id, last);
    r.out->End(status);
  }

  void Complete(OutputRequest& r, StopReason reason, std::string matched_stop, const EngineEnd& end,
                absl::Time now, bool last) {
    v1::GenerateResponse response;
    response.set_request_id(r.request_id);
    response.set_index(static_cast<uint32_t>(r.index));
    v1::Complete* c = response.mutable_complete();
    c->set_finish_reason(FinishReasonOf(reason));
    c->set_matched_stop(std::move(matched_stop));
    // A turn that called tools and ended by itself ended to let them run.
    if (!r.tool_calls.empty() && (reason == StopReason::kEos || reason == StopReason::kStop)) {
      c->set_finish_reason(v1::TOOL_CALLS);
    }
    for (v1::ToolCall& call : r.tool_calls) *c->add_tool_calls() = std::move(call);
    c->mutable_usage()->set_prompt_tokens(static_cast<uint32_t>(r.num_prompt_tokens));
    c->mutable_usage()->set_completion_tokens(static_cast<uint32_t>(r.processor.num_output_tokens()));
    c->mutable_usage()->set_cached_tokens(end.cached_tokens);
    // Every figure once, from the request's own times (arrival, first step, first token, now).
    const absl::Time scheduled = end.first_scheduled.value_or(now), first = r.first_token.value_or(now);
    v1::Timing* t = c->mutable_timing();
    t->set_queue_seconds(absl::ToDoubleSeconds(scheduled - r.arrival));
    if (r.first_token) t->set_time_to_first_token_seconds(absl::ToDoubleSeconds(first - r.arrival));
    t->set_total_seconds(absl::ToDoubleSeconds(now - r.arrival));
    t->set_prefill_seconds(absl::ToDoubleSeconds(first - scheduled));
    t->set_decode_seconds(absl::ToDoubleSeconds(now - first));
    if (metrics_ != nullptr && last) {  // once per request, with every choice's tokens
      const char* why = c->finish_reason() == v1::LENGTH    ? "length"
                        : c->finish_reason() == v1::ABORTED ? "abort"
                                                            : "stop";
      metrics_->OnRequestFinished(why, TimesOf(r, end, now), c->usage().prompt_tokens(), r.group->output_tokens);
    }
    // The id is free before the last Complete goes out: the stream's last
    // write carries the OK status with it (generation_service.cc), so the
    // client may see the end at once.
    hooks_.retired(r.client, r.request_id, last);
    r.out->Push(std::move(response));
    if (last) r.out->End(absl::OkStatus());
  }

  const int index_;
  CoordinatorMetrics* const metrics_;
  const Hooks& hooks_;
  std::vector<Event> pending_;   // the engine thread's, not yet flushed
  bool pending_tokens_ = false;  // the engine thread's: pending_ holds a token

  absl::Mutex mu_;
  std::vector<Event> inbox_ ABSL_GUARDED_BY(mu_);
  int64_t flushed_batches_ ABSL_GUARDED_BY(mu_) = 0;  // flushes that carried tokens
  int64_t done_batches_ ABSL_GUARDED_BY(mu_) = 0;     // of those, handled
  bool stop_ ABSL_GUARDED_BY(mu_) = false;

  // The shard thread's own.
  absl::flat_hash_map<uint64_t, std::unique_ptr<OutputRequest>> requests_;
  OutputDelta delta_;                    // reused token after token
  std::vector<v1::ToolCall> calls_;      // this token's
  std::thread thread_;
};

OutputPool::OutputPool(int threads, CoordinatorMetrics* metrics, Hooks hooks) : hooks_(std::move(hooks)) {
  TPSERVE_CHECK(threads >= 1);
  for (int i = 0; i < threads; ++i) shards_.push_back(std::make_unique<Shard>(i, metrics, hooks_));
}

OutputPool::~OutputPool() { Stop(); }

void OutputPool::Start() {
  for (auto& s : shards_) s->Start();
}

void OutputPool::Stop() {
  for (auto& s : shards_) s->Stop();
}

void OutputPool::Begin(uint64_t seq_id, std::unique_ptr<OutputRequest> request) {
  Event& e = ShardOf(seq_id).pending().emplace_back();
  e.kind = Event::Kind::kBegin;
  e.seq_id = seq_id;
  e.request = std::move(request);
}

void OutputPool::Token(uint64_t seq_id, SampledToken sampled, absl::Time at, bool last) {
  Shard& shard = ShardOf(seq_id);
  Event& e = shard.pending().emplace_back();
  e.kind = Event::Kind::kToken;
  e.last = last;
  e.seq_id = seq_id;
  e.at = at;
  e.sampled = std::move(sampled);
  shard.NoteTokens();
}

void OutputPool::End(uint64_t seq_id, EngineEnd end) {
  Event& e = ShardOf(seq_id).pending().emplace_back();
  e.kind = Event::Kind::kEnd;
  e.seq_id = seq_id;
  e.end = std::move(end);
}

void OutputPool::AddPromptLogprobs(uint64_t seq_id, tpserve::PromptLogprobs prompt) {
  Event& e = ShardOf(seq_id).pending().emplace_back();
  e.kind = Event::Kind::kPromptLogprobs;
  e.seq_id = seq_id;
  e.prompt = std::move(prompt);
}

void OutputPool::Flush() {
  for (auto& s : shards_) s->Flush();
}

void OutputPool::WaitBehind(int64_t max_batches) {
  for (auto& s : shards_) s->WaitBehind(max_batches);
}

}  // namespace tpserve
