// Issue 33, item 4: every INVALID_ARGUMENT the public API answers to a bad
// Generate, Tokenize or Detokenize request starts with the field's path and
// ": " ("stopping.stop[1]: is empty; ..."), which tpserve-http turns into
// OpenAI's `param` (http/OpenAiParam). A table of bad requests goes through a
// real GenerationService on loopback (wire parsing, Submit's checks,
// PrepareRequest, the chat template), so no rejection on the way is missed;
// the built-in chat formats, which the served model here does not use, go
// through PrepareRequest itself. Item 5 rides along: a chat nested 100,000
// deep (tools_json, kwargs, tool call arguments) is refused, not a crash.
#include <gtest/gtest.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <functional>
#include <memory>
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "coordinator/engine_loop.h"
#include "coordinator/generation_service.h"
#include "coordinator/request.h"
#include "tests/testing/fake_worker.h"
#include "tests/tokenizer/toy_tokenizer.h"
#include "tpserve/v1/generation.grpc.pb.h"

namespace tpserve {
namespace {

namespace v1 = tpserve::v1;
namespace iv1 = tpserve::internal::v1;

constexpr int32_t kMaxMessages = 8;  // --max-chat-messages here
constexpr int32_t kPaddingIds = 8;   // the model's rows past the tokenizer's vocabulary

// "FIELD: ..." where FIELD is a proto field path: names, each maybe indexed
// ([3], ["key"]), joined by dots.
const std::regex kFieldPath(R"(^[a-z_]+(\[[^\] ]+\])?(\.[a-z_]+(\[[^\] ]+\])?)*: )");

void ExpectFieldError(const grpc::Status& status, const std::string& field, const std::string& what) {
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << what << ": " << status.error_message();
  EXPECT_EQ(status.error_message().rfind(field + ": ", 0), 0u)
      << what << ": does not start with \"" << field << ": \": " << status.error_message();
  EXPECT_TRUE(std::regex_search(status.error_message(), kFieldPath)) << what << ": " << status.error_message();
}

std::string Nested(int depth) { return std::string(depth, '[') + std::string(depth, ']'); }

class RequestErrorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto tok = Tokenizer::FromJsonText(testing::ToyTokenizerJson().dump(), "toy");
    ASSERT_TRUE(tok.ok()) << tok.status();
    tokenizer_ = std::move(*tok);
    // A template that takes tools and kwargs, and raises on one content.
    absl::StatusOr<ChatTemplate> chat = ChatTemplate::FromJinja(
        "{% for m in messages %}{% if m.content == 'boom' %}{{ raise_exception('no booms') }}{% endif %}"
        "{{ m.role }}: {{ m.content }}\n{% endfor %}{{ tools | length if tools }}{{ extra | default('') }}",
        nlohmann::ordered_json::object(), {});
    ASSERT_TRUE(chat.ok()) << chat.status();
    RequestLimits limits;
    limits.vocab_size = tokenizer_->vocab_size() + kPaddingIds;  // a model with padding rows
    limits.max_model_len = 64;
    limits.max_chat_messages = kMaxMessages;
    EngineLoopOptions o;
    o.scheduler = {.max_num_batched_tokens = 64, .max_num_seqs = 4, .max_queue = 16};
    o.num_blocks = 64;
    o.block_size = 4;
    o.max_model_len = 64;
    o.on_retired = [this](const std::string& client, const std::string& id) { groups_->OnRetired(client, id); };
    engine_ = std::make_unique<EngineLoop>(*tokenizer_, o, Transport());
    groups_ = std::make_unique<EngineGroups>(std::vector<EngineLoop*>{engine_.get()}, router_);
    engine_->Start();
    service_ = std::make_unique<GenerationService>(*tokenizer_, *chat, limits, ServiceInfo{});
    service_->SetEngine(groups_.get(), {"rank 0: fake"}, "cpu");
    service_->SetAvailability(absl::OkStatus());
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    channel_ = grpc::CreateChannel(absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials());
    stub_ = v1::Generation::NewStub(channel_);
  }
  void TearDown() override {
    if (server_) server_->Shutdown();
    engine_.reset();
  }

