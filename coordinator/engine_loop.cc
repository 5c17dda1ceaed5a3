#include "coordinator/engine_loop.h"

#include <pthread.h>

#include <algorithm>
#include <functional>
#include <limits>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/check.h"
#include "coordinator/log.h"
#include "proto/step_convert.h"

namespace tpserve {

namespace iv1 = tpserve::internal::v1;

struct EngineLoop::Live {
  Live(const EngineLoopOptions& options, std::string owner, PreparedRequest req)
      : client(std::move(owner)),
        request(std::move(req)),
        stops(request.stop, options.eos_token_ids, static_cast<int64_t>(request.prompt.size()),
              options.max_model_len),
        limit(std::min(static_cast<int64_t>(request.prompt.size()) + request.stop.max_tokens,
                       options.max_model_len > 0 ? options.max_model_len : std::numeric_limits<int64_t>::max())) {}

  std::string client;  // whose request it is (its admission group)
  PreparedRequest request;  // prompt and sampling (its stop parameters went to the output side)
  int32_t index = 0;        // its choice: sequence FirstChoiceOf(id) + index of request.n
  TokenStops stops;         // the stops the engine decides itself
  int64_t num_output = 0;   // tokens handed on
  std::optional<absl::Time> first_scheduled;
  std::unique_ptr<OutputRequest> output;  // until Adopt hands it to its shard
  int64_t limit;            // prompt + max_tokens, at most the model's length: no token past it is kept
};

EngineLoop::EngineLoop(const Tokenizer& tokenizer, EngineLoopOptions options, StepTransport workers)
    : tokenizer_(tokenizer),
      options_(std::move(options)),
      workers_(std::move(workers)),
      blocks_(std::make_unique<BlockManager>(options_.num_blocks, options_.block_size,
                                             options_.enable_prefix_caching)),
      scheduler_(std::make_unique<Scheduler>(*blocks_, options_.scheduler)),
      output_(std::make_unique<OutputPool>(
          std::max(1, options_.output_threads), options_.metrics,
          OutputPool::Hooks{.finish = [this](uint64_t seq_id) { FinishFromOutput(seq_id); },
                            .retired = [this](const std::string& client, const std::string& request_id,
                                              bool last) { Retired(client, request_id, last); }})),
      num_blocks_(options_.num_blocks) {
  blocks_->set_observer(options_.kv_events);
  if (options_.speculation.enabled()) {
    absl::StatusOr<std::unique_ptr<SpeculativeDrafter>> drafter =
        SpeculativeDrafter::Create(options_.speculation, options_.metrics);
    TPSERVE_CHECK(drafter.ok(), "EngineLoop: ", drafter.status().message());  // the flags were checked at start-up
    drafter_ = std::move(*drafter);
    scheduler_->set_drafter(drafter_.get());
  }
  Publish();
}

namespace {

// Admission is fair between clients (scheduler.h): a request's group is its client.
uint64_t GroupOf(const std::string& client) { return std::hash<std::string>{}(client); }

static_assert(kChoiceStride > static_cast<uint64_t>(kMaxChoices), "a request's choices need their own ids");

// Token batches the output threads may have flushed and not yet handled
// when the engine schedules the next step: the one it has just handed on.
constexpr int64_t kMaxOutputLag = 2;

}  // namespace

EngineLoop::~EngineLoop() { Stop(); }

void EngineLoop::Start() {
  output_->Start();
  thread_ = std::thread([this] { Run(); });
  pthread_setname_np(thread_.native_handle(), "tpserve-engine");
}

void EngineLoop::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
    cv_.SignalAll();
  }
  if (thread_.joinable()) thread_.join();
  output_->Stop();  // after the engine's last events: every live request's end
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
  if (request.n > options_.scheduler.max_num_seqs) {
    return absl::InvalidArgumentError(absl::StrCat(
        "n: ", request.n, " choices run together but the server runs at most ", options_.scheduler.max_num_seqs,
        " sequences at once (--max-num-seqs); ask for fewer"));
  }
  // Sequence ids: the request's first choice's is a multiple of kChoiceStride (output_pool.h).
  const uint64_t first = next_seq_id_++ * kChoiceStride;
  ids_[std::pair(client, request_id)] = first;
  const int64_t num_prompt = std::ssize(request.prompt);
  const bool logprobs = request.sampling.logprobs >= 0;
  const int32_t n = request.n;
  auto group = std::make_shared<ChoiceGroup>(n);
  if (request.sampling.prompt_logprobs >= 0) {  // the ids now, each position's log-prob as steps bring it
    group->wants_prompt_logprobs = true;
    for (int32_t t : request.prompt) group->prompt_logprobs.add_token_ids(static_cast<uint32_t>(t));
    absl::StatusOr<std::string> text = tokenizer_.Decode(request.prompt, /*skip_special_tokens=*/false);
    if (text.ok()) group->prompt_logprobs.set_text(*std::move(text));  // ids from the vocabulary: it decodes
  }
  for (int32_t i = 0; i < n; ++i) {
    auto live = std::make_unique<Live>(options_, client, i + 1 < n ? request : std::move(request));
    live->index = i;
    live->request.sampling = ChoiceSampling(std::move(live->request.sampling), i);
    live->output = std::make_unique<OutputRequest>(
        client, request_id, out,
        OutputProcessor(tokenizer_, std::move(live->request.stop), options_.eos_token_ids, num_prompt,
                        options_.max_model_len),
        num_prompt, logprobs, i, group);
    inbox_.push_back({first + static_cast<uint64_t>(i), std::move(live)});
  }
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

