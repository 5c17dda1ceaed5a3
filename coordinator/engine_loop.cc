#include "coordinator/engine_loop.h"

#include <algorithm>
#include <functional>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "auth/secret_file.h"
#include "coordinator/log.h"
#include "proto/step_convert.h"

namespace tpserve {

namespace v1 = tpserve::v1;
namespace iv1 = tpserve::internal::v1;

struct EngineLoop::Live {
  Live(const Tokenizer& tokenizer, const EngineLoopOptions& options, std::string owner,
       std::string id, PreparedRequest req, std::shared_ptr<ResponseQueue> queue)
      : client(std::move(owner)),
        request_id(std::move(id)),
        request(std::move(req)),
        out(std::move(queue)),
        processor(tokenizer, request.stop, options.eos_token_ids,
                  static_cast<int64_t>(request.prompt.size()), options.max_model_len) {}

  std::string client;      // whose request it is (ids_ key with request_id)
  std::string request_id;  // as the client named it, or server-assigned
  PreparedRequest request;
  std::shared_ptr<ResponseQueue> out;
  OutputProcessor processor;
  absl::Time arrival = absl::Now();
  std::optional<absl::Time> first_scheduled;
  std::optional<absl::Time> first_token;
  absl::Time last_token;  // when first_token is set
  std::vector<v1::ToolCall> tool_calls;  // every call the output made so far (for Complete)
};

namespace {

// OpenAI's shape of a call id: "call_" and 24 random letters and digits.
std::string ToolCallId() {
  static constexpr char kAlphabet[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  const std::string bytes = RandomBytes(24);
  std::string id = "call_";
  for (unsigned char b : bytes) id += kAlphabet[b % 62];
  return id;
}

}  // namespace

EngineLoop::EngineLoop(const Tokenizer& tokenizer, EngineLoopOptions options, StepTransport workers)
    : tokenizer_(tokenizer),
      options_(std::move(options)),
      workers_(std::move(workers)),
      blocks_(std::make_unique<BlockManager>(options_.num_blocks, options_.block_size,
                                             options_.enable_prefix_caching)),
      scheduler_(std::make_unique<Scheduler>(*blocks_, options_.scheduler)),
      num_blocks_(options_.num_blocks) {
  Publish();
}

namespace {

// Admission is fair between clients (scheduler.h): a request's group is its client.
uint64_t GroupOf(const std::string& client) { return std::hash<std::string>{}(client); }

// An Abort's status that says the client ended the request (it cancelled, or
// its deadline passed): counted as an abort, not as a failure.
bool ClientWentAway(const absl::Status& why) {
  return absl::IsCancelled(why) || absl::IsDeadlineExceeded(why);
}

}  // namespace

EngineLoop::~EngineLoop() { Stop(); }

void EngineLoop::Start() { thread_ = std::thread([this] { Run(); }); }

void EngineLoop::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
    cv_.SignalAll();
  }
  if (thread_.joinable()) thread_.join();
}

absl::Status EngineLoop::Submit(const std::string& client, const std::string& request_id,
                                PreparedRequest request, std::shared_ptr<ResponseQueue> out) {
  absl::MutexLock lock(&mu_);
  if (!suspended_.ok()) return suspended_;
  if (!admission_.ok()) return admission_;
  if (stop_) return absl::UnavailableError("the server is shutting down");
  if (ids_.contains(std::pair(client, request_id))) {
    return absl::AlreadyExistsError(absl::StrCat(
        "request_id \"", request_id, "\" is already running for this client; use a unique id"));
  }
  // A prompt that needs more blocks than the whole cache could never run:
  // refuse it now rather than after its stream has started.
  const int64_t need = BlockManager::BlocksFor(std::ssize(request.prompt), options_.block_size);
  if (need > num_blocks_) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the prompt of ", request.prompt.size(), " tokens needs ", need, " KV blocks of ", options_.block_size,
        " tokens but the whole cache holds ", num_blocks_,
        "; shorten the prompt or give the workers more memory (--gpu-memory-utilization, more GPUs)"));
  }
  const int64_t waiting = stats_.waiting + static_cast<int64_t>(inbox_.size()) + admitting_;
  if (waiting >= options_.scheduler.max_queue) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the admission queue is full (", options_.scheduler.max_queue,
        " requests waiting, --max-queue); retry later"));
  }
  const uint64_t seq_id = next_seq_id_++;
  ids_[std::pair(client, request_id)] = seq_id;
  inbox_.push_back({seq_id, std::make_unique<Live>(tokenizer_, options_, client, request_id,
                                                   std::move(request), std::move(out))});
  cv_.SignalAll();
  return absl::OkStatus();
}

