// End to end, real processes: tpserve-http in front of a CPU coordinator with a
// tiny random model. curl checks the SSE framing byte for byte and that bad
// input gets a 4xx while the server stays up; the official OpenAI Node client
// (npm `openai`, installed by scripts/fetch-openai-client.sh into a cache
// outside the tree; skipped with a message when npm cannot fetch it) checks
// the API as its users see it, against expectations computed here over gRPC.
#include <sys/stat.h>

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "nlohmann/json.hpp"
#include "tests/e2e/harness.h"

namespace tpserve::e2e {
namespace {

namespace v1 = tpserve::v1;
using nlohmann::json;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

struct HttpReply {
  int status = 0;
  std::string body;
};

// The chunks of one gRPC Generate call: each chunk's text, then the Complete.
struct GrpcStream {
  std::vector<std::string> texts;
  std::vector<uint32_t> ids;
  v1::Complete complete;
  v1::PromptLogprobs prompt;  // the first chunk's prompt log-probs
  int chunks_with_prompt = 0;
};

GrpcStream ReadStream(v1::Generation::Stub& stub, const v1::GenerateRequest& request) {
  GrpcStream out;
  grpc::ClientContext context;
  auto reader = stub.Generate(&context, request);
  v1::GenerateResponse r;
  while (reader->Read(&r)) {
    if (r.has_chunk()) {
      if (r.chunk().has_prompt_logprobs() && out.chunks_with_prompt++ == 0) out.prompt = r.chunk().prompt_logprobs();
      out.texts.push_back(r.chunk().text());
      out.ids.insert(out.ids.end(), r.chunk().token_ids().begin(), r.chunk().token_ids().end());
    }
    if (r.has_complete()) out.complete = r.complete();
  }
  EXPECT_TRUE(reader->Finish().ok());
  return out;
}

class HttpTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    // 32k positions: room for a request long enough that only an abort ends it
    // within the abort test's window.
    const std::string model = MakeModel(dir_->path(), "qwen3", {"--seed", "5", "--max-pos", "32768"});
    // A client that stops reading is not cut off (--max-buffered-chunks), so in
    // the abort test only the cancellation can end the request early.
    coordinator_ = new Coordinator(StartCoordinator(model, 1, dir_->path() + "/coordinator.log",
                                                    {"--max-buffered-chunks", "1000000"}));
    if (coordinator_->process == nullptr) return;
    http_ = StartHttp(coordinator_->address, {"--max-body-bytes", "65536"}, "http", &base_).release();
  }
  static std::unique_ptr<Process> StartHttp(const std::string& server, const std::vector<std::string>& extra,
                                            const std::string& name, std::string* base) {
    return e2e::StartHttp(server, extra, absl::StrCat(dir_->path(), "/", name, ".log"), base);
  }
  static void TearDownTestSuite() {
    delete http_;
    delete coordinator_;
    delete dir_;
  }
  void SetUp() override {
    ASSERT_NE(coordinator_->process, nullptr) << "the coordinator did not start";
    ASSERT_FALSE(base_.empty()) << "tpserve-http did not start:\n" << http_->Log();
  }

  // curl with `args` (after the URL path); the status and the body.
  static HttpReply Curl(const std::string& path, const std::vector<std::string>& args) {
    return CurlAt(base_, path, args);
  }
  static HttpReply CurlAt(const std::string& base, const std::string& path, const std::vector<std::string>& args) {
    static int n = 0;
    const std::string body = absl::StrCat(dir_->path(), "/curl-", ++n, ".body");
    const std::string out = absl::StrCat(dir_->path(), "/curl-", n, ".out");
    std::vector<std::string> argv = {"curl", "-sS", "-o", body, "-w", "%{http_code}", base + path};
    argv.insert(argv.end(), args.begin(), args.end());
    EXPECT_EQ(RunCommand(argv, out), 0) << ReadFile(out);
    HttpReply reply;
    EXPECT_TRUE(absl::SimpleAtoi(ReadFile(out), &reply.status)) << ReadFile(out);
    reply.body = ReadFile(body);
    return reply;
  }
  static HttpReply Post(const std::string& path, const std::string& json_body) {
    return Curl(path, {"-H", "Content-Type: application/json", "--data-binary", json_body});
  }

  static TempDir* dir_;
  static Coordinator* coordinator_;
  static Process* http_;
  static std::string base_;
};
TempDir* HttpTest::dir_ = nullptr;
Coordinator* HttpTest::coordinator_ = nullptr;
Process* HttpTest::http_ = nullptr;
std::string HttpTest::base_;