  // The workers: each step runs on a FakeStepWorker as it is sent.
  StepTransport Transport() {
    return {.send = [this](iv1::Step step) -> absl::StatusOr<uint64_t> {
              results_.push_back(testing_util::RunFakeStep(model_, step));
              return results_.size() - 1;
            },
            .receive = [this](uint64_t ticket) { return results_.at(ticket); }};
  }

  static v1::GenerateRequest Valid() {
    v1::GenerateRequest r;
    r.set_prompt("abc");
    r.mutable_stopping()->set_max_tokens(2);
    return r;
  }
  static v1::GenerateRequest ValidChat() {
    v1::GenerateRequest r = Valid();
    r.mutable_chat()->add_messages()->set_role("user");
    r.mutable_chat()->mutable_messages(0)->set_content("hi");
    return r;
  }

  grpc::Status Generate(const v1::GenerateRequest& r) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    auto reader = stub_->Generate(&context, r);
    v1::GenerateResponse response;
    while (reader->Read(&response)) {
    }
    return reader->Finish();
  }
  grpc::Status Tokenize(const v1::TokenizeRequest& r) {
    grpc::ClientContext context;
    v1::TokenizeResponse response;
    return stub_->Tokenize(&context, r, &response);
  }
  grpc::Status Detokenize(const v1::DetokenizeRequest& r) {
    grpc::ClientContext context;
    v1::DetokenizeResponse response;
    return stub_->Detokenize(&context, r, &response);
  }
  // `r` serialized with the bytes of `placeholder` (which it holds once)
  // replaced by as many that are not UTF-8, sent as Generate's request.
  grpc::Status GenerateWithInvalidUtf8(const v1::GenerateRequest& r, const std::string& placeholder) {
    std::string bytes = r.SerializeAsString();
    const size_t at = bytes.find(placeholder);
    EXPECT_NE(at, std::string::npos);
    for (size_t i = 0; i < placeholder.size(); ++i) bytes[at + i] = '\xe9';
    grpc::GenericStub generic(channel_);
    grpc::ClientContext context;
    grpc::CompletionQueue cq;
    void* tag;
    bool ok;
    auto call = generic.PrepareCall(&context, "/tpserve.v1.Generation/Generate", &cq);
    call->StartCall(reinterpret_cast<void*>(1));
    EXPECT_TRUE(cq.Next(&tag, &ok));
    grpc::Slice slice(bytes);
    grpc::ByteBuffer request(&slice, 1);
    call->WriteLast(request, grpc::WriteOptions(), reinterpret_cast<void*>(2));
    EXPECT_TRUE(cq.Next(&tag, &ok));
    grpc::Status status;
    call->Finish(&status, reinterpret_cast<void*>(3));
    EXPECT_TRUE(cq.Next(&tag, &ok));
    return status;
  }

  std::unique_ptr<Tokenizer> tokenizer_;
  testing_util::FakeStepWorker model_;  // the engine thread's only
  std::vector<absl::StatusOr<iv1::StepResult>> results_;  // by ticket (engine thread)
  DpRouter router_{DpRouterOptions{.groups = 1, .block_size = 4}};  // one group, as the coordinator runs
  std::unique_ptr<EngineGroups> groups_;  // before engine_: outlives it
  std::unique_ptr<EngineLoop> engine_;
  std::unique_ptr<GenerationService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Generation::Stub> stub_;
};

struct GenerateCase {
  std::string field;  // the path the message must start with
  std::function<void(v1::GenerateRequest&)> edit;
};