bool EngineLoop::Abort(const std::string& client, const std::string& request_id,
                       absl::Status why) {
  absl::MutexLock lock(&mu_);
  auto it = ids_.find(std::pair(client, request_id));
  if (it == ids_.end()) return false;
  aborts_.emplace_back(it->second, std::move(why));
  cv_.SignalAll();
  return true;
}

void EngineLoop::AbortAll(absl::Status why) {
  absl::MutexLock lock(&mu_);
  for (const auto& [id, seq_id] : ids_) aborts_.emplace_back(seq_id, why);
  cv_.SignalAll();
}

void EngineLoop::CloseAdmission(absl::Status why) {
  absl::MutexLock lock(&mu_);
  if (admission_.ok()) admission_ = std::move(why);
}

void EngineLoop::Suspend(absl::Status why) {
  absl::MutexLock lock(&mu_);
  if (suspended_.ok()) suspended_ = std::move(why);
  cv_.SignalAll();
}

bool EngineLoop::WaitSuspended() {
  absl::MutexLock lock(&mu_);
  auto done = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return parked_ || stop_; };
  mu_.Await(absl::Condition(&done));
  return parked_;
}

void EngineLoop::Resume(int64_t num_blocks) {
  absl::MutexLock lock(&mu_);
  resume_blocks_ = num_blocks;
  cv_.SignalAll();
  auto done = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return resume_blocks_ == 0 || stop_; };
  mu_.Await(absl::Condition(&done));
}

bool EngineLoop::WaitIdle(absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  while (!ids_.empty()) {
    if (cv_.WaitWithDeadline(&mu_, deadline)) break;
  }
  return ids_.empty();
}

EngineStats EngineLoop::stats() const {
  absl::MutexLock lock(&mu_);
  EngineStats s = stats_;
  s.waiting += static_cast<int32_t>(inbox_.size() + admitting_);
  return s;
}

void EngineLoop::Publish() {
  absl::MutexLock lock(&mu_);
  PublishLocked();
}

void EngineLoop::PublishLocked() {
  const BlockManagerStats b = blocks_->stats();
  stats_.num_blocks = b.num_blocks;
  stats_.free_blocks = b.free_blocks;
  stats_.prefix_cache_hit_rate = b.prefix_hit_rate();
  stats_.running = scheduler_->num_running();
  stats_.waiting = scheduler_->num_waiting();
  admitting_ = 0;  // counted by the scheduler from now on
  stats_.steps = static_cast<int64_t>(next_step_id_ - 1);
  if (options_.metrics != nullptr) {
    options_.metrics->OnEngineState(
        stats_.running, stats_.waiting + static_cast<int64_t>(inbox_.size()),
        b.num_blocks > 0 ? static_cast<double>(b.num_blocks - b.free_blocks) / static_cast<double>(b.num_blocks) : 0,
        scheduler_->num_preemptions(), b.prefix_queries * options_.block_size, b.prefix_hits * options_.block_size);
  }
}

