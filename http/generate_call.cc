#include "http/generate_call.h"

#include <algorithm>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "http/http_answer.h"

namespace tpserve::http {
namespace {

namespace v1 = tpserve::v1;
using nlohmann::json;

class GenerateCall;

// One choice of the response (its "index": its prompt's * n + its own).
struct Choice {
  std::optional<v1::Complete> complete;
  int64_t text_bytes = 0;   // streamed completions' log-prob text offsets
  std::string text;         // not streaming: the whole text
  std::string reasoning;    // not streaming: the whole reasoning
  int tool_calls_sent = 0;  // streaming: calls sent so far (their deltas' index)
  google::protobuf::RepeatedPtrField<v1::TokenLogprob> logprobs;  // not streaming
  // echo / prompt_logprobs (not streaming): the prompt's tokens and log-probs
  // (its first chunk's), and its text when the client gave text.
  v1::PromptLogprobs prompt;
  std::optional<std::string> prompt_text;
};

// What the calls of one response share: one call per prompt of a
// completions request with a list of prompts, else one. Their callbacks run
// on gRPC's threads, concurrently for different calls, so everything here is
// under `mu`. The exchange's methods only queue (httpd/server.h), so they are
// called under it: the events go out in the order they were decided, and the
// last ([DONE]) last.
struct Batch {
  Batch(CoordinatorClient& c, std::shared_ptr<httpd::Exchange> ex, const OpenAiRequest& request, ResponseHead h,
        size_t num_choices, int num_calls, int per_prompt)
      : client(c),
        exchange(std::move(ex)),
        stream(request.stream),
        logprobs(request.logprobs),
        tokens_as_ids(request.tokens_as_ids),
        echo(request.echo),
        echo_only(request.echo_only),
        prompt_logprobs(request.prompt_logprobs),
        client_name(request.client),
        choices_per_prompt(per_prompt),
        head(std::move(h)),
        choices(num_choices),
        open(num_calls) {}

  bool chat() const { return head.endpoint == Endpoint::kChatCompletions; }
  bool done() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return completes == std::ssize(choices); }
  // Every choice's usage, each prompt once.
  v1::Usage Usage() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    std::vector<const v1::Complete*> completes_of;
    for (const Choice& c : choices) completes_of.push_back(&*c.complete);
    return SummedUsage(completes_of, choices_per_prompt);
  }
  // The choices as FullResponse takes them, with log-probs when `texts` names their tokens.
  std::vector<ChoiceBody> Bodies(const TokenText* texts) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    std::vector<ChoiceBody> bodies;
    for (const Choice& c : choices) {
      ChoiceBody& body = bodies.emplace_back(ChoiceBody{
          .text = c.text,
          .logprobs = texts && logprobs ? LogprobsJson(head.endpoint, c.logprobs, *texts, 0) : json(nullptr),
          .prompt_logprobs = texts && prompt_logprobs ? PromptLogprobsJson(c.prompt, *texts) : json(nullptr),
          .complete = *c.complete,
          .reasoning = c.reasoning});
      if (texts && echo) {  // the prompt first, in the text and in the log-probs
        const std::string echoed = EchoText(c.prompt, c.prompt_text);
        body.text = echoed + c.text;
        if (logprobs) body.logprobs = EchoCompletionLogprobs(c.prompt, c.logprobs, *texts, std::ssize(echoed));
      }
    }
    return bodies;
  }
  // Whether the whole response needs its tokens' texts (TokenTexts) first.
  bool NeedsTexts() const { return logprobs || echo || prompt_logprobs; }

  CoordinatorClient& client;
  const std::shared_ptr<httpd::Exchange> exchange;
  const bool stream, logprobs, tokens_as_ids;
  const bool echo, echo_only, prompt_logprobs;  // OpenAiRequest's
  const std::string client_name;  // the HTTP caller, named to the coordinator ("" = none)
  const int choices_per_prompt;

  absl::Mutex mu;
  ResponseHead head ABSL_GUARDED_BY(mu);  // its id from the first response
  bool began ABSL_GUARDED_BY(mu) = false;  // a response came (streaming: the head is out)
  std::vector<Choice> choices ABSL_GUARDED_BY(mu);
  int64_t completes ABSL_GUARDED_BY(mu) = 0;  // choices whose Complete came
  int open ABSL_GUARDED_BY(mu);               // calls not done
  grpc::Status failure ABSL_GUARDED_BY(mu);   // the first call that failed
  std::vector<std::weak_ptr<GenerateCall>> calls ABSL_GUARDED_BY(mu);
};