// Every check of a Generate request, each made to fail once.
std::vector<GenerateCase> GenerateCases() {
  auto chat = [](v1::GenerateRequest& r) -> v1::Chat& { return *r.mutable_chat(); };
  auto tool_call = [chat](v1::GenerateRequest& r, const std::string& arguments) {
    v1::ChatMessage* a = chat(r).add_messages();
    a->set_role("assistant");
    v1::ToolCall* c = a->add_tool_calls();
    c->set_name("f");
    c->set_arguments(arguments);
  };
  return {
      {"prompt", [](auto& r) { r.clear_input(); }},
      {"prompt", [](auto& r) { r.set_prompt(""); }},
      {"prompt", [](auto& r) { r.set_prompt(std::string(100, 'x')); }},  // past max_model_len 64
      {"prompt_token_ids.ids", [](auto& r) { r.mutable_prompt_token_ids(); }},
      {"prompt_token_ids.ids[1]", [](auto& r) {
         r.mutable_prompt_token_ids()->add_ids(1);
         r.mutable_prompt_token_ids()->add_ids(100000);
       }},
      {"sampling.temperature", [](auto& r) { r.mutable_sampling()->set_temperature(-1); }},
      {"sampling.top_p", [](auto& r) { r.mutable_sampling()->set_top_p(0); }},
      {"sampling.top_k", [](auto& r) { r.mutable_sampling()->set_top_k(-3); }},
      {"sampling.min_p", [](auto& r) { r.mutable_sampling()->set_min_p(2); }},
      {"sampling.repetition_penalty", [](auto& r) { r.mutable_sampling()->set_repetition_penalty(0); }},
      {"sampling.presence_penalty", [](auto& r) { r.mutable_sampling()->set_presence_penalty(3); }},
      {"sampling.frequency_penalty", [](auto& r) { r.mutable_sampling()->set_frequency_penalty(-3); }},
      {"sampling.logit_bias[5]", [](auto& r) { (*r.mutable_sampling()->mutable_logit_bias())[5] = 100.5f; }},
      {"sampling.logit_bias[100000]", [](auto& r) { (*r.mutable_sampling()->mutable_logit_bias())[100000] = 1; }},
      {"sampling.logit_bias", [](auto& r) {
         for (uint32_t t = 0; t <= static_cast<uint32_t>(kMaxLogitBias); ++t) (*r.mutable_sampling()->mutable_logit_bias())[t] = 1;
       }},
      {"sampling.allowed_token_ids[1]", [](auto& r) {
         r.mutable_sampling()->add_allowed_token_ids(3);
         r.mutable_sampling()->add_allowed_token_ids(100000);
       }},
      {"sampling.bad_words[0]", [](auto& r) { r.mutable_sampling()->add_bad_words("  "); }},
      {"sampling.bad_words", [](auto& r) { for (int i = 0; i <= kMaxBadWords; ++i) r.mutable_sampling()->add_bad_words("a"); }},
      {"sampling.bad_words", [](auto& r) {  // too many tokens together
         for (int i = 0; i < 2; ++i) r.mutable_sampling()->add_bad_words(std::string(kMaxBadWordTokens, 'q'));
       }},
      {"stopping.max_tokens", [](auto& r) { r.mutable_stopping()->set_max_tokens(0); }},
      {"stopping.max_tokens", [](auto& r) { r.mutable_stopping()->set_max_tokens(1000); }},
      {"stopping.min_tokens", [](auto& r) { r.mutable_stopping()->set_min_tokens(3); }},  // > max_tokens 2
      {"stopping.stop", [](auto& r) { for (int i = 0; i <= kMaxStopStrings; ++i) r.mutable_stopping()->add_stop("s"); }},
      {"stopping.stop[0]", [](auto& r) { r.mutable_stopping()->add_stop(std::string(kMaxStopStringBytes + 1, 's')); }},
      {"stopping.stop[1]", [](auto& r) {  // the issue's "stop[0] is empty", which had no colon
         r.mutable_stopping()->add_stop("ok");
         r.mutable_stopping()->add_stop("");
       }},
      {"stopping.stop_token_ids[0]", [](auto& r) { r.mutable_stopping()->add_stop_token_ids(100000); }},
      {"logprobs", [](auto& r) { r.set_logprobs(kMaxLogprobs + 1); }},
      {"prompt_logprobs", [](auto& r) { r.set_prompt_logprobs(kMaxLogprobs + 1); }},
      {"request_id", [](auto& r) { r.set_request_id(std::string(kMaxRequestIdBytes + 1, 'r')); }},
      {"chat.messages", [chat](auto& r) { chat(r).clear_messages(); }},
      {"chat.messages", [chat](auto& r) {  // --max-chat-messages
         for (int i = 0; i < kMaxMessages; ++i) chat(r).add_messages()->set_role("user");
       }},
      {"chat.messages[1].role", [chat](auto& r) { chat(r).add_messages()->set_role("wizard"); }},
      {"chat.messages", [chat](auto& r) { chat(r).mutable_messages(0)->set_content("boom"); }},  // raise_exception
      {"chat.messages", [chat](auto& r) { chat(r).mutable_messages(0)->set_content(std::string(100, 'x')); }},
      {"chat.tools_json", [chat](auto& r) { chat(r).set_tools_json("[{"); }},
      {"chat.tools_json", [chat](auto& r) { chat(r).set_tools_json("{}"); }},
      {"chat.tools_json", [chat](auto& r) { chat(r).set_tools_json(Nested(100000)); }},  // no stack overflow
      {"chat.tools_json", [chat](auto& r) {  // more values than kMaxChatJsonValues
         std::string many = "[";
         for (int64_t i = 0; i <= kMaxChatJsonValues; ++i) many += i == 0 ? "0" : ",0";
         chat(r).set_tools_json(many + "]");
       }},
      {"chat.chat_template_kwargs[\"extra\"]", [chat](auto& r) { (*chat(r).mutable_chat_template_kwargs())["extra"] = "nope"; }},
      {"chat.chat_template_kwargs[\"extra\"]", [chat](auto& r) {
         (*chat(r).mutable_chat_template_kwargs())["extra"] = Nested(100000);
       }},
      {"chat.chat_template_kwargs", [chat](auto& r) { (*chat(r).mutable_chat_template_kwargs())["messages"] = "1"; }},
      {"chat.chat_template_kwargs", [chat](auto& r) {  // a key that is no plain name stays out of the path
         (*chat(r).mutable_chat_template_kwargs())["a b: c"] = "nope";
       }},
      {"chat.messages[1].tool_calls[0].arguments", [tool_call](auto& r) {
         tool_call(r, absl::StrCat("{\"a\": ", Nested(100000), "}"));
       }},
  };
}