void EngineLoop::Run() {
  bool stalled = false;
  while (true) {
    std::vector<Inbound> adds;
    std::vector<std::pair<uint64_t, absl::Status>> aborts;
    absl::Status suspended;
    {
      absl::MutexLock lock(&mu_);
      // Idle: nothing scheduled and nothing new. Block until the inbox changes.
      // After a step that ran nothing (cannot normally happen while work is
      // queued) wait a little rather than spin.
      const absl::Time until = stalled ? absl::Now() + absl::Milliseconds(5) : absl::InfiniteFuture();
      // Suspended, it waits for Resume (or aborts) once it has parked.
      while (!stop_ && inbox_.empty() && aborts_.empty() && resume_blocks_ == 0) {
        const bool work = suspended_.ok() ? !scheduler_->idle() || !in_flight_.empty() : !parked_;
        if (work && !stalled) break;
        if (cv_.WaitWithDeadline(&mu_, until)) break;
      }
      if (stop_) break;
      if (resume_blocks_ > 0) {
        Rebuild(resume_blocks_);
        suspended_ = absl::OkStatus();
        parked_ = false;
        resume_blocks_ = 0;
        cv_.SignalAll();
        continue;
      }
      adds.swap(inbox_);
      admitting_ = static_cast<int64_t>(adds.size());  // until Admit's Publish counts them
      aborts.swap(aborts_);
      suspended = suspended_;
    }
    stalled = !Iterate(std::move(adds), std::move(aborts), suspended);
    Publish();
  }
  // Stopping: nothing more runs; every request still live ends now.
  DrainInFlight();
  std::vector<Inbound> adds;
  {
    absl::MutexLock lock(&mu_);
    adds.swap(inbox_);
  }
  for (Inbound& in : adds) live_.emplace(in.seq_id, std::move(in.live));
  EndAll(absl::UnavailableError("the server is shutting down"));
  Publish();
}

std::unique_ptr<EngineLoop::Live> EngineLoop::Retire(uint64_t seq_id) {
  auto it = live_.find(seq_id);
  if (it == live_.end()) return nullptr;
  std::unique_ptr<Live> live = std::move(it->second);
  live_.erase(it);
  scheduler_->Finish(seq_id);
  absl::MutexLock lock(&mu_);
  ids_.erase(std::pair(live->client, live->request_id));
  PublishLocked();  // a client that sees the end then asks GetServerInfo sees its blocks freed
  cv_.SignalAll();
  return live;
}

// The metrics are recorded before Retire, as Complete does: whoever sees the
// request gone (WaitIdle, GetServerInfo) sees it counted.
void EngineLoop::End(uint64_t seq_id, absl::Status status) {
  if (!live_.contains(seq_id)) return;
  if (!status.ok() && options_.metrics != nullptr) options_.metrics->OnRequestFailed();
  Retire(seq_id)->out->End(std::move(status));
}

void EngineLoop::EndAborted(uint64_t seq_id, absl::Status why) {
  auto it = live_.find(seq_id);
  if (it == live_.end()) return;
  const Live& live = *it->second;
  if (options_.metrics != nullptr) {
    options_.metrics->OnRequestFinished("abort", TimesOf(live, absl::Now()),
                                        static_cast<int64_t>(live.request.prompt.size()),
                                        live.processor.num_output_tokens());
  }
  Retire(seq_id)->out->End(std::move(why));
}

CoordinatorMetrics::RequestTimes EngineLoop::TimesOf(const Live& live, absl::Time now) {
  const absl::Time scheduled = live.first_scheduled.value_or(now), first = live.first_token.value_or(now);
  return {.first_scheduled = absl::ToDoubleSeconds(scheduled - live.arrival),
          .first_token = absl::ToDoubleSeconds(first - live.arrival),
          .end = absl::ToDoubleSeconds(now - live.arrival),
          .has_token = live.first_token.has_value()};
}