// One gRPC Generate call of a batch. The reactor owns itself from Start to
// OnDone (self_). A step that waits for something outside gRPC (a socket
// write, a Detokenize call) holds the call (AddHold), so OnDone cannot come
// while `this` is still needed. Reads, holds and cancels happen outside the
// batch's lock (gRPC may run a reaction, OnDone included, on the calling thread).
class GenerateCall final : public grpc::ClientReadReactor<v1::GenerateResponse>,
                           public std::enable_shared_from_this<GenerateCall> {
 public:
  GenerateCall(std::shared_ptr<Batch> batch, v1::GenerateRequest request, size_t offset)
      : batch_(std::move(batch)), request_(std::move(request)), offset_(offset),
        n_(std::max<uint32_t>(1, request_.n())) {}

  void Start() {
    self_ = shared_from_this();
    batch_->client.Begin();
    batch_->client.Prepare(context_, batch_->client_name);
    batch_->client.stub().async()->Generate(&context_, &request_, this);
    StartRead(&response_);
    StartCall();
  }
  void Cancel() { context_.TryCancel(); }

 private:
  Batch& b() { return *batch_; }

  void OnReadDone(bool ok) override {
    if (!ok) return;  // the stream ended: OnDone follows
    if (response_.index() >= n_) return Cancel();  // the coordinator's answer to n: never more choices
    const size_t index = offset_ + response_.index();
    {
      absl::MutexLock lock(&b().mu);
      if (!b().began) {
        b().began = true;
        b().head.id = ResponseId(b().head.endpoint, response_.request_id());
        if (b().stream) {
          b().exchange->BeginStream(200, "text/event-stream", {{"Cache-Control", "no-cache"}});
          std::string roles;
          for (int i = 0; b().chat() && i < std::ssize(b().choices); ++i) {
            roles += SseEvent(StreamChunk(b().head, std::string(), /*role=*/true, nullptr, std::nullopt, {}, i));
          }
          if (!roles.empty()) b().exchange->Write(std::move(roles), nullptr);
        }
      }
      if (!b().stream) {
        Gather(b().choices[index]);
      } else if (ChunkNeedsTexts()) {
        AddHold();  // the chunk's event waits for its tokens' texts (below)
      } else {
        std::string events = response_.has_complete() ? StreamComplete(index) : ChunkEvent(index, nullptr);
        if (!events.empty()) return Send(std::move(events));  // reads on once written
      }
    }
    if (!b().stream || !ChunkNeedsTexts()) return StartRead(&response_);
    google::protobuf::RepeatedPtrField<v1::TokenLogprob> lookup = response_.chunk().logprobs();
    const v1::PromptLogprobs& prompt = response_.chunk().prompt_logprobs();
    lookup.MergeFrom(prompt.logprobs());
    for (uint32_t id : prompt.token_ids()) lookup.Add()->set_token_id(id);  // the echoed tokens' texts
    b().client.TokenTexts(lookup, b().tokens_as_ids, [this, index](absl::StatusOr<TokenText> texts) {
      {
        absl::MutexLock lock(&b().mu);
        Send(TextsChunkEvent(index, texts.ok() ? &*texts : nullptr));
      }
      RemoveHold();
    });
  }

  // Streaming: whether this chunk's event waits for token texts: its
  // log-probs, or the prompt a choice's first chunk echoes or scores.
  bool ChunkNeedsTexts() {
    if (!response_.has_chunk()) return false;
    return b().logprobs || ((b().echo || b().prompt_logprobs) && response_.chunk().has_prompt_logprobs());
  }
  std::optional<std::string> PromptText() const {
    if (request_.input_case() != v1::GenerateRequest::kPrompt) return std::nullopt;
    return request_.prompt();
  }

  // The event of a chunk whose tokens' texts are known (nullptr: the look-up
  // failed, no log-probs then): the echoed prompt first on a choice's first
  // chunk, the log-probs with offsets counted over the choice's text so far.
  std::string TextsChunkEvent(size_t index, const TokenText* texts) ABSL_EXCLUSIVE_LOCKS_REQUIRED(b().mu) {
    const v1::Chunk& c = response_.chunk();
    int64_t& bytes = b().choices[index].text_bytes;
    const bool first = c.has_prompt_logprobs() && texts != nullptr;
    static const google::protobuf::RepeatedPtrField<v1::TokenLogprob> kNone;
    const auto& output = b().echo_only ? kNone : c.logprobs();
    const std::string prefix = first && b().echo ? EchoText(c.prompt_logprobs(), PromptText()) : "";
    json lp = nullptr;
    if (texts != nullptr && b().logprobs) {
      lp = first && b().echo ? EchoCompletionLogprobs(c.prompt_logprobs(), output, *texts, std::ssize(prefix))
                             : LogprobsJson(b().head.endpoint, output, *texts, bytes);
    }
    const json prompt_lp = first && b().prompt_logprobs ? PromptLogprobsJson(c.prompt_logprobs(), *texts) : json(nullptr);
    bytes += std::ssize(prefix) + (b().echo_only ? 0 : std::ssize(c.text()));
    return ChunkEvent(index, lp, prefix, prompt_lp);
  }

  // echo with max_tokens 0: the token generated is not the answer, the prompt
  // alone is, which the length ended.
  static void EchoOnly(v1::Complete& c) {
    c.set_finish_reason(v1::LENGTH);
    c.clear_matched_stop();
    c.mutable_usage()->set_completion_tokens(0);
  }

  // Not streaming: keep the choice's text, log-probs and Complete.
  void Gather(Choice& choice) ABSL_EXCLUSIVE_LOCKS_REQUIRED(b().mu) {
    if (response_.has_chunk() && response_.chunk().has_prompt_logprobs()) {
      choice.prompt = response_.chunk().prompt_logprobs();
      if (request_.input_case() == v1::GenerateRequest::kPrompt) choice.prompt_text = request_.prompt();
    }
    if (b().echo_only && response_.has_complete()) {  // the one token asked for is not the answer
      choice.complete = response_.complete();
      EchoOnly(*choice.complete);
      ++b().completes;
    } else if (b().echo_only) {
      return;
    } else if (response_.has_chunk()) {
      choice.text += response_.chunk().text();
      choice.reasoning += response_.chunk().reasoning_text();
      choice.logprobs.MergeFrom(response_.chunk().logprobs());
    } else if (response_.has_complete()) {
      choice.complete = response_.complete();
      ++b().completes;
    }
  }

  // A choice's finish event; after the last choice's, the usage and [DONE].
  std::string StreamComplete(size_t index) ABSL_EXCLUSIVE_LOCKS_REQUIRED(b().mu) {
    v1::Complete c = response_.complete();
    if (b().echo_only) EchoOnly(c);
    b().choices[index].complete = c;
    ++b().completes;
    std::string events = SseEvent(StreamChunk(b().head, b().chat() ? std::nullopt : std::optional<std::string>(""),
                                              false, nullptr, FinishReason(c.finish_reason()), {},
                                              static_cast<int>(index)));
    if (b().done()) {
      if (b().head.include_usage) events += SseEvent(UsageChunk(b().head, b().Usage()));
      events += kSseDone;
    }
    return events;
  }

  // The event of one chunk: its text (none when it has only reasoning or
  // calls), its reasoning, the calls it completed; nothing for an empty chunk.
  // `prefix` (the echoed prompt) goes before the chunk's text, and
  // `prompt_logprobs` (vLLM's) on the choice.
  std::string ChunkEvent(size_t index, const json& logprobs, const std::string& prefix = "",
                         const json& prompt_logprobs = nullptr) ABSL_EXCLUSIVE_LOCKS_REQUIRED(b().mu) {
    const v1::Chunk& chunk = response_.chunk();
    const std::string own = prefix + (b().echo_only ? std::string() : chunk.text());
    const bool extras_only = own.empty() && (!chunk.reasoning_text().empty() || chunk.tool_calls_size() > 0);
    if (own.empty() && !extras_only && !b().logprobs && prompt_logprobs.is_null()) return std::string();
    int& tool_calls_sent = b().choices[index].tool_calls_sent;
    const ChatExtras extras{.reasoning = chunk.reasoning_text(), .tool_calls = &chunk.tool_calls(),
                            .first_tool_index = tool_calls_sent};
    tool_calls_sent += chunk.tool_calls_size();
    std::optional<std::string> text;
    if (!b().chat() || !extras_only) text = own;
    json event = StreamChunk(b().head, text, false, logprobs, std::nullopt, extras, static_cast<int>(index));
    if (!prompt_logprobs.is_null()) event["choices"][0]["prompt_logprobs"] = prompt_logprobs;
    return SseEvent(event);
  }

  // Writes `events` (under the lock: in order), then reads on once the
  // client has taken them; nothing to write reads on at once.
  void Send(std::string events) ABSL_EXCLUSIVE_LOCKS_REQUIRED(b().mu) {
    const bool last = b().done();
    AddHold();
    b().exchange->Write(std::move(events), [this, last](bool ok) {
      if (!ok) {
        Cancel();
      } else {
        if (last) b().exchange->EndStream();
        StartRead(&response_);  // to the end of the stream, after Complete too
      }
      RemoveHold();
    });
  }

  void OnDone(const grpc::Status& status) override {
    std::shared_ptr<GenerateCall> self = std::move(self_);  // the last reference may be this one
    std::vector<std::shared_ptr<GenerateCall>> cancel;
    bool last = false, texts = false;
    google::protobuf::RepeatedPtrField<v1::TokenLogprob> logprobs;  // every choice's, when `texts`
    {
      absl::MutexLock lock(&b().mu);
      if (!status.ok() && b().failure.ok()) {
        b().failure = status;
        for (const auto& weak : b().calls) {  // the response fails as a whole
          if (auto call = weak.lock(); call && call != self) cancel.push_back(std::move(call));
        }
      }
      last = --b().open == 0;
      if (last) texts = Finish(&logprobs);
    }
    for (const auto& call : cancel) call->Cancel();
    if (texts) AnswerWithTexts(logprobs);
    b().client.End();
  }

  // The last call is done: the response's end, its error, or the whole
  // non-streaming response. True when that response needs its log-prob
  // tokens' texts first: every choice's log-probs are then in *logprobs, for
  // AnswerWithTexts after the lock is released.
  bool Finish(google::protobuf::RepeatedPtrField<v1::TokenLogprob>* logprobs) ABSL_EXCLUSIVE_LOCKS_REQUIRED(b().mu) {
    grpc::Status s = b().failure;
    if (s.ok() && !b().done()) s = grpc::Status(grpc::StatusCode::INTERNAL, "the stream ended without Complete");
    if (!b().began) {
      if (s.ok()) s = grpc::Status(grpc::StatusCode::INTERNAL, "the coordinator ended the stream without a response");
      AnswerError(*b().exchange, ErrorOf(s, b().head.endpoint));
      return false;
    }
    if (b().stream) {
      if (s.ok()) return false;  // [DONE] went with the last Complete
      b().exchange->Write(SseEvent(ErrorBody(ErrorOf(s, b().head.endpoint))) + kSseDone, nullptr);
      b().exchange->EndStream();
      return false;
    }
    if (!s.ok()) {
      AnswerError(*b().exchange, ErrorOf(s, b().head.endpoint));
      return false;
    }
    if (!b().NeedsTexts()) {
      AnswerJson(*b().exchange, 200, FullResponse(b().head, b().Bodies(nullptr), b().choices_per_prompt));
      return false;
    }
    for (const Choice& c : b().choices) {
      logprobs->MergeFrom(c.logprobs);
      logprobs->MergeFrom(c.prompt.logprobs());
      for (uint32_t id : c.prompt.token_ids()) logprobs->Add()->set_token_id(id);  // the echoed tokens' texts
    }
    return true;
  }

  // The non-streaming response with log-probs: one look-up for every choice's
  // tokens, outside the batch's lock (TokenTexts may answer on this thread).
  void AnswerWithTexts(const google::protobuf::RepeatedPtrField<v1::TokenLogprob>& logprobs)
      ABSL_LOCKS_EXCLUDED(b().mu) {
    const int per_prompt = b().choices_per_prompt;
    b().client.Begin();
    b().client.TokenTexts(logprobs, b().tokens_as_ids, [batch = batch_, per_prompt](absl::StatusOr<TokenText> texts) {
      absl::MutexLock lock(&batch->mu);
      if (!texts.ok()) {
        AnswerError(*batch->exchange, ErrorOf(texts.status(), batch->head.endpoint));
      } else {
        AnswerJson(*batch->exchange, 200, FullResponse(batch->head, batch->Bodies(&*texts), per_prompt));
      }
      batch->client.End();
    });
  }

  const std::shared_ptr<Batch> batch_;
  v1::GenerateRequest request_;
  const size_t offset_;  // its choices' first index in the response
  const uint32_t n_;     // its choices
  grpc::ClientContext context_;
  v1::GenerateResponse response_;
  std::shared_ptr<GenerateCall> self_;
};

}  // namespace