TEST_F(RequestErrorsTest, EveryGenerateRejectionStartsWithItsFieldPath) {
  ASSERT_TRUE(Generate(Valid()).ok());  // the table's failures are its edits'
  ASSERT_TRUE(Generate(ValidChat()).ok());
  for (const GenerateCase& c : GenerateCases()) {
    v1::GenerateRequest r = c.field.rfind("chat.", 0) == 0 ? ValidChat() : Valid();
    c.edit(r);
    ExpectFieldError(Generate(r), c.field, c.field);
  }
  // Text that is not UTF-8 is named by its path, as far as protobuf says it.
  v1::GenerateRequest r = Valid();
  r.set_prompt("PLACEHOLDER");
  ExpectFieldError(GenerateWithInvalidUtf8(r, "PLACEHOLDER"), "prompt", "invalid UTF-8 prompt");
  r = ValidChat();
  r.mutable_chat()->mutable_messages(0)->set_content("PLACEHOLDER");
  ExpectFieldError(GenerateWithInvalidUtf8(r, "PLACEHOLDER"), "chat.messages.content", "invalid UTF-8 content");
  EXPECT_TRUE(Generate(ValidChat()).ok()) << "the service is still fine";
}

TEST_F(RequestErrorsTest, TokenizeAndDetokenizeRejectionsStartWithTheirFieldPath) {
  v1::TokenizeRequest t;
  t.mutable_chat();
  ExpectFieldError(Tokenize(t), "chat.messages", "an empty chat");
  for (int i = 0; i <= kMaxMessages; ++i) t.mutable_chat()->add_messages()->set_role("user");
  ExpectFieldError(Tokenize(t), "chat.messages", "a chat past --max-chat-messages");
  t.mutable_chat()->mutable_messages()->DeleteSubrange(1, kMaxMessages);
  t.mutable_chat()->set_tools_json(Nested(100000));
  ExpectFieldError(Tokenize(t), "chat.tools_json", "tools nested 100,000 deep");
  t.mutable_chat()->clear_tools_json();
  EXPECT_TRUE(Tokenize(t).ok());

  v1::DetokenizeRequest d;
  d.add_token_ids(1);
  d.add_token_ids(100000);
  ExpectFieldError(Detokenize(d), "token_ids", "an id outside the vocabulary");
  d.set_token_ids(1, static_cast<uint32_t>(tokenizer_->vocab_size() + kPaddingIds));
  ExpectFieldError(Detokenize(d), "token_ids", "the first id past the model's padding rows");
}