void EngineLoop::Complete(uint64_t seq_id, StopReason reason, std::string matched_stop) {
  auto it = live_.find(seq_id);
  if (it == live_.end()) return;
  Live& live = *it->second;
  const absl::Time now = absl::Now();
  v1::GenerateResponse response;
  response.set_request_id(live.request_id);
  v1::Complete* c = response.mutable_complete();
  switch (reason) {
    case StopReason::kLength: c->set_finish_reason(v1::LENGTH); break;
    case StopReason::kEos: c->set_finish_reason(v1::EOS); break;
    case StopReason::kStop: c->set_finish_reason(v1::STOP_SEQUENCE); break;
    case StopReason::kAborted:
    case StopReason::kNone: c->set_finish_reason(v1::ABORTED); break;
  }
  c->set_matched_stop(std::move(matched_stop));
  // A turn that called tools and ended by itself ended to let them run.
  if (!live.tool_calls.empty() && (reason == StopReason::kEos || reason == StopReason::kStop)) {
    c->set_finish_reason(v1::TOOL_CALLS);
  }
  for (v1::ToolCall& call : live.tool_calls) *c->add_tool_calls() = std::move(call);
  const Sequence* seq = scheduler_->Find(seq_id);
  c->mutable_usage()->set_prompt_tokens(static_cast<uint32_t>(live.request.prompt.size()));
  c->mutable_usage()->set_completion_tokens(static_cast<uint32_t>(live.processor.num_output_tokens()));
  c->mutable_usage()->set_cached_tokens(seq ? static_cast<uint32_t>(seq->num_cached_tokens) : 0);
  // Every figure once, from the request's own times (arrival, first step, first token, now).
  const absl::Time scheduled = live.first_scheduled.value_or(now), first = live.first_token.value_or(now);
  v1::Timing* t = c->mutable_timing();
  t->set_queue_seconds(absl::ToDoubleSeconds(scheduled - live.arrival));
  if (live.first_token) t->set_time_to_first_token_seconds(absl::ToDoubleSeconds(first - live.arrival));
  t->set_total_seconds(absl::ToDoubleSeconds(now - live.arrival));
  t->set_prefill_seconds(absl::ToDoubleSeconds(first - scheduled));
  t->set_decode_seconds(absl::ToDoubleSeconds(now - first));
  if (options_.metrics != nullptr) {
    const char* reason = c->finish_reason() == v1::LENGTH ? "length" : c->finish_reason() == v1::ABORTED ? "abort" : "stop";
    options_.metrics->OnRequestFinished(reason, TimesOf(live, now), c->usage().prompt_tokens(),
                                        c->usage().completion_tokens());
  }
  // Retired before the Complete goes out: the stream's last write carries the
  // OK status with it (generation_service.cc), so the client may see the end
  // at once.
  std::unique_ptr<Live> retired = Retire(seq_id);
  retired->out->Push(std::move(response));
  retired->out->End(absl::OkStatus());
}

void EngineLoop::EndAll(const absl::Status& status) {
  std::vector<uint64_t> ids;
  for (const auto& [id, live] : live_) ids.push_back(id);
  for (uint64_t id : ids) End(id, status);
}

void EngineLoop::Admit(std::vector<Inbound> adds) {
  for (Inbound& in : adds) {
    absl::Status added = scheduler_->Add(in.seq_id, in.live->request.prompt, GroupOf(in.live->client));
    live_.emplace(in.seq_id, std::move(in.live));
    if (!added.ok()) End(in.seq_id, added);
  }
}

void EngineLoop::Park(const absl::Status& why) {
  in_flight_.clear();  // the lost group answers none of them
  std::vector<uint64_t> ran;
  for (const auto& [id, live] : live_) {
    if (live->first_scheduled) ran.push_back(id);
  }
  for (uint64_t id : ran) End(id, why);
  absl::MutexLock lock(&mu_);
  parked_ = true;
  cv_.SignalAll();
}

void EngineLoop::Rebuild(int64_t num_blocks) {
  // Only requests that never ran are live (Park): their sequences hold no
  // blocks, so the old cache can go with everything it remembers.
  std::vector<uint64_t> waiting;
  for (const auto& [id, live] : live_) waiting.push_back(id);
  std::sort(waiting.begin(), waiting.end());  // sequence ids are given in arrival order
  scheduler_.reset();
  blocks_ = std::make_unique<BlockManager>(num_blocks, options_.block_size, options_.enable_prefix_caching);
  scheduler_ = std::make_unique<Scheduler>(*blocks_, options_.scheduler);
  num_blocks_ = num_blocks;
  std::vector<std::pair<uint64_t, absl::Status>> refused;
  for (uint64_t id : waiting) {
    const Live& live = *live_.at(id);
    absl::Status added = scheduler_->Add(id, live.request.prompt, GroupOf(live.client));
    if (!added.ok()) refused.emplace_back(id, std::move(added));
  }
  PublishLocked();
  // Ended by the loop's next iteration, as aborts: End takes mu_, held here.
  for (auto& r : refused) aborts_.push_back(std::move(r));
}