// `curl -N` on a short greedy stream: exactly the events OpenAI sends, one
// `data:` line per gRPC chunk with that chunk's text, then the finish and
// [DONE]. How tokens group into chunks depends on timing (the coordinator
// merges chunks a slow writer left waiting: coordinator/response_queue.h), so
// the events are checked one by one, byte for byte, and their texts together
// against the gRPC stream's text.
TEST_F(HttpTest, CurlSseFramingByteForByte) {
  v1::GenerateRequest greedy = Greedy(5);
  for (uint32_t id : {1u, 2u, 3u, 4u}) greedy.mutable_prompt_token_ids()->add_ids(id);
  greedy.set_skip_special_tokens(true);
  const GrpcStream expected = ReadStream(*coordinator_->stub, greedy);
  ASSERT_EQ(expected.ids.size(), 5u);

  const std::string headers = dir_->path() + "/sse.headers";
  const HttpReply reply = Curl("/v1/completions",
                               {"-N", "-D", headers, "-H", "Content-Type: application/json", "--data-binary",
                                R"({"model": "qwen3", "prompt": [1, 2, 3, 4], "max_tokens": 5, "temperature": 0,
                                    "ignore_eos": true, "stream": true})"});
  ASSERT_EQ(reply.status, 200) << reply.body;
  EXPECT_NE(ReadFile(headers).find("Content-Type: text/event-stream"), std::string::npos) << ReadFile(headers);
  std::smatch m;
  ASSERT_TRUE(std::regex_search(reply.body, m, std::regex(R"re("created":(\d+),"id":"(cmpl-req-[0-9a-f]{32})")re")))
      << reply.body;
  const std::string tail = absl::StrCat(R"("created":)", m[1].str(), R"(,"id":")", m[2].str(),
                                        R"(","model":"qwen3","object":"text_completion"})", "\n\n");
  const std::string finish = absl::StrCat(
      R"(data: {"choices":[{"finish_reason":"length","index":0,"logprobs":null,"text":""}],)", tail,
      "data: [DONE]\n\n");
  ASSERT_GT(reply.body.size(), finish.size()) << reply.body;
  EXPECT_EQ(reply.body.substr(reply.body.size() - finish.size()), finish) << reply.body;
  // The text events before the finish, each exactly as OpenAI frames one.
  const std::string head = R"(data: {"choices":[{"finish_reason":null,"index":0,"logprobs":null,"text":)";
  std::string events = reply.body.substr(0, reply.body.size() - finish.size()), texts;
  int count = 0;
  while (!events.empty()) {
    ASSERT_TRUE(absl::StartsWith(events, head)) << "event " << count << ": " << events;
    const size_t end = events.find(absl::StrCat("}],", tail), head.size());
    ASSERT_NE(end, std::string::npos) << "event " << count << ": " << events;
    const json text = json::parse(events.substr(head.size(), end - head.size()), nullptr, /*allow_exceptions=*/false);
    ASSERT_TRUE(text.is_string()) << "event " << count << ": " << events;
    EXPECT_FALSE(text.get<std::string>().empty()) << "event " << count << " carries no text";
    EXPECT_EQ(text.dump(), events.substr(head.size(), end - head.size())) << "event " << count << "'s escaping";
    texts += text.get<std::string>();
    events = events.substr(end + 3 + tail.size());
    ++count;
  }
  EXPECT_GE(count, 1);
  EXPECT_EQ(texts, absl::StrJoin(expected.texts, "")) << reply.body;
}

