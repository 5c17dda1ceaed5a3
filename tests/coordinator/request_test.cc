// Request validation: every invalid field is INVALID_ARGUMENT whose message
// starts with the field's name; valid requests resolve their defaults.
#include "coordinator/request.h"

#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>

#include "tests/tokenizer/toy_tokenizer.h"

namespace tpserve {
namespace {

namespace v1 = tpserve::v1;

class RequestTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto tok = Tokenizer::FromJsonText(testing::ToyTokenizerJson().dump(), "toy");
    ASSERT_TRUE(tok.ok()) << tok.status();
    tokenizer_ = std::move(*tok);
    limits_.vocab_size = tokenizer_->vocab_size();
    limits_.max_model_len = 64;
  }

  static v1::GenerateRequest Valid() {
    v1::GenerateRequest r;
    r.set_prompt("abc abc");
    return r;
  }

  // Applies `edit` to a valid request; expects INVALID_ARGUMENT starting with `field`.
  void ExpectInvalid(const std::function<void(v1::GenerateRequest&)>& edit, const std::string& field) {
    v1::GenerateRequest r = Valid();
    edit(r);
    absl::StatusOr<PreparedRequest> got = PrepareRequest(r, *tokenizer_, ChatFormat::kChatML, limits_);
    ASSERT_FALSE(got.ok()) << "accepted a request with a bad " << field;
    EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument) << got.status();
    EXPECT_EQ(std::string(got.status().message()).rfind(field, 0), 0u)
        << "message does not start with " << field << ": " << got.status().message();
  }

  std::unique_ptr<Tokenizer> tokenizer_;
  RequestLimits limits_;
};

TEST_F(RequestTest, ValidTextPromptIsTokenizedWithSpecialTokens) {
  absl::StatusOr<PreparedRequest> got = PrepareRequest(Valid(), *tokenizer_, ChatFormat::kChatML, limits_);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->prompt, tokenizer_->Encode("abc abc", true));
  EXPECT_EQ(got->prompt.front(), testing::kBos);
  EXPECT_EQ(got->stop.max_tokens, 64 - static_cast<int64_t>(got->prompt.size()));
  EXPECT_FLOAT_EQ(got->sampling.temperature, 1.0f);
  EXPECT_FLOAT_EQ(got->sampling.top_p, 1.0f);
  EXPECT_EQ(got->sampling.top_k, -1);
  EXPECT_FALSE(got->sampling.seed.has_value());
  EXPECT_EQ(got->sampling.logprobs, -1);
}

TEST_F(RequestTest, TokenIdsAndSamplingPassThrough) {
  v1::GenerateRequest r;
  for (uint32_t id : {5u, 300u, 7u}) r.mutable_prompt_token_ids()->add_ids(id);
  r.mutable_sampling()->set_temperature(0);
  r.mutable_sampling()->set_top_k(7);
  r.mutable_sampling()->set_seed(1234);
  r.mutable_stopping()->set_max_tokens(11);
  r.mutable_stopping()->add_stop("zz");
  r.mutable_stopping()->add_stop_token_ids(3);
  r.mutable_stopping()->set_ignore_eos(true);
  r.set_logprobs(3);
  absl::StatusOr<PreparedRequest> got = PrepareRequest(r, *tokenizer_, ChatFormat::kChatML, limits_);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->prompt, (std::vector<int32_t>{5, 300, 7}));
  EXPECT_FLOAT_EQ(got->sampling.temperature, 0.0f);
  EXPECT_EQ(got->sampling.top_k, 7);
  EXPECT_TRUE(got->sampling.seed.has_value());
  EXPECT_EQ(got->sampling.seed.value_or(0), 1234u);
  EXPECT_EQ(got->sampling.logprobs, 3);
  EXPECT_EQ(got->stop.max_tokens, 11);
  EXPECT_EQ(got->stop.stop, (std::vector<std::string>{"zz"}));
  EXPECT_EQ(got->stop.stop_token_ids, (std::vector<int32_t>{3}));
  EXPECT_TRUE(got->stop.ignore_eos);
}

TEST_F(RequestTest, GenerationConfigDefaultsFillUnsetFields) {
  limits_.defaults.temperature = 0.6;
  limits_.defaults.top_p = 0.9;
  limits_.defaults.top_k = 20;
  v1::GenerateRequest r = Valid();
  r.mutable_sampling()->set_top_p(0.5f);
  absl::StatusOr<PreparedRequest> got = PrepareRequest(r, *tokenizer_, ChatFormat::kChatML, limits_);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_FLOAT_EQ(got->sampling.temperature, 0.6f);
  EXPECT_FLOAT_EQ(got->sampling.top_p, 0.5f);  // given: the default does not apply
  EXPECT_EQ(got->sampling.top_k, 20);
}