void EngineLoop::ApplyAborts(std::vector<std::pair<uint64_t, absl::Status>> aborts) {
  for (auto& [seq_id, why] : aborts) {
    if (why.ok()) {
      Complete(seq_id, StopReason::kAborted, "");
    } else if (ClientWentAway(why)) {
      EndAborted(seq_id, std::move(why));
    } else {
      End(seq_id, std::move(why));
    }
  }
}

void EngineLoop::EndUnservable(std::span<const uint64_t> ids) {
  for (uint64_t id : ids) {
    const auto it = live_.find(id);
    const int64_t need = it == live_.end() ? 0 : blocks_->BlocksFor(static_cast<int64_t>(
                                                      it->second->request.prompt.size()));
    End(id, absl::ResourceExhaustedError(absl::StrCat(
                "the sequence needs ", need, " KV blocks but the whole cache holds ",
                blocks_->num_blocks(), "; shorten the prompt or give the workers more memory")));
  }
}

bool EngineLoop::Iterate(std::vector<Inbound> adds,
                         std::vector<std::pair<uint64_t, absl::Status>> aborts,
                         const absl::Status& suspended) {
  const bool had_requests = !adds.empty() || !aborts.empty();
  Admit(std::move(adds));
  Publish();  // Submit's --max-queue check counts the admitted from here on
  ApplyAborts(std::move(aborts));
  if (!suspended.ok()) {  // the workers were lost: nothing runs until Resume
    Park(suspended);
    return true;
  }
  // With overlap the next step goes out before the oldest comes back, so the
  // workers never wait for this thread; lock-step receives each step first.
  const size_t depth = options_.overlap ? 2 : 1;
  bool sent = false;
  if (in_flight_.size() < depth) sent = ScheduleAndSend();
  if (!in_flight_.empty() && (in_flight_.size() == depth || !sent)) {
    ReceiveOldest();
    return true;
  }
  return sent || had_requests;
}

bool EngineLoop::ScheduleAndSend() {
  ScheduledStep step = scheduler_->Schedule();
  EndUnservable(step.unservable);
  if (step.empty()) return !step.unservable.empty();
  const uint64_t step_id = next_step_id_++;
  const StepPlan plan = BuildStepPlan(step, [this](uint64_t id) -> const SamplingParams& {
    return live_.at(id)->request.sampling;
  });
  const absl::Time now = absl::Now();
  for (const ScheduledSequence& s : step.sequences) {
    Live& live = *live_.at(s.id);
    if (!live.first_scheduled) live.first_scheduled = now;
  }
  absl::StatusOr<uint64_t> ticket = workers_.send(StepPlanToProto(plan, step_id));
  if (!ticket.ok()) {
    OnStepFailed(step, step_id, ticket.status());
  } else {
    in_flight_.push_back(InFlight{.step = std::move(step), .step_id = step_id, .ticket = *ticket, .sent = now});
  }
  return true;
}

void EngineLoop::ReceiveOldest() {
  InFlight oldest = std::move(in_flight_.front());
  in_flight_.pop_front();
  absl::StatusOr<iv1::StepResult> result = workers_.receive(oldest.ticket);
  if (!result.ok()) {
    OnStepFailed(oldest.step, oldest.step_id, result.status());
  } else {
    if (options_.metrics != nullptr) {
      int64_t tokens = 0;
      for (const ScheduledSequence& s : oldest.step.sequences) tokens += s.num_tokens;
      options_.metrics->OnStep(absl::ToDoubleSeconds(absl::Now() - oldest.sent),
                               static_cast<int64_t>(oldest.step.sequences.size()), tokens);
    }
    OnStepDone(oldest.step, oldest.step_id, TokensFromProto(*result));
  }
}

void EngineLoop::DrainInFlight() {
  for (const InFlight& f : in_flight_) (void)workers_.receive(f.ticket);
  in_flight_.clear();
}