// n > 1 (issue 29): gRPC streams each choice with its index; seeded choice i
// gives the tokens of a request of its own seeded seed + i; HTTP answers
// choices[i] in order, and streams them interleaved with their index, for
// completions and chat.
TEST_F(HttpTest, ChoicesThroughGrpcAndHttp) {
  v1::GenerateRequest request = Greedy(6);
  for (uint32_t id : {5u, 6u, 7u, 8u, 9u, 10u, 11u}) request.mutable_prompt_token_ids()->add_ids(id);
  request.mutable_sampling()->set_temperature(1.0f);
  request.mutable_sampling()->set_seed(41);
  request.set_n(3);
  std::map<uint32_t, std::string> grpc_text;
  std::map<uint32_t, std::vector<uint32_t>> grpc_ids;
  int completes = 0;
  {
    grpc::ClientContext context;
    auto reader = coordinator_->stub->Generate(&context, request);
    v1::GenerateResponse r;
    while (reader->Read(&r)) {
      ASSERT_LT(r.index(), 3u);
      if (r.has_chunk()) {
        grpc_text[r.index()] += r.chunk().text();
        grpc_ids[r.index()].insert(grpc_ids[r.index()].end(), r.chunk().token_ids().begin(), r.chunk().token_ids().end());
      }
      completes += r.has_complete() ? 1 : 0;
    }
    ASSERT_TRUE(reader->Finish().ok());
  }
  EXPECT_EQ(completes, 3);
  for (uint32_t i = 0; i < 3; ++i) {
    v1::GenerateRequest alone = request;
    alone.set_n(1);
    alone.mutable_sampling()->set_seed(41 + i);
    EXPECT_EQ(ReadStream(*coordinator_->stub, alone).ids, grpc_ids[i]) << "choice " << i;
  }

  const HttpReply full = Post("/v1/completions", R"({"model": "qwen3", "prompt": [5, 6, 7, 8, 9, 10, 11],
      "max_tokens": 6, "temperature": 1, "seed": 41, "n": 3, "ignore_eos": true})");
  ASSERT_EQ(full.status, 200) << full.body;
  const json body = json::parse(full.body);
  ASSERT_EQ(body["choices"].size(), 3u) << full.body;
  for (uint32_t i = 0; i < 3; ++i) {
    EXPECT_EQ(body["choices"][i]["index"], i);
    EXPECT_EQ(body["choices"][i]["text"], grpc_text[i]) << "choice " << i;
  }
  EXPECT_EQ(body["usage"]["prompt_tokens"], 7);
  EXPECT_EQ(body["usage"]["completion_tokens"], 18);
  EXPECT_EQ(Post("/v1/completions", R"({"prompt": "x", "best_of": 3})").status, 400);

  // Streaming: every event's choice carries its index; the texts by index add up.
  for (const std::string& path : {std::string("/v1/completions"), std::string("/v1/chat/completions")}) {
    const bool chat = path == "/v1/chat/completions";
    const std::string input = chat ? R"("messages": [{"role": "user", "content": "hi"}])" : R"("prompt": [5, 6, 7])";
    const HttpReply streamed = Curl(path, {"-N", "-H", "Content-Type: application/json", "--data-binary",
                                           absl::StrCat(R"({"model": "qwen3", )", input, R"(, "max_tokens": 5,
                                               "temperature": 0, "n": 2, "ignore_eos": true, "stream": true})")});
    ASSERT_EQ(streamed.status, 200) << streamed.body;
    std::map<int, std::string> texts;
    std::map<int, int> finishes;
    std::istringstream lines(streamed.body);
    std::string line, last;
    while (std::getline(lines, line)) {
      if (!absl::StartsWith(line, "data: ")) continue;
      last = line;
      if (line == "data: [DONE]") continue;
      const json e = json::parse(line.substr(6));
      for (const json& c : e["choices"]) {
        const int index = c["index"];
        const json& text = chat ? c["delta"].value("content", json("")) : c["text"];
        if (text.is_string()) texts[index] += text.get<std::string>();
        if (!c["finish_reason"].is_null()) ++finishes[index];
      }
    }
    EXPECT_EQ(last, "data: [DONE]") << path;
    ASSERT_EQ(texts.size(), 2u) << path << ": " << streamed.body;
    EXPECT_EQ(texts[0], texts[1]) << path << ": greedy choices are the same";
    EXPECT_FALSE(texts[0].empty()) << path;
    EXPECT_EQ(finishes, (std::map<int, int>{{0, 1}, {1, 1}})) << path;
  }
}