TEST_F(RequestTest, ChatIsRenderedAndEncodedWithoutAddingSpecialTokens) {
  v1::GenerateRequest r;
  auto* m = r.mutable_chat()->add_messages();
  m->set_role("user");
  m->set_content("abc");
  absl::StatusOr<PreparedRequest> got = PrepareRequest(r, *tokenizer_, ChatFormat::kChatML, limits_);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->prompt, tokenizer_->Encode("<|im_start|>user\nabc<|im_end|>\n<|im_start|>assistant\n", false));
  EXPECT_NE(got->prompt.front(), testing::kBos);
}

TEST_F(RequestTest, EachInvalidFieldIsNamed) {
  ExpectInvalid([](auto& r) { r.clear_input(); }, "prompt");
  ExpectInvalid([](auto& r) { r.set_prompt(""); }, "prompt");
  ExpectInvalid([](auto& r) { r.set_prompt(std::string(80, 'x')); }, "prompt");  // longer than 64
  ExpectInvalid([](auto& r) { r.mutable_prompt_token_ids(); }, "prompt_token_ids.ids");
  ExpectInvalid([](auto& r) { r.mutable_prompt_token_ids()->add_ids(1); r.mutable_prompt_token_ids()->add_ids(306); },
                "prompt_token_ids.ids[1]");
  ExpectInvalid([](auto& r) { for (int i = 0; i < 64; ++i) r.mutable_prompt_token_ids()->add_ids(1); },
                "prompt_token_ids.ids");
  ExpectInvalid([](auto& r) { r.mutable_chat(); }, "chat.messages");
  ExpectInvalid([](auto& r) { auto* m = r.mutable_chat()->add_messages(); m->set_role("robot"); },
                "chat.messages[0].role");
  ExpectInvalid([](auto& r) {
                  r.mutable_chat()->add_messages()->set_role("user");
                  r.mutable_chat()->add_messages()->set_role("system");
                },
                "chat.messages[1].role");
  ExpectInvalid([](auto& r) { r.mutable_sampling()->set_temperature(-0.5f); }, "sampling.temperature");
  ExpectInvalid([](auto& r) { r.mutable_sampling()->set_temperature(std::nanf("")); }, "sampling.temperature");
  ExpectInvalid([](auto& r) { r.mutable_sampling()->set_top_p(0.0f); }, "sampling.top_p");
  ExpectInvalid([](auto& r) { r.mutable_sampling()->set_top_p(1.01f); }, "sampling.top_p");
  ExpectInvalid([](auto& r) { r.mutable_sampling()->set_top_k(-2); }, "sampling.top_k");
  ExpectInvalid([](auto& r) { r.mutable_sampling()->set_min_p(1.5f); }, "sampling.min_p");
  ExpectInvalid([](auto& r) { r.mutable_sampling()->set_min_p(-0.1f); }, "sampling.min_p");
  ExpectInvalid([](auto& r) { r.mutable_sampling()->set_repetition_penalty(0.0f); }, "sampling.repetition_penalty");
  ExpectInvalid([](auto& r) { r.mutable_sampling()->set_presence_penalty(2.5f); }, "sampling.presence_penalty");
  ExpectInvalid([](auto& r) { r.mutable_sampling()->set_frequency_penalty(-3.0f); }, "sampling.frequency_penalty");
  ExpectInvalid([](auto& r) { r.mutable_stopping()->set_max_tokens(0); }, "stopping.max_tokens");
  ExpectInvalid([](auto& r) { r.mutable_stopping()->set_max_tokens(64); }, "stopping.max_tokens");  // above the room left
  ExpectInvalid([](auto& r) { r.mutable_stopping()->set_max_tokens(3); r.mutable_stopping()->set_min_tokens(4); },
                "stopping.min_tokens");
  ExpectInvalid([](auto& r) { for (int i = 0; i <= kMaxStopStrings; ++i) r.mutable_stopping()->add_stop("s"); },
                "stopping.stop");
  ExpectInvalid([](auto& r) { r.mutable_stopping()->add_stop(std::string(kMaxStopStringBytes + 1, 's')); },
                "stopping.stop[0]");
  ExpectInvalid([](auto& r) { r.mutable_stopping()->add_stop(""); }, "stopping.stop[0]");
  ExpectInvalid([](auto& r) { r.mutable_stopping()->add_stop_token_ids(9999); }, "stopping.stop_token_ids[0]");
  ExpectInvalid([](auto& r) { r.set_logprobs(21); }, "logprobs");
}

TEST_F(RequestTest, LimitsAreInclusive) {
  v1::GenerateRequest r = Valid();
  const int64_t n = static_cast<int64_t>(tokenizer_->Encode("abc abc", true).size());
  r.mutable_stopping()->set_max_tokens(static_cast<uint32_t>(64 - n));  // exactly the room left
  r.mutable_sampling()->set_top_p(1.0f);
  r.mutable_sampling()->set_top_k(-1);
  r.mutable_sampling()->set_temperature(0.0f);
  r.set_logprobs(20);
  EXPECT_TRUE(PrepareRequest(r, *tokenizer_, ChatFormat::kChatML, limits_).ok());
}

}  // namespace
}  // namespace tpserve