void StartGenerateCall(CoordinatorClient& client, std::shared_ptr<httpd::Exchange> exchange, OpenAiRequest request,
                       ResponseHead head) {
  // A list of prompts: one call each, the rest of the request the same.
  std::vector<v1::GenerateRequest> calls;
  if (request.prompts.empty()) {
    calls.push_back(std::move(request.grpc));
  } else {
    for (size_t p = 0; p < request.prompts.size(); ++p) {
      v1::GenerateRequest& r = calls.emplace_back(request.grpc);
      r.clear_prompt();
      r.clear_prompt_token_ids();
      r.MergeFrom(request.prompts[p]);
      if (!r.request_id().empty()) r.set_request_id(absl::StrCat(r.request_id(), "-", p));
    }
  }
  const int n = static_cast<int>(std::max<uint32_t>(1, calls[0].n()));
  auto batch = std::make_shared<Batch>(client, exchange, request, std::move(head), calls.size() * n,
                                       static_cast<int>(calls.size()), n);
  std::vector<std::shared_ptr<GenerateCall>> started;
  for (size_t p = 0; p < calls.size(); ++p) {
    started.push_back(std::make_shared<GenerateCall>(batch, std::move(calls[p]), p * n));
  }
  {
    absl::MutexLock lock(&batch->mu);
    for (const auto& call : started) batch->calls.push_back(call);
  }
  std::weak_ptr<Batch> weak = batch;
  exchange->OnClientGone([weak] {
    std::shared_ptr<Batch> b = weak.lock();
    if (!b) return;
    std::vector<std::shared_ptr<GenerateCall>> live;
    {
      absl::MutexLock lock(&b->mu);
      for (const auto& call : b->calls) {
        if (auto c = call.lock()) live.push_back(std::move(c));
      }
    }
    for (const auto& call : live) call->Cancel();
  });
  for (const auto& call : started) call->Start();
}

}  // namespace tpserve::http