// /v1/completions with a list of prompts (issue 29): one response, choice
// p * n + i for choice i of prompt p, each as the prompt alone gives it;
// streamed, every index finishes once and [DONE] comes last.
TEST_F(HttpTest, AListOfPromptsIsOneResponse) {
  const std::vector<std::string> prompts = {R"("Once upon")", "[5, 6, 7]", R"("a time")"};
  std::vector<std::string> alone;
  int prompt_tokens = 0;
  for (const std::string& p : prompts) {
    const HttpReply r = Post("/v1/completions", absl::StrCat(R"({"prompt": )", p,
                                                             R"(, "max_tokens": 4, "temperature": 0, "ignore_eos": true})"));
    ASSERT_EQ(r.status, 200) << r.body;
    const json j = json::parse(r.body);
    alone.push_back(j["choices"][0]["text"]);
    prompt_tokens += j["usage"]["prompt_tokens"].get<int>();
  }
  const std::string list = absl::StrCat("[", absl::StrJoin(prompts, ", "), "]");
  const HttpReply full = Post("/v1/completions", absl::StrCat(R"({"prompt": )", list,
                                                              R"(, "n": 2, "max_tokens": 4, "temperature": 0, "ignore_eos": true})"));
  ASSERT_EQ(full.status, 200) << full.body;
  const json body = json::parse(full.body);
  ASSERT_EQ(body["choices"].size(), 6u) << full.body;
  for (size_t c = 0; c < 6; ++c) {
    EXPECT_EQ(body["choices"][c]["index"], c);
    EXPECT_EQ(body["choices"][c]["text"], alone[c / 2]) << "choice " << c;
  }
  EXPECT_EQ(body["usage"]["prompt_tokens"], prompt_tokens) << "each prompt once, not once per choice";
  EXPECT_EQ(body["usage"]["completion_tokens"], 24);

  const HttpReply streamed = Curl("/v1/completions", {"-N", "-H", "Content-Type: application/json", "--data-binary",
                                                      absl::StrCat(R"({"prompt": )", list, R"(, "n": 2, "max_tokens": 4,
                                                          "temperature": 0, "ignore_eos": true, "stream": true})")});
  ASSERT_EQ(streamed.status, 200) << streamed.body;
  std::map<int, std::string> texts;
  std::map<int, int> finishes;
  std::set<std::string> ids;
  std::istringstream lines(streamed.body);
  std::string line, last;
  while (std::getline(lines, line)) {
    if (!absl::StartsWith(line, "data: ")) continue;
    last = line;
    if (line == "data: [DONE]") continue;
    const json e = json::parse(line.substr(6));
    ids.insert(e["id"].get<std::string>());
    for (const json& c : e["choices"]) {
      texts[c["index"].get<int>()] += c["text"].get<std::string>();
      if (!c["finish_reason"].is_null()) ++finishes[c["index"].get<int>()];
    }
  }
  EXPECT_EQ(last, "data: [DONE]");
  EXPECT_EQ(ids.size(), 1u) << "one response id";
  ASSERT_EQ(texts.size(), 6u) << streamed.body;
  for (int c = 0; c < 6; ++c) {
    EXPECT_EQ(texts[c], alone[static_cast<size_t>(c / 2)]) << "choice " << c;
    EXPECT_EQ(finishes[c], 1) << "choice " << c;
  }
  // One bad prompt fails the response as a whole.
  EXPECT_EQ(Post("/v1/completions", R"({"prompt": [[1, 2], [3, 99999999]], "max_tokens": 2})").status, 400);
}

// Malformed JSON, wrong types, unknown fields, a body past --max-body-bytes, an
// unknown model or path: each a 4xx in OpenAI's error shape; the server stays up.
TEST_F(HttpTest, BadInputGets4xxAndTheServerStaysUp) {
  const std::string huge = dir_->path() + "/huge.json";
  std::ofstream(huge) << R"({"prompt": ")" << std::string(100000, 'x') << R"("})";
  struct Case {
    std::string path, body;
    int status;
    json param;
  };
  const std::vector<Case> cases = {
      {"/v1/chat/completions", R"({"messages": [)", 400, nullptr},
      {"/v1/chat/completions", R"({"messages": "hi"})", 400, "messages"},
      {"/v1/chat/completions", R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": "3"})", 400,
       "max_tokens"},
      {"/v1/completions", R"({"prompt": "x", "colour": "red"})", 400, "colour"},
      {"/v1/completions", R"({"prompt": "x", "top_k": -7})", 400, "top_k"},
      {"/v1/completions", R"({"prompt": "x", "temperature": -1})", 400, "temperature"},
      {"/v1/completions", R"({"prompt": [1, 99999999]})", 400, "prompt"},
      {"/v1/completions", R"({"prompt": "x", "model": "gpt-4"})", 404, "model"},
      {"/v1/nothing", R"({})", 404, nullptr},
      {"/tokenize", R"({"prompt": 3})", 400, "prompt"},
      {"/detokenize", R"({"tokens": [99999999]})", 400, "tokens"},
  };
  for (const Case& c : cases) {
    const HttpReply reply = Post(c.path, c.body);
    EXPECT_EQ(reply.status, c.status) << c.body << " -> " << reply.body;
    const json error = json::parse(reply.body, nullptr, false);
    ASSERT_TRUE(error.is_object() && error.contains("error")) << reply.body;
    EXPECT_EQ(error["error"]["param"], c.param) << reply.body;
    EXPECT_FALSE(error["error"]["message"].get<std::string>().empty());
  }
  const HttpReply big = Curl("/v1/completions", {"-H", "Content-Type: application/json", "--data-binary", "@" + huge});
  EXPECT_EQ(big.status, 413) << big.body;
  EXPECT_NE(big.body.find("--max-body-bytes"), std::string::npos) << big.body;

  EXPECT_EQ(Curl("/health", {}).status, 200);
  const HttpReply ok = Post("/v1/completions", R"({"prompt": [1, 2], "max_tokens": 2, "temperature": 0})");
  EXPECT_EQ(ok.status, 200) << ok.body;
  EXPECT_EQ(json::parse(ok.body)["usage"]["completion_tokens"], 2) << ok.body;
}

// Token-level controls through tpserve-http, the coordinator and a worker:
// +100 forces a token, allowed_token_ids holds every sampled token to its
// list (seeded, temperature 1.5), and the coordinator's refusals of a bias
// out of range or too many entries come back as 400 naming logit_bias.
TEST_F(HttpTest, TokenControlsReachTheSampler) {
  auto ids = [](const HttpReply& reply) {
    std::vector<int> out;
    const json body = json::parse(reply.body, nullptr, false);
    EXPECT_TRUE(body.is_object()) << reply.body;
    if (!body.is_object()) return out;
    for (const json& t : body["choices"][0]["logprobs"]["tokens"]) {
      int id = -1;
      EXPECT_TRUE(absl::SimpleAtoi(t.get<std::string>().substr(std::string("token_id:").size()), &id)) << t;
      out.push_back(id);
    }
    return out;
  };
  const std::string common = R"("prompt": [1, 2, 3], "max_tokens": 6, "ignore_eos": true, "temperature": 1.5,
      "seed": 11, "logprobs": 0, "return_tokens_as_token_ids": true)";
  const HttpReply forced = Post("/v1/completions", "{" + common + R"(, "logit_bias": {"100": 100}})");
  ASSERT_EQ(forced.status, 200) << forced.body;
  EXPECT_EQ(ids(forced), std::vector<int>(6, 100)) << forced.body;
  const HttpReply allowed =
      Post("/v1/chat/completions", R"({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 8,
           "ignore_eos": true, "temperature": 1.5, "seed": 3, "logprobs": true, "return_tokens_as_token_ids": true,
           "allowed_token_ids": [7, 9, 11]})");
  ASSERT_EQ(allowed.status, 200) << allowed.body;
  const json content = json::parse(allowed.body)["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), 8u) << allowed.body;
  for (const json& t : content) {
    const std::string token = t["token"].get<std::string>();
    EXPECT_TRUE(token == "token_id:7" || token == "token_id:9" || token == "token_id:11") << allowed.body;
  }
  std::string many = R"({"prompt": "x", "logit_bias": {)";
  for (int t = 0; t <= 300; ++t) absl::StrAppend(&many, t == 0 ? "" : ", ", "\"", t, "\": 1");
  many += "}}";
  for (const std::string& body : {std::string(R"({"prompt": "x", "logit_bias": {"5": 101}})"), many,
                                  std::string(R"({"prompt": "x", "logit_bias": {"five": 1}})")}) {
    const HttpReply reply = Post("/v1/completions", body);
    EXPECT_EQ(reply.status, 400) << reply.body;
    const json error = json::parse(reply.body, nullptr, false);
    ASSERT_TRUE(error.is_object()) << reply.body;
    EXPECT_EQ(error["error"]["param"], "logit_bias") << reply.body;
  }
}

