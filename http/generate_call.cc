#include "http/generate_call.h"

#include <algorithm>
#include <optional>
#include <vector>
#include <string>
#include <utility>

#include "http/http_answer.h"

namespace tpserve::http {
namespace {

namespace v1 = tpserve::v1;
using nlohmann::json;

// The reactor owns itself from StartCall to OnDone (self_). A step that
// waits for something outside gRPC (a socket write, a Detokenize call) holds
// the call (AddHold), so OnDone cannot come while `this` is still needed.
class GenerateCall final : public grpc::ClientReadReactor<v1::GenerateResponse>,
                           public std::enable_shared_from_this<GenerateCall> {
 public:
  GenerateCall(CoordinatorClient& client, std::shared_ptr<httpd::Exchange> exchange, OpenAiRequest request,
               ResponseHead head)
      : client_(client),
        exchange_(std::move(exchange)),
        request_(std::move(request)),
        head_(std::move(head)),
        choices_(std::max<size_t>(1, request_.grpc.n())) {}

  void Start() {
    self_ = shared_from_this();
    client_.Begin();
    client_.Prepare(context_);
    std::weak_ptr<GenerateCall> weak = self_;
    exchange_->OnClientGone([weak] {
      if (std::shared_ptr<GenerateCall> call = weak.lock()) call->context_.TryCancel();
    });
    client_.stub().async()->Generate(&context_, &request_.grpc, this);
    StartRead(&response_);
    StartCall();
  }

 private:
  bool chat() const { return head_.endpoint == Endpoint::kChatCompletions; }

  void OnReadDone(bool ok) override {
    if (!ok) return;  // the stream ended: OnDone follows
    if (!got_first_) {
      got_first_ = true;
      head_.id = ResponseId(head_.endpoint, response_.request_id());
      if (request_.stream) {
        exchange_->BeginStream(200, "text/event-stream", {{"Cache-Control", "no-cache"}});
        for (int i = 0; chat() && i < std::ssize(choices_); ++i) {
          pending_ += SseEvent(StreamChunk(head_, std::string(), /*role=*/true, nullptr, std::nullopt, {}, i));
        }
      }
    }
    if (response_.index() >= choices_.size()) {  // the coordinator's answer to n: never more choices
      context_.TryCancel();
      return;
    }
    if (!request_.stream) return Gather();
    if (response_.has_chunk()) return StreamChunkEvents();
    if (response_.has_complete()) {
      const v1::Complete& c = response_.complete();
      Choice& choice = choices_[response_.index()];
      choice.complete = c;
      ++completes_;
      pending_ += SseEvent(StreamChunk(head_, chat() ? std::nullopt : std::optional<std::string>(""), false,
                                       nullptr, FinishReason(c.finish_reason()), {},
                                       static_cast<int>(response_.index())));
      if (done()) {
        if (head_.include_usage) pending_ += SseEvent(UsageChunk(head_, Usage()));
        pending_ += kSseDone;
      }
    }
    Send();
  }

  bool done() const { return completes_ == std::ssize(choices_); }

  // Every choice's usage, the prompt once.
  v1::Usage Usage() const {
    std::vector<const v1::Complete*> completes;
    for (const Choice& c : choices_) completes.push_back(&*c.complete);
    return SummedUsage(completes, static_cast<int>(choices_.size()));
  }

  // Not streaming: keep each choice's text, log-probs and Complete; read on.
  void Gather() {
    Choice& choice = choices_[response_.index()];
    if (response_.has_chunk()) {
      choice.text += response_.chunk().text();
      choice.reasoning += response_.chunk().reasoning_text();
      choice.logprobs.MergeFrom(response_.chunk().logprobs());
    } else if (response_.has_complete()) {
      choice.complete = response_.complete();
      ++completes_;
    }
    StartRead(&response_);
  }

  // A streamed chunk's event, its log-prob tokens named first when asked for.
  void StreamChunkEvents() {
    const v1::Chunk& chunk = response_.chunk();
    const bool extras = !chunk.reasoning_text().empty() || chunk.tool_calls_size() > 0;
    if (chunk.text().empty() && !extras && !request_.logprobs) return Send();
    if (!request_.logprobs) {
      pending_ += ChunkEvent(chunk, nullptr);
      return Send();
    }
    AddHold();
    client_.TokenTexts(chunk.logprobs(), request_.tokens_as_ids, [this](absl::StatusOr<TokenText> texts) {
      const v1::Chunk& c = response_.chunk();
      int64_t& text_bytes = choices_[response_.index()].text_bytes;
      const json lp = texts.ok() ? LogprobsJson(head_.endpoint, c.logprobs(), *texts, text_bytes) : json(nullptr);
      text_bytes += static_cast<int64_t>(c.text().size());
      pending_ += ChunkEvent(c, lp);
      Send();
      RemoveHold();
    });
  }

  // The event of one chunk: its text (none when it has only reasoning or
  // calls), its reasoning, the calls it completed.
  std::string ChunkEvent(const v1::Chunk& chunk, const json& logprobs) {
    int& tool_calls_sent = choices_[response_.index()].tool_calls_sent;
    const ChatExtras extras{.reasoning = chunk.reasoning_text(), .tool_calls = &chunk.tool_calls(),
                            .first_tool_index = tool_calls_sent};
    tool_calls_sent += chunk.tool_calls_size();
    std::optional<std::string> text;
    const bool only_extras = chunk.text().empty() && (!extras.reasoning.empty() || chunk.tool_calls_size() > 0);
    if (!chat() || !only_extras) text = chunk.text();
    return SseEvent(StreamChunk(head_, text, false, logprobs, std::nullopt, extras, static_cast<int>(response_.index())));
  }

  // Writes what is pending, then reads on once the client has taken it.
  void Send() {
    if (pending_.empty()) return StartRead(&response_);
    const bool last = done();
    AddHold();
    exchange_->Write(std::exchange(pending_, std::string()), [this, last](bool ok) {
      if (!ok) {
        context_.TryCancel();
      } else {
        if (last) exchange_->EndStream();
        StartRead(&response_);  // to the end of the stream, after Complete too
      }
      RemoveHold();
    });
  }

  void OnDone(const grpc::Status& status) override {
    std::shared_ptr<GenerateCall> self = std::move(self_);  // the last reference may be this one
    if (!got_first_) {
      grpc::Status s = status.ok() ? grpc::Status(grpc::StatusCode::INTERNAL,
                                                  "the coordinator ended the stream without a response")
                                   : status;
      AnswerError(*exchange_, ErrorOf(s, head_.endpoint));
    } else if (request_.stream) {
      EndStreamWithError(status);
    } else {
      return Answer(status, std::move(self));
    }
    client_.End();
  }

  // A stream that ended without Complete: its status as an error event.
  void EndStreamWithError(const grpc::Status& status) {
    if (done()) return;
    grpc::Status s = status.ok() ? grpc::Status(grpc::StatusCode::INTERNAL, "the stream ended without Complete")
                                 : status;
    exchange_->Write(SseEvent(ErrorBody(ErrorOf(s, head_.endpoint))) + kSseDone, nullptr);
    exchange_->EndStream();
  }

  // The whole non-streaming response, log-prob tokens named first when asked for.
  void Answer(const grpc::Status& status, std::shared_ptr<GenerateCall> self) {
    if (!status.ok()) {
      AnswerError(*exchange_, ErrorOf(status, head_.endpoint));
      return client_.End();
    }
    if (!done()) {
      AnswerError(*exchange_, {.status = 500, .message = "the stream ended without Complete", .type = "server_error"});
      return client_.End();
    }
    if (!request_.logprobs) {
      AnswerJson(*exchange_, 200, FullResponse(head_, Bodies(nullptr), static_cast<int>(choices_.size())));
      return client_.End();
    }
    // One look-up for every choice's tokens.
    google::protobuf::RepeatedPtrField<v1::TokenLogprob> all;
    for (const Choice& c : choices_) all.MergeFrom(c.logprobs);
    client_.TokenTexts(all, request_.tokens_as_ids, [self](absl::StatusOr<TokenText> texts) {
      if (!texts.ok()) {
        AnswerError(*self->exchange_, ErrorOf(texts.status(), self->head_.endpoint));
      } else {
        AnswerJson(*self->exchange_, 200,
                   FullResponse(self->head_, self->Bodies(&*texts), static_cast<int>(self->choices_.size())));
      }
      self->client_.End();
    });
  }

  // The choices as FullResponse takes them, with log-probs when `texts` names their tokens.
  std::vector<ChoiceBody> Bodies(const TokenText* texts) const {
    std::vector<ChoiceBody> bodies;
    for (const Choice& c : choices_) {
      bodies.push_back(ChoiceBody{.text = c.text,
                                  .logprobs = texts ? LogprobsJson(head_.endpoint, c.logprobs, *texts, 0) : json(nullptr),
                                  .complete = *c.complete,
                                  .reasoning = c.reasoning});
    }
    return bodies;
  }

  // One choice's side of the response (GenerateResponse.index).
  struct Choice {
    std::optional<v1::Complete> complete;
    int64_t text_bytes = 0;   // streamed completions' log-prob text offsets
    std::string text;         // not streaming: the whole text
    std::string reasoning;    // not streaming: the whole reasoning
    int tool_calls_sent = 0;  // streaming: calls sent so far (their deltas' index)
    google::protobuf::RepeatedPtrField<v1::TokenLogprob> logprobs;  // not streaming
  };

  CoordinatorClient& client_;
  const std::shared_ptr<httpd::Exchange> exchange_;
  OpenAiRequest request_;
  ResponseHead head_;
  grpc::ClientContext context_;
  v1::GenerateResponse response_;
  std::shared_ptr<GenerateCall> self_;

  bool got_first_ = false;
  std::vector<Choice> choices_;  // [n] by index
  int64_t completes_ = 0;        // choices whose Complete came
  std::string pending_;          // SSE events not yet handed to the socket
};

}  // namespace

void StartGenerateCall(CoordinatorClient& client, std::shared_ptr<httpd::Exchange> exchange, OpenAiRequest request,
                       ResponseHead head) {
  std::make_shared<GenerateCall>(client, std::move(exchange), std::move(request), std::move(head))->Start();
}

}  // namespace tpserve::http