void EngineLoop::FinishFromOutput(uint64_t seq_id) {
  absl::MutexLock lock(&mu_);
  finishes_.push_back(seq_id);
  cv_.SignalAll();
}

void EngineLoop::Retired(const std::string& client, const std::string& request_id, bool last) {
  // Before the lock, and before WaitIdle can see the request gone.
  if (last && options_.on_retired) options_.on_retired(client, request_id);
  absl::MutexLock lock(&mu_);
  if (last) ids_.erase(std::pair(client, request_id));
  if (ending_ > 0) {
    --ending_;
    --stats_.running;  // the engine's next publish counts the same
    // Under mu_ as PublishLocked is, so the gauge's values keep their order;
    // an idle engine publishes nothing more.
    if (options_.metrics != nullptr) options_.metrics->OnRunning(options_.dp_rank, stats_.running);
  }
  cv_.SignalAll();  // WaitIdle
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
  stats_.running = scheduler_->num_running() + static_cast<int32_t>(ending_);
  stats_.waiting = scheduler_->num_waiting();
  admitting_ = 0;  // counted by the scheduler from now on
  stats_.steps = static_cast<int64_t>(next_step_id_ - 1);
  stats_.tokens_in_flight = scheduler_->num_tokens_in_flight();
  if (options_.metrics != nullptr) {
    options_.metrics->OnEngineState(options_.dp_rank,
                                    {.running = stats_.running,
                                     .waiting = stats_.waiting + static_cast<int64_t>(inbox_.size()),
                                     .kv_blocks_used = b.num_blocks - b.free_blocks,
                                     .kv_blocks_total = b.num_blocks,
                                     .tokens_in_flight = stats_.tokens_in_flight,
                                     .preemptions_total = scheduler_->num_preemptions(),
                                     .prefix_query_tokens_total = b.prefix_queries * options_.block_size,
                                     .prefix_hit_tokens_total = b.prefix_hits * options_.block_size});
  }
}