// Prompt log-probs over gRPC: the prompt's ids and, from the second token on,
// each one's log-prob, rank and top 2, on the first chunk only; a request
// whose prompt is in the prefix cache recomputes it (cached_tokens 0) and gets
// the same bits (the CPU backend is batch-invariant); out of range is
// INVALID_ARGUMENT naming the field. The values against the float64 forward:
// tests/worker/prompt_logprobs_test.cc.
TEST_F(HttpTest, PromptLogprobsOverGrpc) {
  v1::GenerateRequest request = Greedy(3);
  for (uint32_t i = 0; i < 40; ++i) request.mutable_prompt_token_ids()->add_ids(3 + (i * 7) % 90);
  request.set_prompt_logprobs(2);
  const GrpcStream first = ReadStream(*coordinator_->stub, request);
  const auto& prompt = request.prompt_token_ids().ids();
  EXPECT_EQ(first.chunks_with_prompt, 1);
  ASSERT_EQ(first.prompt.token_ids_size(), prompt.size());
  ASSERT_EQ(first.prompt.logprobs_size(), prompt.size() - 1);
  for (int i = 0; i < first.prompt.logprobs_size(); ++i) {
    const v1::TokenLogprob& lp = first.prompt.logprobs(i);
    SCOPED_TRACE(testing::Message() << "position " << i + 1);
    EXPECT_EQ(first.prompt.token_ids(i), prompt[i]);
    EXPECT_EQ(lp.token_id(), prompt[i + 1]);
    ASSERT_EQ(lp.top_size(), 2);
    EXPECT_GE(lp.top(0).logprob(), lp.top(1).logprob());
    EXPECT_LE(lp.logprob(), lp.top(0).logprob());
    EXPECT_GE(lp.rank(), 1u);
    if (lp.rank() == 1) {
      EXPECT_EQ(lp.logprob(), lp.top(0).logprob());
    } else if (lp.rank() > 2) {
      EXPECT_LE(lp.logprob(), lp.top(1).logprob());
    }
  }
  EXPECT_EQ(first.complete.usage().cached_tokens(), 0u);

  v1::GenerateRequest plain = request;
  plain.clear_prompt_logprobs();
  const GrpcStream cached = ReadStream(*coordinator_->stub, plain);
  EXPECT_GT(cached.complete.usage().cached_tokens(), 0u) << "the first request's blocks are in the prefix cache";
  EXPECT_EQ(cached.chunks_with_prompt, 0);
  const GrpcStream again = ReadStream(*coordinator_->stub, request);
  EXPECT_EQ(again.complete.usage().cached_tokens(), 0u) << "prompt log-probs need every row: no cached prefix";
  EXPECT_EQ(again.prompt.SerializeAsString(), first.prompt.SerializeAsString());
  EXPECT_EQ(again.ids, first.ids);

  request.set_prompt_logprobs(21);
  grpc::ClientContext context;
  auto reader = coordinator_->stub->Generate(&context, request);
  v1::GenerateResponse r;
  while (reader->Read(&r)) {
  }
  const grpc::Status refused = reader->Finish();
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_TRUE(absl::StartsWith(refused.error_message(), "prompt_logprobs:")) << refused.error_message();
}

