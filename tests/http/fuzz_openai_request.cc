// libFuzzer target: the OpenAI request parsers (http/openai_request.h) on
// arbitrary bytes as an HTTP body, and the response bodies built from what
// they accept. The first byte picks the parser (chat completions, completions,
// tokenize, detokenize); the rest is the body. Built only with -DTPSERVE_FUZZ=ON
// by clang (scripts/fuzz.sh). Invariants:
//  * nothing throws (nlohmann-json's exceptions included) and nothing crashes;
//  * a refusal is INVALID_ARGUMENT; when it names a field (OpenAiParam), the
//    message starts with "FIELD: ", and its HTTP status is 400;
//  * an accepted chat request has a Chat with messages and the generation
//    prompt; an accepted completion has an input and max_tokens (16 unless given);
//    log-probs are asked of the coordinator exactly when the answer shows them;
//  * the bodies built for an accepted request (full, streamed, usage) are one
//    SSE line each and parse back as JSON.
#include <cstdint>
#include <string>
#include "absl/strings/string_view.h"

#include "absl/strings/match.h"
#include "http/openai_request.h"
#include "http/openai_response.h"
#include "tests/testing/fuzz_check.h"

namespace {

namespace v1 = tpserve::v1;
using tpserve::http::Endpoint;

void CheckRefusal(const absl::Status& status, Endpoint endpoint) {
  TPSERVE_FUZZ_CHECK(status.code() == absl::StatusCode::kInvalidArgument);
  TPSERVE_FUZZ_CHECK(tpserve::http::ErrorOf(status, endpoint).status == 400);
  if (std::optional<std::string> param = tpserve::http::OpenAiParam(status, endpoint)) {
    TPSERVE_FUZZ_CHECK(absl::StartsWith(status.message(), *param + ": "));
  }
}

void CheckBodies(const tpserve::http::OpenAiRequest& r) {
  const tpserve::http::ResponseHead head{.endpoint = r.endpoint, .id = "x", .model = r.model,
                                         .include_usage = r.include_usage};
  v1::Complete complete;
  complete.set_finish_reason(v1::LENGTH);
  // The request's own strings (the model, the first stop string) as output text.
  const std::string text = r.model + (r.grpc.stopping().stop().empty() ? "" : r.grpc.stopping().stop(0));
  for (const nlohmann::json& body :
       {tpserve::http::FullResponse(head, text, nullptr, complete),
        tpserve::http::StreamChunk(head, text, true, nullptr, std::nullopt),
        tpserve::http::UsageChunk(head, complete.usage())}) {
    const std::string event = tpserve::http::SseEvent(body);
    TPSERVE_FUZZ_CHECK(event.find('\n') == event.size() - 2);
    TPSERVE_FUZZ_CHECK(!nlohmann::json::parse(event.substr(6), nullptr, false).is_discarded());
  }
}

void Generate(Endpoint endpoint, absl::string_view body) {
  absl::StatusOr<tpserve::http::OpenAiRequest> r = tpserve::http::ParseRequest(endpoint, body);
  if (!r.ok()) return CheckRefusal(r.status(), endpoint);
  if (endpoint == Endpoint::kChatCompletions) {
    TPSERVE_FUZZ_CHECK(r->grpc.has_chat() && r->grpc.chat().messages_size() > 0);
    TPSERVE_FUZZ_CHECK(r->grpc.chat().add_generation_prompt());
  } else {
    TPSERVE_FUZZ_CHECK(r->grpc.input_case() != v1::GenerateRequest::INPUT_NOT_SET && !r->grpc.has_chat());
    TPSERVE_FUZZ_CHECK(r->grpc.stopping().has_max_tokens());
  }
  TPSERVE_FUZZ_CHECK(r->logprobs == r->grpc.has_logprobs());
  TPSERVE_FUZZ_CHECK(!r->include_usage || r->stream);
  CheckBodies(*r);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const absl::string_view body(reinterpret_cast<const char*>(data) + 1, size - 1);
  std::string model;
  switch (data[0] % 4) {
    case 0: Generate(Endpoint::kChatCompletions, body); break;
    case 1: Generate(Endpoint::kCompletions, body); break;
    case 2: {
      absl::StatusOr<v1::TokenizeRequest> t = tpserve::http::ParseTokenizeRequest(body, &model);
      if (!t.ok()) CheckRefusal(t.status(), Endpoint::kCompletions);
      if (t.ok()) TPSERVE_FUZZ_CHECK(t->input_case() != v1::TokenizeRequest::INPUT_NOT_SET);
      break;
    }
    default: {
      absl::StatusOr<v1::DetokenizeRequest> d = tpserve::http::ParseDetokenizeRequest(body, &model);
      if (!d.ok()) CheckRefusal(d.status(), Endpoint::kCompletions);
      break;
    }
  }
  return 0;
}