// The model's padding rows (past the tokenizer, within the model's
// vocabulary) can be a log-prob's top token: they decode as nothing, so
// tpserve-http's log-probs do not fail on them.
TEST_F(RequestErrorsTest, PaddingIdsDecodeAsNothing) {
  v1::DetokenizeRequest d;
  d.set_pieces(true);
  d.add_token_ids('a');
  d.add_token_ids(static_cast<uint32_t>(tokenizer_->vocab_size()));
  d.add_token_ids('b');
  d.add_token_ids(static_cast<uint32_t>(tokenizer_->vocab_size() + kPaddingIds - 1));
  grpc::ClientContext context;
  v1::DetokenizeResponse response;
  ASSERT_TRUE(stub_->Detokenize(&context, d, &response).ok());
  EXPECT_EQ(response.text(), "ab");
  ASSERT_EQ(response.pieces_size(), 4);
  EXPECT_EQ(response.pieces(0), "a");
  EXPECT_EQ(response.pieces(1), "");
  EXPECT_EQ(response.pieces(2), "b");
  EXPECT_EQ(response.pieces(3), "");
}

// The message cap names the limit and the flag.
TEST_F(RequestErrorsTest, TooManyMessagesNameTheLimitAndTheFlag) {
  v1::GenerateRequest r = ValidChat();
  for (int i = 0; i < 100000; ++i) r.mutable_chat()->add_messages()->set_role("user");
  const grpc::Status s = Generate(r);
  ExpectFieldError(s, "chat.messages", "100,000 messages");
  EXPECT_NE(s.error_message().find(absl::StrCat("limit of ", kMaxMessages, " (--max-chat-messages)")),
            std::string::npos)
      << s.error_message();
}

// The built-in formats' own refusals (the served model above has a template).
TEST(BuiltinChatErrorsTest, StartWithTheirFieldPath) {
  auto tok = Tokenizer::FromJsonText(testing::ToyTokenizerJson().dump(), "toy");
  ASSERT_TRUE(tok.ok()) << tok.status();
  RequestLimits limits;
  limits.vocab_size = (*tok)->vocab_size();
  limits.max_model_len = 64;
  auto chat = [](std::vector<std::string> roles) {
    v1::GenerateRequest r;
    for (const std::string& role : roles) {
      r.mutable_chat()->add_messages()->set_role(role);
      r.mutable_chat()->mutable_messages()->rbegin()->set_content("x");
    }
    return r;
  };
  struct Case {
    std::string field;
    v1::GenerateRequest request;
  };
  std::vector<Case> cases = {{"chat.messages[1].role", chat({"user", "system"})},
                             {"chat.messages[1].role", chat({"user", "tool"})},
                             {"chat.tools_json", chat({"user"})}};
  cases.back().request.mutable_chat()->set_tools_json("[{\"type\": \"function\"}]");
  for (ChatFormat format : {ChatFormat::kChatML, ChatFormat::kLlama3}) {
    for (const Case& c : cases) {
      absl::StatusOr<PreparedRequest> got = PrepareRequest(c.request, **tok, format, limits);
      ASSERT_FALSE(got.ok()) << c.field;
      ExpectFieldError(grpc::Status(grpc::StatusCode(static_cast<int>(got.status().code())),
                                    std::string(got.status().message())),
                       c.field, c.field);
    }
  }
  v1::TokenizeRequest t;
  *t.mutable_chat() = chat({"user"}).chat();
  absl::StatusOr<std::vector<int32_t>> ids = EncodeTokenizeRequest(t, **tok, absl::NotFoundError("no template"));
  ASSERT_FALSE(ids.ok());
  ExpectFieldError(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, std::string(ids.status().message())), "chat",
                   "an unknown chat format");
  EXPECT_EQ(ids.status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tpserve