// echo through curl: the prompt's tokens and log-probs first (OpenAI's
// shape, null for the first), with max_tokens 0 the prompt alone; vLLM's
// prompt_logprobs on the choice; the same streamed.
TEST_F(HttpTest, EchoAndPromptLogprobs) {
  v1::GenerateRequest grpc_request = Greedy(2);
  const std::vector<uint32_t> prompt = {11, 4, 87, 23, 5, 60, 2};
  for (uint32_t id : prompt) grpc_request.mutable_prompt_token_ids()->add_ids(id);
  grpc_request.set_prompt_logprobs(1);
  grpc_request.set_logprobs(1);
  const GrpcStream want = ReadStream(*coordinator_->stub, grpc_request);
  ASSERT_EQ(want.prompt.logprobs_size(), 6);

  const std::string ids = json(prompt).dump();
  const HttpReply only = Post("/v1/completions", R"({"prompt": )" + ids +
                                                     R"(, "echo": true, "logprobs": 1, "max_tokens": 0, "temperature": 0,
                                                     "return_tokens_as_token_ids": true})");
  ASSERT_EQ(only.status, 200) << only.body;
  const json c = json::parse(only.body)["choices"][0];
  EXPECT_EQ(c["finish_reason"], "length") << only.body;
  EXPECT_EQ(json::parse(only.body)["usage"]["completion_tokens"], 0) << only.body;
  const json& lp = c["logprobs"];
  ASSERT_EQ(lp["tokens"].size(), prompt.size()) << only.body;
  std::string text;
  for (size_t i = 0; i < prompt.size(); ++i) {
    EXPECT_EQ(lp["tokens"][i], absl::StrCat("token_id:", prompt[i]));
    EXPECT_EQ(lp["text_offset"][i], text.size());
    text += lp["tokens"][i].get<std::string>();
    if (i == 0) {
      EXPECT_TRUE(lp["token_logprobs"][0].is_null() && lp["top_logprobs"][0].is_null()) << only.body;
      continue;
    }
    EXPECT_EQ(lp["token_logprobs"][i].get<double>(), want.prompt.logprobs(static_cast<int>(i) - 1).logprob());
    ASSERT_EQ(lp["top_logprobs"][i].size(), 1u) << only.body;
  }
  EXPECT_EQ(c["text"], want.prompt.text()) << "a prompt of token ids echoes their decoding";
  EXPECT_FALSE(want.prompt.text().empty());

  const HttpReply more = Post("/v1/completions", R"({"prompt": )" + ids +
                                                     R"(, "echo": true, "logprobs": 1, "max_tokens": 2, "temperature": 0,
                                                     "prompt_logprobs": 0, "return_tokens_as_token_ids": true})");
  ASSERT_EQ(more.status, 200) << more.body;
  const json m = json::parse(more.body)["choices"][0];
  ASSERT_EQ(m["logprobs"]["tokens"].size(), prompt.size() + 2) << more.body;
  EXPECT_EQ(m["logprobs"]["tokens"][prompt.size()], absl::StrCat("token_id:", want.ids[0]));
  EXPECT_EQ(m["logprobs"]["text_offset"][prompt.size()], want.prompt.text().size()) << "after the echoed text";
  EXPECT_TRUE(m["logprobs"]["token_logprobs"][prompt.size()].is_number()) << more.body;
  EXPECT_EQ(m["text"].get<std::string>().substr(0, want.prompt.text().size()), want.prompt.text()) << more.body;
  const json& pl = m["prompt_logprobs"];
  ASSERT_EQ(pl.size(), prompt.size()) << more.body;
  EXPECT_TRUE(pl[0].is_null());
  for (size_t i = 1; i < prompt.size(); ++i) {
    const v1::TokenLogprob& w = want.prompt.logprobs(static_cast<int>(i) - 1);
    const json& e = pl[i][std::to_string(prompt[i])];
    EXPECT_EQ(e["logprob"].get<double>(), w.logprob()) << more.body;
    EXPECT_EQ(e["rank"], w.rank()) << more.body;
  }
  // Streamed: the first event carries the echoed prompt, its log-probs and
  // prompt_logprobs; the events together give the non-streaming answer.
  for (const int max_tokens : {0, 2}) {
    SCOPED_TRACE(testing::Message() << "max_tokens " << max_tokens);
    const std::string body = absl::StrCat(R"({"prompt": )", ids, R"(, "echo": true, "logprobs": 1, "max_tokens": )",
                                          max_tokens, R"(, "temperature": 0, "prompt_logprobs": 0)");
    const HttpReply whole = Post("/v1/completions", body + "}");
    const HttpReply streamed = Post("/v1/completions", body + R"(, "stream": true, "stream_options": {"include_usage": true}})");
    ASSERT_EQ(streamed.status, 200) << streamed.body;
    const json w = json::parse(whole.body);
    std::string text;
    json tokens = json::array(), offsets = json::array(), prompt_lp;
    std::string finish;
    json usage;
    for (absl::string_view line : absl::StrSplit(streamed.body, "\n\n")) {
      if (!absl::StartsWith(line, "data: {")) continue;
      const json event = json::parse(std::string(line.substr(6)));
      if (event.contains("usage") && !event["usage"].is_null()) usage = event["usage"];
      for (const json& c : event["choices"]) {
        text += c["text"].get<std::string>();
        if (c.contains("prompt_logprobs")) prompt_lp = c["prompt_logprobs"];
        if (!c["finish_reason"].is_null()) finish = c["finish_reason"];
        if (c["logprobs"].is_null()) continue;
        for (const json& t : c["logprobs"]["tokens"]) tokens.push_back(t);
        for (const json& o : c["logprobs"]["text_offset"]) offsets.push_back(o);
      }
    }
    EXPECT_EQ(text, w["choices"][0]["text"]) << streamed.body;
    EXPECT_EQ(tokens, w["choices"][0]["logprobs"]["tokens"]) << streamed.body;
    // The prompt's offsets (the output's count the streamed text, the whole
    // answer's each token's own text: they may differ past an incomplete character).
    ASSERT_GE(offsets.size(), prompt.size());
    for (size_t i = 0; i < prompt.size(); ++i) EXPECT_EQ(offsets[i], w["choices"][0]["logprobs"]["text_offset"][i]);
    EXPECT_EQ(prompt_lp, w["choices"][0]["prompt_logprobs"]) << streamed.body;
    EXPECT_EQ(finish, "length");
    EXPECT_EQ(usage["completion_tokens"], max_tokens) << streamed.body;
  }
  const HttpReply big = Post("/v1/completions", R"({"prompt": "x", "prompt_logprobs": 21})");
  EXPECT_EQ(big.status, 400) << big.body;
  EXPECT_EQ(json::parse(big.body)["error"]["param"], "prompt_logprobs") << big.body;
}