void EngineLoop::Run() {
  bool stalled = false;
  while (true) {
    Taken taken;
    {
      absl::MutexLock lock(&mu_);
      // Idle: nothing scheduled and nothing new. Block until the inbox changes.
      // After a step that ran nothing (cannot normally happen while work is
      // queued) wait a little rather than spin.
      const absl::Time until = stalled ? absl::Now() + absl::Milliseconds(5) : absl::InfiniteFuture();
      // Suspended, it waits for Resume (or aborts) once it has parked.
      while (!stop_ && inbox_.empty() && aborts_.empty() && finishes_.empty() && resume_blocks_ == 0) {
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
      taken.adds.swap(inbox_);
      admitting_ = static_cast<int64_t>(taken.adds.size());  // until Admit's Publish counts them
      taken.aborts.swap(aborts_);
      taken.finishes.swap(finishes_);
      taken.suspended = suspended_;
    }
    stalled = !Iterate(std::move(taken));
    Publish();
    output_->Flush();  // this iteration's tokens and ends, to the output threads at once
    if (options_.kv_events != nullptr) options_.kv_events->Flush();  // its cache changes, one batch
  }
  // Stopping: nothing more runs; every request still live ends now.
  DrainInFlight();
  std::vector<Inbound> adds;
  {
    absl::MutexLock lock(&mu_);
    adds.swap(inbox_);
  }
  for (Inbound& in : adds) Adopt(std::move(in));
  EndAll(absl::UnavailableError("the server is shutting down"));
  Publish();
  output_->Flush();
}

void EngineLoop::Finish(uint64_t seq_id, StopReason reason, absl::Status status) {
  auto it = live_.find(seq_id);
  if (it == live_.end()) return;
  const Sequence* seq = scheduler_->Find(seq_id);
  EngineEnd end{.reason = reason,
                .status = std::move(status),
                .first_scheduled = it->second->first_scheduled,
                .cached_tokens = seq ? static_cast<uint32_t>(seq->num_cached_tokens) : 0};
  live_.erase(it);
  if (drafter_ != nullptr) drafter_->Remove(seq_id);
  scheduler_->Finish(seq_id);
  {
    absl::MutexLock lock(&mu_);
    ++ending_;        // until Retired
    PublishLocked();  // a client that sees the end then asks GetServerInfo sees its blocks freed
  }
  output_->End(seq_id, std::move(end));
}

void EngineLoop::EndAll(const absl::Status& status) {
  std::vector<uint64_t> ids;
  for (const auto& [id, live] : live_) ids.push_back(id);
  for (uint64_t id : ids) End(id, status);
}

void EngineLoop::Adopt(Inbound in) {
  output_->Begin(in.seq_id, std::move(in.live->output));
  live_.emplace(in.seq_id, std::move(in.live));
}

void EngineLoop::Admit(std::vector<Inbound> adds) {
  // A request's choices arrive together, first choice first (Submit).
  for (size_t k = 0; k < adds.size();) {
    const uint64_t first = adds[k].seq_id;
    const int32_t n = adds[k].live->request.n;
    std::vector<int32_t> prompt = adds[k].live->request.prompt;
    std::vector<uint64_t> block_hashes = adds[k].live->request.block_hashes;
    const bool read_prefix_cache = adds[k].live->request.sampling.prompt_logprobs < 0;  // prompt log-probs: every row
    const uint64_t group = GroupOf(adds[k].live->client);
    std::vector<uint64_t> forks;
    for (int32_t i = 0; i < n; ++i, ++k) {
      if (i > 0) forks.push_back(adds[k].seq_id);
      Adopt(std::move(adds[k]));
    }
    absl::Status added =
        scheduler_->Add(first, std::move(prompt), group, forks, read_prefix_cache, std::move(block_hashes));
    if (!added.ok()) {
      End(first, added);
      for (uint64_t fork : forks) End(fork, added);
      continue;
    }
    for (int32_t i = 0; i < n; ++i) MaySpeculate(first + static_cast<uint64_t>(i));
  }
}

void EngineLoop::MaySpeculate(uint64_t seq_id) {
  const auto it = live_.find(seq_id);
  if (drafter_ == nullptr || it == live_.end()) return;
  const PreparedRequest& r = it->second->request;
  // A constrained sequence's tokens go through its grammar's masks, one at a
  // time on rank 0: it is never speculated.
  if (r.speculate && r.sampling.constraint == nullptr) drafter_->Add(seq_id, it->second->limit);
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
  if (options_.kv_events != nullptr) options_.kv_events->OnCleared();  // flushed after this iteration
  blocks_->set_observer(options_.kv_events);
  scheduler_ = std::make_unique<Scheduler>(*blocks_, options_.scheduler);
  scheduler_->set_drafter(drafter_.get());
  num_blocks_ = num_blocks;
  std::vector<std::pair<uint64_t, absl::Status>> refused;
  for (size_t k = 0; k < waiting.size();) {  // a request's waiting choices again share one prefill
    const uint64_t first = waiting[k];
    const Live& live = *live_.at(first);
    std::vector<uint64_t> forks;
    for (++k; k < waiting.size() && FirstChoiceOf(waiting[k]) == FirstChoiceOf(first); ++k) forks.push_back(waiting[k]);
    absl::Status added = scheduler_->Add(first, live.request.prompt, GroupOf(live.client), forks,
                                         /*read_prefix_cache=*/live.request.sampling.prompt_logprobs < 0,
                                         live.request.block_hashes);
    if (!added.ok()) {
      refused.emplace_back(first, added);
      for (uint64_t fork : forks) refused.emplace_back(fork, added);
    }
  }
  PublishLocked();
  // Ended by the loop's next iteration, as aborts: End takes mu_, held here.
  for (auto& r : refused) aborts_.push_back(std::move(r));
}

void EngineLoop::ApplyAborts(std::vector<std::pair<uint64_t, absl::Status>> aborts) {
  // An OK status is an Abort call: Complete{ABORTED}. A cancelled stream or a
  // passed deadline ends with its status and counts as an abort, any other
  // status as a failure (the output thread tells them apart).
  // An abort names a request by its first choice: every choice of it ends.
  for (auto& [seq_id, why] : aborts) {
    const auto it = live_.find(seq_id);
    const int32_t n = it == live_.end() ? kMaxChoices : it->second->request.n;
    for (int32_t i = 0; i < n; ++i) {
      Finish(seq_id + static_cast<uint64_t>(i), why.ok() ? StopReason::kAborted : StopReason::kNone, why);
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

bool EngineLoop::Iterate(Taken taken) {
  const bool had_requests = !taken.adds.empty() || !taken.aborts.empty() || !taken.finishes.empty();
  Admit(std::move(taken.adds));
  Publish();  // Submit's --max-queue check counts the admitted from here on
  ApplyAborts(std::move(taken.aborts));
  // Ended by their output threads (a stop string, a stream that is over):
  // they have their outcome; here they only give their blocks back.
  for (uint64_t seq_id : taken.finishes) Finish(seq_id, StopReason::kNone, absl::OkStatus());
  if (!taken.suspended.ok()) {  // the workers were lost: nothing runs until Resume
    Park(taken.suspended);
    return true;
  }
  // With overlap the next step goes out before the oldest comes back, so the
  // workers never wait for this thread; lock-step receives each step first.
  const size_t depth = options_.overlap ? 2 : 1;
  bool sent = false;
  if (in_flight_.size() < depth) {
    // The output threads may lag the steps by one batch of tokens, not more:
    // what they hold stays bounded, and so does how far past a stop string
    // a sequence runs ("The step pipeline"). The ends this iteration made
    // wait for the flush after the step: the step that tells the workers to
    // drop those sequences is sent before any client sees its end.
    output_->WaitBehind(kMaxOutputLag);
    // What the output threads ended while handling the batches before the
    // last one is in finishes_ by now: those sequences are not scheduled again.
    std::vector<uint64_t> finished;
    {
      absl::MutexLock lock(&mu_);
      finished.swap(finishes_);
    }
    for (uint64_t seq_id : finished) Finish(seq_id, StopReason::kNone, absl::OkStatus());
    sent = ScheduleAndSend();
  }
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
    // Prompt log-probs before the step's tokens: a first token's Chunk carries them.
    absl::StatusOr<std::vector<PromptLogprobs>> prompts = PromptLogprobsFromProto(*result);
    if (!prompts.ok()) return OnStepFailed(oldest.step, oldest.step_id, prompts.status());
    for (PromptLogprobs& p : *prompts) {
      if (live_.contains(p.seq_id)) output_->AddPromptLogprobs(p.seq_id, std::move(p));
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

void EngineLoop::OnStepDone(const ScheduledStep& step, uint64_t step_id, std::vector<StepToken> tokens) {
  const std::vector<std::span<const StepToken>> runs = TokenRunsInStepOrder(step, tokens);
  sampled_.clear();
  sampled_index_.clear();
  std::vector<std::pair<uint64_t, absl::Status>> failed;  // ended after Publish, as below
  size_t k = 0;
  for (const ScheduledSequence& s : step.sequences) {
    if (!s.sample) continue;
    // One token, or 1 to p + 1 for a sequence that verified p <= slots proposals (in order).
    std::span<const StepToken> run = runs[k++];
    run = run.first(std::min(run.size(), static_cast<size_t>(s.draft_slots) + 1));
    if (run.empty()) {
      failed.emplace_back(s.id, absl::InternalError(absl::StrCat("step ", step_id,
                                                                 ": rank 0 returned no token for this sequence")));
      continue;
    }
    if (!run.front().error.empty()) {  // rank 0 gave up on its grammar: the token is not output
      failed.emplace_back(s.id, absl::InvalidArgumentError(run.front().error));
      continue;
    }
    if (const int32_t proposed = std::min(run.front().num_proposed, s.draft_slots); proposed > 0 && drafter_ != nullptr) {
      drafter_->Observe(s.id, proposed, static_cast<int32_t>(run.size()) - 1, s.pipelined);
    }
    for (const StepToken& token : run) {
      sampled_.emplace_back(s.id, token.sampled.token);
      sampled_index_.push_back(static_cast<size_t>(&token - tokens.data()));
    }
  }
  scheduler_->OnStepDone(step, sampled_);
  Publish();  // before any chunk goes out: a client reading one sees this step's blocks in use
  for (const auto& [id, status] : failed) End(id, status);
  const absl::Time now = absl::Now();
  for (size_t i = 0; i < sampled_.size(); ++i) {
    HandOn(sampled_[i].first, std::move(tokens[sampled_index_[i]].sampled), now);
  }
}

void EngineLoop::HandOn(uint64_t seq_id, SampledToken sampled, absl::Time now) {
  auto it = live_.find(seq_id);
  if (it == live_.end()) return;  // finished since it was scheduled: dropped unseen
  Live& live = *it->second;
  const StopReason stop = live.stops.Check(sampled.token, ++live.num_output);
  output_->Token(seq_id, std::move(sampled), now, /*last=*/stop != StopReason::kNone);
  if (stop != StopReason::kNone) Finish(seq_id, stop, absl::OkStatus());
}

}  // namespace tpserve
