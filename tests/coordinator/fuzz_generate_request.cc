// libFuzzer target: the request validator (coordinator/request.h) on arbitrary
// GenerateRequest / TokenizeRequest messages: the fuzz bytes are parsed with
// ParseFromArray (unparsable bytes are skipped), then validated and prepared as the
// Generation service does. Built only with -DTPSERVE_FUZZ=ON by clang (scripts/fuzz.sh).
//
// The tokenizer is the toy byte-level BPE of tests/tokenizer/toy_tokenizer.h plus the
// Llama 3 and ChatML control tokens as special added tokens. Invariants:
//  * a rejection is InvalidArgument whose message starts with the request field;
//  * ValidateRequestFields and PrepareRequest agree on the fields they both check;
//  * an accepted request has a prompt of 1 .. max_model_len - 1 ids inside the
//    vocabulary (the given ids themselves for prompt_token_ids), 1 <= max_tokens <=
//    what the prompt leaves, min_tokens <= max_tokens, stop strings and stop ids
//    within their limits, and sampling parameters the sampler accepts
//    (ValidateSamplingParams) equal to the request's where it sets them, token-level
//    controls within their limits (ValidateTokenControls);
//  * without allow_special_tokens_in_input, text cannot forge special tokens: a
//    chat prompt holds exactly the template's control tokens, a text prompt only BOS.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string_view>

#include "absl/strings/match.h"
#include "google/protobuf/stubs/logging.h"
#include "coordinator/request.h"
#include "tests/testing/fuzz_check.h"
#include "tests/tokenizer/toy_tokenizer.h"