// --api-key-file: 401 without a key or with a wrong one, health needs none;
// a coordinator that cannot be reached is 503.
TEST_F(HttpTest, ApiKeysAndAnUnreachableCoordinator) {
  const std::string keys = dir_->path() + "/keys";
  std::ofstream(keys) << "alice 0123456789abcdef-alice\n";
  ASSERT_EQ(chmod(keys.c_str(), 0600), 0);
  std::string base;
  std::unique_ptr<Process> keyed = StartHttp(coordinator_->address, {"--api-key-file", keys}, "keyed", &base);
  ASSERT_FALSE(base.empty()) << keyed->Log();
  const std::string body = R"({"prompt": [1, 2], "max_tokens": 1})";
  const std::vector<std::string> json_body = {"-H", "Content-Type: application/json", "--data-binary", body};
  auto with = [&](std::vector<std::string> headers) {
    headers.insert(headers.end(), json_body.begin(), json_body.end());
    return headers;
  };
  HttpReply r = CurlAt(base, "/v1/completions", with({}));
  EXPECT_EQ(r.status, 401) << r.body;
  EXPECT_EQ(json::parse(r.body, nullptr, false)["error"]["code"], "invalid_api_key") << r.body;
  EXPECT_EQ(CurlAt(base, "/v1/completions", with({"-H", "Authorization: Bearer 0123456789abcdef-bob"})).status, 401);
  EXPECT_EQ(CurlAt(base, "/v1/models", {}).status, 401);
  EXPECT_EQ(CurlAt(base, "/health", {}).status, 200);
  r = CurlAt(base, "/v1/completions", with({"-H", "Authorization: Bearer 0123456789abcdef-alice"}));
  EXPECT_EQ(r.status, 200) << r.body;

  std::unique_ptr<Process> orphan = StartHttp("127.0.0.1:1", {}, "orphan", &base);
  ASSERT_FALSE(base.empty()) << orphan->Log();
  r = CurlAt(base, "/v1/completions", json_body);
  EXPECT_EQ(r.status, 503) << r.body;
  EXPECT_EQ(json::parse(r.body, nullptr, false)["error"]["type"], "service_unavailable") << r.body;
  EXPECT_EQ(CurlAt(base, "/health", {}).status, 503);
}

TEST_F(HttpTest, TokenizeDetokenizeAndModels) {
  const HttpReply tok = Post("/tokenize", R"({"prompt": "hello world"})");
  ASSERT_EQ(tok.status, 200) << tok.body;
  v1::TokenizeRequest request;
  request.set_text("hello world");
  request.set_add_special_tokens(true);
  const std::vector<int32_t> ids = Tokenize(*coordinator_->stub, request);
  EXPECT_EQ(json::parse(tok.body)["tokens"], json(ids));
  EXPECT_EQ(json::parse(tok.body)["count"], ids.size());
  const HttpReply detok = Post("/detokenize", json{{"tokens", ids}}.dump());
  ASSERT_EQ(detok.status, 200) << detok.body;
  EXPECT_EQ(json::parse(detok.body)["prompt"], "hello world");
  const HttpReply models = Curl("/v1/models", {});
  ASSERT_EQ(models.status, 200);
  EXPECT_EQ(json::parse(models.body)["data"][0]["id"], "qwen3");
}

// The aborted stream's length: greedy through tpserve-http (curl, one
// non-streaming request) it took 129 s on the 2-core development machine, far
// past the 3 s the abort test gives the cancellation.
constexpr int kAbortMaxTokens = 30000;