void EngineLoop::OnStepFailed(const ScheduledStep& step, uint64_t step_id, const absl::Status& status) {
  if (absl::IsUnavailable(status)) {
    in_flight_.clear();  // nothing more will come back
    Suspend(status);
    Park(status);
    return;
  }
  CoordinatorLog(absl::StrCat("step ", step_id, " failed: ", status.message()));
  const absl::Status internal = absl::InternalError(
      absl::StrCat("step ", step_id, " failed on the workers: ", status.message()));
  for (const ScheduledSequence& s : step.sequences) End(s.id, internal);
}

void EngineLoop::OnStepDone(const ScheduledStep& step, uint64_t step_id, std::span<const StepToken> tokens) {
  const std::vector<const StepToken*> ordered = TokensInStepOrder(step, tokens);
  std::vector<std::pair<uint64_t, int32_t>> sampled;
  std::vector<const StepToken*> streamed;  // [sampled]
  std::vector<uint64_t> missing;
  size_t k = 0;
  for (const ScheduledSequence& s : step.sequences) {
    if (!s.sample) continue;
    const StepToken* token = ordered[k++];
    if (token == nullptr) {
      missing.push_back(s.id);
    } else {
      sampled.emplace_back(s.id, token->sampled.token);
      streamed.push_back(token);
    }
  }
  scheduler_->OnStepDone(step, sampled);
  Publish();  // before any chunk goes out: a client reading one sees this step's blocks in use
  for (uint64_t id : missing) {
    End(id, absl::InternalError(absl::StrCat("step ", step_id,
                                             ": rank 0 returned no token for this sequence")));
  }
  const absl::Time now = absl::Now();
  for (size_t i = 0; i < sampled.size(); ++i) Stream(sampled[i].first, *streamed[i], now);
}

void EngineLoop::Stream(uint64_t seq_id, const StepToken& token, absl::Time now) {
  auto it = live_.find(seq_id);
  if (it == live_.end()) return;
  Live& live = *it->second;
  if (options_.metrics != nullptr) {
    if (!live.first_token) {
      options_.metrics->OnFirstToken(static_cast<int64_t>(live.request.prompt.size()));
    } else {
      options_.metrics->OnNextToken(absl::ToDoubleSeconds(now - live.last_token));
    }
  }
  if (!live.first_token) live.first_token = now;
  live.last_token = now;
  const int32_t id = token.sampled.token;
  OutputDelta delta = live.processor.Append(id);
  v1::GenerateResponse response;
  response.set_request_id(live.request_id);
  v1::Chunk* chunk = response.mutable_chunk();
  chunk->add_token_ids(static_cast<uint32_t>(id));
  chunk->set_text(std::move(delta.text));
  chunk->set_reasoning_text(std::move(delta.reasoning));
  for (ParsedToolCall& call : delta.tool_calls) {
    v1::ToolCall* c = chunk->add_tool_calls();
    c->set_id(ToolCallId());
    c->set_type("function");
    c->set_name(std::move(call.name));
    c->set_arguments(std::move(call.arguments));
    live.tool_calls.push_back(*c);
  }
  if (live.request.sampling.logprobs >= 0) {
    v1::TokenLogprob* lp = chunk->add_logprobs();
    lp->set_token_id(static_cast<uint32_t>(id));
    lp->set_logprob(token.sampled.logprob);
    for (const auto& [top_id, logprob] : token.sampled.top) {
      v1::TopLogprob* top = lp->add_top();
      top->set_token_id(static_cast<uint32_t>(top_id));
      top->set_logprob(logprob);
    }
  }
  if (!live.out->Push(std::move(response))) {
    // The stream is over: its client went away (an abort, as when its
    // cancellation arrives first through Abort) or fell --max-buffered-chunks
    // behind (a failure). Stop generating for it and free its blocks now.
    if (live.out->cancelled()) {
      EndAborted(seq_id, absl::CancelledError("the client went away"));
    } else {
      End(seq_id, absl::ResourceExhaustedError("the client stopped reading its stream"));
    }
    return;
  }
  if (delta.finish != StopReason::kNone) Complete(seq_id, delta.finish, std::move(delta.matched_stop));
}

}  // namespace tpserve