namespace {

namespace v1 = tpserve::v1;
using tpserve::ChatFormat;
using tpserve::Tokenizer;

const Tokenizer& ChatToy() {
  static const Tokenizer* const toy = [] {
    nlohmann::json j = tpserve::testing::ToyTokenizerJson();
    int id = 400;
    for (const char* control : {"<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>",
                                "<|im_start|>", "<|im_end|>"}) {
      j["added_tokens"].push_back({{"id", id++},
                                   {"content", control},
                                   {"single_word", false},
                                   {"lstrip", false},
                                   {"rstrip", false},
                                   {"normalized", false},
                                   {"special", true}});
    }
    auto t = Tokenizer::FromJsonText(j.dump(), "toy+chat");
    TPSERVE_FUZZ_CHECK(t.ok());
    return t->release();
  }();
  return *toy;
}

// INVALID_ARGUMENT starting with a field's path and ": " (what tpserve-http
// turns into OpenAI's param: no space before the colon).
void RequireFieldError(const absl::Status& s) {
  TPSERVE_FUZZ_CHECK(s.code() == absl::StatusCode::kInvalidArgument);
  constexpr absl::string_view kFields[] = {"prompt",   "prompt_token_ids.ids", "chat", "sampling.", "stopping.",
                                           "logprobs", "n: ", "structured_output"};
  bool named = false;
  for (absl::string_view f : kFields) named = named || absl::StartsWith(s.message(), f);
  TPSERVE_FUZZ_CHECK(named);
  const size_t colon = s.message().find(": ");
  TPSERVE_FUZZ_CHECK(colon != absl::string_view::npos && s.message().substr(0, colon).find(' ') == absl::string_view::npos);
}

// Control tokens the rendering of a `messages`-long chat holds (generation prompt included).
size_t ControlTokens(ChatFormat format, size_t messages) {
  return format == ChatFormat::kLlama3 ? 1 + 3 * messages + 2 : 2 * messages + 1;
}

void CheckSampling(const v1::SamplingParams& s, const tpserve::SamplingParams& w) {
  TPSERVE_FUZZ_CHECK(tpserve::ValidateSamplingParams(w).ok());
  if (s.has_temperature()) TPSERVE_FUZZ_CHECK(w.temperature == s.temperature());
  if (s.has_top_p()) TPSERVE_FUZZ_CHECK(w.top_p == s.top_p());
  if (s.has_top_k()) TPSERVE_FUZZ_CHECK(w.top_k == s.top_k());
  if (s.has_min_p()) TPSERVE_FUZZ_CHECK(w.min_p == s.min_p());
  if (s.has_repetition_penalty()) TPSERVE_FUZZ_CHECK(w.repetition_penalty == s.repetition_penalty());
  if (s.has_seed()) TPSERVE_FUZZ_CHECK(w.seed == s.seed());
}

void CheckPrepared(const v1::GenerateRequest& r, const tpserve::PreparedRequest& p, const Tokenizer& t,
                   ChatFormat format, const tpserve::RequestLimits& limits) {
  const int64_t n = static_cast<int64_t>(p.prompt.size());
  TPSERVE_FUZZ_CHECK(n >= 1 && n < limits.max_model_len);
  size_t specials = 0;
  for (int32_t id : p.prompt) {
    TPSERVE_FUZZ_CHECK(id >= 0 && id < limits.vocab_size);
    specials += t.IsSpecial(id) ? 1 : 0;
  }
  if (r.has_prompt_token_ids()) {
    TPSERVE_FUZZ_CHECK(std::equal(p.prompt.begin(), p.prompt.end(), r.prompt_token_ids().ids().begin(),
                                  r.prompt_token_ids().ids().end()));
  } else if (!r.allow_special_tokens_in_input()) {
    TPSERVE_FUZZ_CHECK(specials == (r.has_chat() ? ControlTokens(format, r.chat().messages_size()) : 1));
  }
  TPSERVE_FUZZ_CHECK(p.stop.max_tokens >= 1 && p.stop.max_tokens <= limits.max_model_len - n);
  TPSERVE_FUZZ_CHECK(p.stop.min_tokens >= 0 && p.stop.min_tokens <= p.stop.max_tokens);
  TPSERVE_FUZZ_CHECK(p.stop.stop.size() <= static_cast<size_t>(tpserve::kMaxStopStrings));
  for (const std::string& s : p.stop.stop) TPSERVE_FUZZ_CHECK(!s.empty() && s.size() <= tpserve::kMaxStopStringBytes);
  for (int32_t id : p.stop.stop_token_ids) TPSERVE_FUZZ_CHECK(id >= 0 && id < limits.vocab_size);
  CheckSampling(r.sampling(), p.sampling);
  // Token-level controls: within their limits and the vocabulary, as the workers receive them.
  if (p.sampling.controls != nullptr) {
    TPSERVE_FUZZ_CHECK(tpserve::ValidateTokenControls(*p.sampling.controls, limits.vocab_size).ok());
    TPSERVE_FUZZ_CHECK(std::ssize(p.sampling.controls->logit_bias) == r.sampling().logit_bias_size());
  }
}

void CheckGenerate(const v1::GenerateRequest& r, ChatFormat format, const tpserve::RequestLimits& limits) {
  const Tokenizer& t = ChatToy();
  const absl::Status fields = tpserve::ValidateRequestFields(r, limits);
  if (!fields.ok()) RequireFieldError(fields);
  absl::StatusOr<tpserve::PreparedRequest> prepared = tpserve::PrepareRequest(r, t, format, limits);
  if (!prepared.ok()) {
    RequireFieldError(prepared.status());
    if (!fields.ok()) TPSERVE_FUZZ_CHECK(prepared.status() == fields);  // the same first complaint
    return;
  }
  TPSERVE_FUZZ_CHECK(fields.ok());
  CheckPrepared(r, *prepared, t, format, limits);
}

void CheckTokenize(const v1::TokenizeRequest& r, ChatFormat format) {
  const Tokenizer& t = ChatToy();
  absl::StatusOr<std::vector<int32_t>> ids = tpserve::EncodeTokenizeRequest(r, t, format);
  if (!ids.ok()) {
    RequireFieldError(ids.status());
    TPSERVE_FUZZ_CHECK(r.has_chat());
    return;
  }
  for (int32_t id : *ids) TPSERVE_FUZZ_CHECK(id >= 0 && id < t.vocab_size());
}

}  // namespace

// Bytes that do not parse are most inputs; protobuf's log line for each (invalid UTF-8
// in a string field) would only slow the fuzzer down.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const Tokenizer& t = ChatToy();
  // A short model with no generation defaults, and a long one with defaults.
  tpserve::RequestLimits small{.vocab_size = t.vocab_size(), .max_model_len = 48};
  tpserve::RequestLimits large{.vocab_size = t.vocab_size(), .max_model_len = 1 << 20};
  large.defaults = {.temperature = 0.7, .top_p = 0.9, .top_k = 50, .repetition_penalty = 1.1};
  v1::GenerateRequest request;
  if (request.ParseFromArray(data, static_cast<int>(size))) {
    CheckGenerate(request, ChatFormat::kLlama3, small);
    CheckGenerate(request, ChatFormat::kChatML, large);
  }
  v1::TokenizeRequest tokenize;
  if (tokenize.ParseFromArray(data, static_cast<int>(size))) {
    CheckTokenize(tokenize, ChatFormat::kLlama3);
    CheckTokenize(tokenize, ChatFormat::kChatML);
  }
  return 0;
}