// The expectations the Node script checks, from gRPC Generate.
json Expectations(v1::Generation::Stub& stub) {
  json e = {{"model", "qwen3"}};
  const std::vector<uint32_t> prompt = {5, 9, 2, 7, 3, 1};
  v1::GenerateRequest ids = Greedy(12);
  ids.set_skip_special_tokens(true);
  for (uint32_t id : prompt) ids.mutable_prompt_token_ids()->add_ids(id);
  const GrpcStream greedy = ReadStream(stub, ids);
  std::string text;
  for (const std::string& t : greedy.texts) text += t;
  e["ids_prompt"] = prompt;
  e["ids_greedy"] = greedy.ids;
  e["ids_text"] = text;
  // A stop string: two characters first seen past the start of the text.
  for (size_t i = 2; i + 2 <= text.size(); ++i) {
    const std::string stop = text.substr(i, 2);
    const bool ascii = static_cast<unsigned char>(stop[0]) < 0x80 && static_cast<unsigned char>(stop[1]) < 0x80;
    if (text.find(stop) == i && ascii) {
      e["stop_string"] = stop;
      break;
    }
  }
  if (!e.contains("stop_string")) ADD_FAILURE() << "no two ASCII characters to stop at in " << json(text);
  v1::GenerateRequest seeded = ids;
  seeded.mutable_sampling()->set_temperature(1.0f);
  seeded.mutable_sampling()->set_seed(1234);
  e["seed"] = 1234;
  e["seeded_ids"] = ReadStream(stub, seeded).ids;

  const json messages = json::parse(R"([{"role": "system", "content": "You are terse."},
                                         {"role": "user", "content": "What is two plus two?"}])");
  v1::GenerateRequest chat = Greedy(8);
  chat.set_skip_special_tokens(true);
  for (const json& m : messages) {
    v1::ChatMessage* cm = chat.mutable_chat()->add_messages();
    cm->set_role(m["role"]);
    cm->set_content(m["content"]);
  }
  chat.mutable_chat()->set_add_generation_prompt(true);
  const GrpcStream chat_out = ReadStream(stub, chat);
  std::string chat_text;
  for (const std::string& t : chat_out.texts) chat_text += t;
  e["chat_messages"] = messages;
  e["chat_max_tokens"] = 8;
  e["chat_text"] = chat_text;
  e["chat_prompt_tokens"] = chat_out.complete.usage().prompt_tokens();
  e["abort_max_tokens"] = kAbortMaxTokens;
  // echo: a text prompt's tokens and their log-probs, as gRPC gives them.
  v1::GenerateRequest echo = Greedy(1);
  echo.set_prompt("The quick brown fox jumps over the lazy dog");
  echo.set_prompt_logprobs(1);
  const GrpcStream echoed = ReadStream(stub, echo);
  e["echo_prompt"] = echo.prompt();
  e["echo_token_ids"] = std::vector<uint32_t>(echoed.prompt.token_ids().begin(), echoed.prompt.token_ids().end());
  json echo_logprobs = json::array();
  for (const v1::TokenLogprob& lp : echoed.prompt.logprobs()) echo_logprobs.push_back(lp.logprob());
  e["echo_token_logprobs"] = echo_logprobs;
  return e;
}

class HttpOpenAiClientTest : public HttpTest {
 protected:
  void SetUp() override {
    HttpTest::SetUp();
    if (HasFatalFailure()) return;
    module_ = OpenAiModule(dir_->path() + "/npm.log");
    if (module_.empty()) {
      GTEST_SKIP() << "the openai npm client is not installed and npm could not fetch it:\n"
                   << ReadFile(dir_->path() + "/npm.log");
    }
    expect_ = dir_->path() + "/expect.json";
    std::ofstream(expect_) << Expectations(*coordinator_->stub).dump();
  }
  std::vector<std::string> Node(const std::string& mode) const {
    return {"env", "OPENAI_MODULE=" + module_, "HTTP_BASE=" + base_ + "/v1", "EXPECT=" + expect_,
            "GO_FILE=" + dir_->path() + "/go", "node",
            std::string(TPSERVE_SOURCE_DIR) + "/tests/e2e/http_openai_client.cjs", mode};
  }
  std::string module_, expect_;
};

TEST_F(HttpOpenAiClientTest, ChatAndCompletionsAsTheClientSeesThem) {
  const std::string log = dir_->path() + "/node-checks.log";
  const int status = RunCommand(Node("checks"), log);
  std::cout << ReadFile(log);
  EXPECT_EQ(status, 0) << ReadFile(log);
}

// Aborting the stream in the client cancels the request on the coordinator:
// running goes from 1 to 0 long before its 30,000 tokens could be done.
TEST_F(HttpOpenAiClientTest, AbortingTheStreamFreesTheRequest) {
  const std::string log = dir_->path() + "/node-abort.log";
  Process node(Node("abort"), log);
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (absl::Now() < deadline && node.Log().find("STREAMING") == std::string::npos) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  ASSERT_NE(node.Log().find("STREAMING"), std::string::npos) << node.Log();
  EXPECT_EQ(ServerInfo(*coordinator_->stub).running(), 1u);
  std::ofstream(dir_->path() + "/go") << "go";
  ASSERT_EQ(node.Wait(absl::Seconds(10)), 0) << node.Log();
  v1::ServerInfo info = ServerInfo(*coordinator_->stub);
  const absl::Time freed_by = absl::Now() + absl::Seconds(3);
  while (absl::Now() < freed_by && (info.running() != 0 || info.free_blocks() != info.num_blocks())) {
    absl::SleepFor(absl::Milliseconds(10));
    info = ServerInfo(*coordinator_->stub);
  }
  EXPECT_EQ(info.running(), 0u);
  EXPECT_EQ(info.free_blocks(), info.num_blocks());
}

}  // namespace
}  // namespace tpserve::e2e
