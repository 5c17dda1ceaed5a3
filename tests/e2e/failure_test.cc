// End to end, real processes: invalid requests, a full queue, cancellation,
// a killed worker, SIGTERM draining, start-up without workers, and the client tool.
#include <signal.h>

#include <grpcpp/generic/generic_stub.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <functional>
#include <sstream>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "nlohmann/json.hpp"
#include "tests/e2e/harness.h"

namespace tpserve::e2e {
namespace {

namespace v1 = tpserve::v1;

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class FailureTest : public ::testing::Test {
 protected:
  void SetUp() override { model_ = MakeModel(dir_.path(), "qwen3", {"--seed", "4", "--max-pos", "4096"}); }
  Coordinator Start(const std::vector<std::string>& extra = {}) {
    return StartCoordinator(model_, 2, dir_.path() + "/coordinator.log", extra);
  }
  // A request that runs for thousands of steps unless stopped.
  static v1::GenerateRequest Long(const std::string& id = "") {
    v1::GenerateRequest r = Greedy(4000);
    r.set_request_id(id);
    r.set_prompt("count forever");
    return r;
  }
  std::string Client(const std::vector<std::string>& args, int* rc) {
    std::vector<std::string> argv = {BinaryPath("tools/client/tpserve-client")};
    argv.insert(argv.end(), args.begin(), args.end());
    const std::string log = absl::StrCat(dir_.path(), "/client-", ++client_runs_, ".out");
    *rc = RunCommand(argv, log);
    return Slurp(log);
  }

  TempDir dir_;
  std::string model_;
  int client_runs_ = 0;
};

TEST_F(FailureTest, InvalidRequestsNameTheField) {
  Coordinator c = Start({"--max-model-len", "64"});
  ASSERT_TRUE(c.stub);
  struct Case {
    std::string field;
    std::function<void(v1::GenerateRequest&)> edit;
  };
  const std::vector<Case> cases = {
      {"prompt", [](auto& r) { r.set_prompt(""); }},
      {"prompt", [](auto& r) { r.set_prompt(std::string(200, 'z') + " " + std::string(200, 'q')); }},
      {"stopping.max_tokens", [](auto& r) { r.mutable_stopping()->set_max_tokens(0); }},
      {"stopping.max_tokens", [](auto& r) { r.mutable_stopping()->set_max_tokens(1000); }},
      {"sampling.temperature", [](auto& r) { r.mutable_sampling()->set_temperature(-1); }},
      {"sampling.top_p", [](auto& r) { r.mutable_sampling()->set_top_p(0); }},
      {"sampling.top_p", [](auto& r) { r.mutable_sampling()->set_top_p(1.5f); }},
      {"sampling.top_k", [](auto& r) { r.mutable_sampling()->set_top_k(-3); }},
      {"prompt_token_ids.ids[1]", [](auto& r) {
         r.mutable_prompt_token_ids()->add_ids(1);
         r.mutable_prompt_token_ids()->add_ids(100000);
       }},
      {"stopping.stop", [](auto& r) { for (int i = 0; i < 17; ++i) r.mutable_stopping()->add_stop("x"); }},
      {"stopping.stop[0]", [](auto& r) { r.mutable_stopping()->add_stop(std::string(300, 'x')); }},
      {"stopping.stop[0]", [](auto& r) { r.mutable_stopping()->add_stop(""); }},
      {"chat.messages[0].role", [](auto& r) { r.mutable_chat()->add_messages()->set_role("wizard"); }},
      {"request_id", [](auto& r) { r.set_request_id(std::string(257, 'r')); }},
  };
  for (const Case& k : cases) {
    v1::GenerateRequest r;
    r.set_prompt("hello");
    k.edit(r);
    GenerateOutcome o = Generate(*c.stub, r);
    EXPECT_EQ(o.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << k.field << ": " << o.status.error_message();
    // The path, then ": ": what tpserve-http turns into OpenAI's `param`.
    EXPECT_EQ(o.status.error_message().rfind(k.field + ": ", 0), 0u) << o.status.error_message();
  }
  // The server is still fine.
  v1::GenerateRequest ok = Greedy(3);
  ok.set_prompt("hello");
  EXPECT_TRUE(Generate(*c.stub, ok).status.ok());
}

// Issue 33, item 5: a chat of 100,000 messages is refused before it is
// rendered (it cost the coordinator ~200 MB of peak memory per request, and
// each gRPC thread kept its share), and JSON nested 100,000 deep sent over
// gRPC (tools_json, chat_template_kwargs, tool call arguments) is refused
// naming the field instead of overflowing the stack in nlohmann's recursive
// copy (the process died of SIGSEGV).
TEST_F(FailureTest, HugeAndDeepChatsAreRefusedBeforeRendering) {
  Coordinator c = Start();
  ASSERT_TRUE(c.stub);
  auto peak_kb = [&] {
    std::ifstream status(absl::StrCat("/proc/", c.process->pid(), "/status"));
    std::string line;
    int64_t kb = -1;
    while (std::getline(status, line)) {
      if (line.rfind("VmHWM:", 0) == 0) {
        EXPECT_TRUE(absl::SimpleAtoi(line.substr(6, line.size() - 9), &kb)) << line;
      }
    }
    return kb;
  };
  const int64_t before = peak_kb();
  ASSERT_GT(before, 0);
  v1::GenerateRequest huge = Greedy(2);
  for (int i = 0; i < 100000; ++i) {
    v1::ChatMessage* m = huge.mutable_chat()->add_messages();
    m->set_role(i % 2 == 0 ? "user" : "assistant");
    m->set_content("hi");
  }
  for (int i = 0; i < 2; ++i) {  // two: gRPC threads each keep their own arena
    const GenerateOutcome o = Generate(*c.stub, huge);
    EXPECT_EQ(o.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << o.status.error_message();
    EXPECT_EQ(o.status.error_message().rfind("chat.messages: 100000 messages are more than the limit of 2048 "
                                             "(--max-chat-messages)", 0), 0u)
        << o.status.error_message();
  }
  const int64_t grown_mb = (peak_kb() - before) / 1024;
  std::printf("coordinator peak RSS %lld MB -> %lld MB over two 100,000-message chats\n",
              static_cast<long long>(before / 1024), static_cast<long long>(before / 1024 + grown_mb));
  EXPECT_LT(grown_mb, 160) << "rendered before it was refused? (it grew by ~375 MB)";

  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  struct Case {
    std::string field;
    std::function<void(v1::Chat&)> edit;
  };
  const std::vector<Case> cases = {
      {"chat.tools_json", [&](v1::Chat& chat) { chat.set_tools_json(deep); }},
      {"chat.chat_template_kwargs[\"x\"]", [&](v1::Chat& chat) { (*chat.mutable_chat_template_kwargs())["x"] = deep; }},
      {"chat.messages[1].tool_calls[0].arguments", [&](v1::Chat& chat) {
         v1::ChatMessage* a = chat.add_messages();
         a->set_role("assistant");
         a->add_tool_calls()->set_name("f");
         a->mutable_tool_calls(0)->set_arguments("{\"a\": " + deep + "}");
       }},
  };
  for (const Case& k : cases) {
    v1::GenerateRequest r = Greedy(2);
    r.mutable_chat()->add_messages()->set_role("user");
    k.edit(*r.mutable_chat());
    const GenerateOutcome o = Generate(*c.stub, r);
    EXPECT_EQ(o.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << k.field << ": " << o.status.error_message();
    EXPECT_EQ(o.status.error_message().rfind(k.field + ": nests deeper than 64 levels", 0), 0u)
        << o.status.error_message();
  }
  v1::GenerateRequest fine = Greedy(3);
  fine.set_prompt("hello");
  EXPECT_TRUE(Generate(*c.stub, fine).status.ok()) << "the coordinator is alive:\n" << c.process->Log();
}

// Issue 15, point 8: bytes that are not the request message, or text fields
// that are not UTF-8, are INVALID_ARGUMENT saying so (not a bare
// UNIMPLEMENTED), with no log line per request.
TEST_F(FailureTest, UnparseableRequestsAndInvalidUtf8AreInvalidArgument) {
  Coordinator c = Start();
  ASSERT_TRUE(c.stub);
  auto channel = grpc::CreateChannel(c.address, grpc::InsecureChannelCredentials());
  grpc::GenericStub generic(channel);
  const std::string garbage = "\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01";  // a varint that never ends
  for (const std::string method : {"Tokenize", "Abort", "GetServerInfo"}) {
    grpc::Slice slice(garbage);
    grpc::ByteBuffer request(&slice, 1), response;
    grpc::ClientContext context;
    absl::Notification done;
    grpc::Status status;
    generic.UnaryCall(&context, absl::StrCat("/tpserve.v1.Generation/", method), grpc::StubOptions(), &request,
                      &response, [&](grpc::Status s) {
                        status = std::move(s);
                        done.Notify();
                      });
    done.WaitForNotification();
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << method << ": " << status.error_message();
    EXPECT_NE(status.error_message().find("is not a valid tpserve.v1."), std::string::npos) << status.error_message();
  }
  // Generate, as any client's: a stream whose one request does not parse.
  {
    grpc::ClientContext context;
    grpc::CompletionQueue cq;
    auto call = generic.PrepareCall(&context, "/tpserve.v1.Generation/Generate", &cq);
    void* tag;
    bool ok;
    call->StartCall(reinterpret_cast<void*>(1));
    ASSERT_TRUE(cq.Next(&tag, &ok));
    grpc::Slice slice(garbage);
    grpc::ByteBuffer request(&slice, 1);
    call->WriteLast(request, grpc::WriteOptions(), reinterpret_cast<void*>(2));
    ASSERT_TRUE(cq.Next(&tag, &ok));
    grpc::Status status;
    call->Finish(&status, reinterpret_cast<void*>(3));
    ASSERT_TRUE(cq.Next(&tag, &ok));
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status.error_message();
    EXPECT_NE(status.error_message().find("is not a valid tpserve.v1.GenerateRequest"), std::string::npos)
        << status.error_message();
  }
  // A prompt that is not UTF-8 (the typed client sends it; protobuf's own
  // complaint on this side is expected).
  v1::GenerateRequest bad = Greedy(2);
  bad.set_prompt("caf\xe9 au lait");
  const GenerateOutcome o = Generate(*c.stub, bad);
  EXPECT_EQ(o.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << o.status.error_message();
  EXPECT_EQ(o.status.error_message().rfind("prompt: is not valid UTF-8", 0), 0u)
      << o.status.error_message();
  EXPECT_EQ(c.process->Log().find("libprotobuf"), std::string::npos) << "a log line per bad request:\n"
                                                                       << c.process->Log();
  v1::GenerateRequest fine = Greedy(3);
  fine.set_prompt("hello");
  EXPECT_TRUE(Generate(*c.stub, fine).status.ok());
}

TEST_F(FailureTest, QueueFullIsResourceExhaustedAndAbortEndsStreams) {
  Coordinator c = Start({"--max-num-seqs", "1", "--max-queue", "1"});
  ASSERT_TRUE(c.stub);
  GenerateOutcome a, b;
  std::thread ta([&] { a = Generate(*c.stub, Long("a")); });
  // Wait until "a" runs, then queue "b".
  for (int i = 0; i < 500 && ServerInfo(*c.stub).running() == 0; ++i) absl::SleepFor(absl::Milliseconds(10));
  std::thread tb([&] { b = Generate(*c.stub, Long("b")); });
  for (int i = 0; i < 500 && ServerInfo(*c.stub).waiting() == 0; ++i) absl::SleepFor(absl::Milliseconds(10));
  GenerateOutcome refused = Generate(*c.stub, Long("c"));
  EXPECT_EQ(refused.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << refused.status.error_message();
  EXPECT_NE(refused.status.error_message().find("--max-queue"), std::string::npos);
  for (const char* id : {"b", "a"}) {
    grpc::ClientContext ctx;
    v1::AbortRequest req;
    req.set_request_id(id);
    v1::AbortResponse resp;
    ASSERT_TRUE(c.stub->Abort(&ctx, req, &resp).ok());
    EXPECT_TRUE(resp.found()) << id;
  }
  ta.join();
  tb.join();
  for (const GenerateOutcome* o : {&a, &b}) {
    EXPECT_TRUE(o->status.ok()) << o->status.error_message();
    EXPECT_TRUE(o->completed);
    EXPECT_EQ(o->complete.finish_reason(), v1::ABORTED);
  }
}

// Issue 15, point 5: ids are unguessable and scoped by client (its address).
TEST_F(FailureTest, RequestIdsAreRandomAndBelongToTheirClient) {
  // Dual-stack: one client over IPv4 loopback, the other over IPv6 loopback.
  Coordinator c = Start({"--listen", "[::]:0"});
  ASSERT_TRUE(c.stub);
  const std::string port = c.address.substr(c.address.rfind(':') + 1);
  auto connect = [](const std::string& address) {
    return v1::Generation::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  };
  auto alice = connect("127.0.0.1:" + port);
  auto bob = connect("[::1]:" + port);
  // Server-assigned ids: "req-" + 32 hex digits, not a sequence.
  std::vector<std::string> ids;
  for (int i = 0; i < 2; ++i) {
    grpc::ClientContext ctx;
    v1::GenerateRequest request = Greedy(1);
    request.set_prompt("x");
    auto reader = alice->Generate(&ctx, request);
    v1::GenerateResponse r;
    ASSERT_TRUE(reader->Read(&r));
    ids.push_back(r.request_id());
    while (reader->Read(&r)) {
    }
    ASSERT_TRUE(reader->Finish().ok());
  }
  for (const std::string& id : ids) {
    ASSERT_EQ(id.size(), 36u) << id;
    EXPECT_EQ(id.substr(0, 4), "req-") << id;
    EXPECT_EQ(id.find_first_not_of("0123456789abcdef", 4), std::string::npos) << id;
  }
  EXPECT_NE(ids[0], ids[1]);
  EXPECT_NE(ids[0].substr(0, 30), ids[1].substr(0, 30)) << ids[0] << " " << ids[1];
  // The same id from two clients: two requests; each Abort ends only its own.
  GenerateOutcome a, b;
  auto abort = [](v1::Generation::Stub& stub, const std::string& id) {
    grpc::ClientContext ctx;
    v1::AbortRequest req;
    req.set_request_id(id);
    v1::AbortResponse resp;
    EXPECT_TRUE(stub.Abort(&ctx, req, &resp).ok());
    return resp.found();
  };
  std::thread ta([&] { a = Generate(*alice, Long("shared")); });
  for (int i = 0; i < 500 && ServerInfo(*alice).running() < 1; ++i) absl::SleepFor(absl::Milliseconds(10));
  EXPECT_FALSE(abort(*bob, "shared")) << "bob aborted alice's request";
  std::thread tb([&] { b = Generate(*bob, Long("shared")); });
  for (int i = 0; i < 500 && ServerInfo(*alice).running() < 2; ++i) absl::SleepFor(absl::Milliseconds(10));
  EXPECT_EQ(ServerInfo(*alice).running(), 2u) << "bob's \"shared\" was refused";
  EXPECT_TRUE(abort(*alice, "shared"));
  ta.join();
  EXPECT_TRUE(a.completed) << a.status.error_message();
  EXPECT_EQ(a.complete.finish_reason(), v1::ABORTED);
  // Bob's stream still runs; then bob ends it himself.
  absl::SleepFor(absl::Milliseconds(100));
  EXPECT_EQ(ServerInfo(*alice).running(), 1u);
  EXPECT_FALSE(abort(*alice, "shared"));
  EXPECT_TRUE(abort(*bob, "shared"));
  tb.join();
  EXPECT_EQ(b.complete.finish_reason(), v1::ABORTED);
  // An overlong id names the field and the limit.
  v1::GenerateRequest r = Greedy(1);
  r.set_prompt("x");
  r.set_request_id(std::string(300, 'r'));
  GenerateOutcome o = Generate(*alice, r);
  EXPECT_EQ(o.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(o.status.error_message().find("256"), std::string::npos) << o.status.error_message();
}

// Issue 15, point 6: no second server shares the public port (SO_REUSEPORT).
TEST_F(FailureTest, ASecondCoordinatorOnATakenPortFailsNamingListen) {
  Coordinator c = Start();
  ASSERT_TRUE(c.stub);
  Process second({BinaryPath("tools/coordinator/tpserve-coordinator"), "--model", model_, "--tp", "2",
                  "--listen", c.address, "--spawn-workers", "--worker-timeout", "20s",
                  "--worker-binary", BinaryPath("tools/worker/tpserve-worker")},
                 dir_.path() + "/second.log");
  const int rc = second.Wait(absl::Seconds(60));
  EXPECT_NE(rc, 0) << second.Log();
  EXPECT_NE(rc, -1) << "the second coordinator is still running:\n" << second.Log();
  EXPECT_NE(second.Log().find("--listen"), std::string::npos) << second.Log();
  EXPECT_NE(second.Log().find(c.address), std::string::npos) << second.Log();
  v1::GenerateRequest r = Greedy(1);
  r.set_prompt("x");
  EXPECT_TRUE(Generate(*c.stub, r).status.ok());  // the first one still serves
}

// Issue 15, point 8: the model's name, not the server's path to it.
TEST_F(FailureTest, ModelInfoNamesTheModelWithoutItsPath) {
  Coordinator c = Start();
  ASSERT_TRUE(c.stub);
  grpc::ClientContext ctx;
  v1::ModelInfo info;
  ASSERT_TRUE(c.stub->GetModelInfo(&ctx, v1::ModelInfoRequest(), &info).ok());
  EXPECT_EQ(info.model_name(), model_.substr(model_.rfind('/') + 1));
  EXPECT_EQ(info.model_name().find('/'), std::string::npos) << info.model_name();
}

TEST_F(FailureTest, CancellingMidStreamReturnsTheBlocks) {
  Coordinator c = Start();
  ASSERT_TRUE(c.stub);
  const uint64_t total = ServerInfo(*c.stub).num_blocks();
  ASSERT_EQ(ServerInfo(*c.stub).free_blocks(), total);
  {
    grpc::ClientContext ctx;
    auto reader = c.stub->Generate(&ctx, Long());
    v1::GenerateResponse r;
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(reader->Read(&r));
    EXPECT_LT(ServerInfo(*c.stub).free_blocks(), total) << "the running stream holds no blocks?";
    ctx.TryCancel();
    while (reader->Read(&r)) {
    }
    EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
  }
  v1::ServerInfo info;
  for (int i = 0; i < 500; ++i) {
    info = ServerInfo(*c.stub);
    if (info.free_blocks() == total && info.running() == 0) break;
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_EQ(info.free_blocks(), total);
  EXPECT_EQ(info.running(), 0u);
  // A deadline does the same.
  GenerateOutcome timed = Generate(*c.stub, Long(), absl::Milliseconds(300));
  EXPECT_EQ(timed.status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  for (int i = 0; i < 500; ++i) {
    info = ServerInfo(*c.stub);
    if (info.free_blocks() == total && info.running() == 0) break;
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_EQ(info.free_blocks(), total);
  // Issue 33, item 4: the client ended both, so both are aborts in the
  // figures (request_success_total{finished_reason="abort"}), not failures.
  EXPECT_EQ(info.requests_failed(), 0u);
  ASSERT_TRUE(info.requests_finished().contains("abort"));
  EXPECT_EQ(info.requests_finished().at("abort"), 2u);
}

TEST_F(FailureTest, KillingAWorkerEndsStreamsUnavailableAndNamesTheRank) {
  Coordinator c = Start();
  ASSERT_TRUE(c.stub);
  const int pid = WorkerPid(ServerInfo(*c.stub), 1);
  ASSERT_GT(pid, 0);

  grpc::ClientContext ctx;
  auto reader = c.stub->Generate(&ctx, Long());
  v1::GenerateResponse r;
  ASSERT_TRUE(reader->Read(&r));
  ASSERT_EQ(kill(pid, SIGKILL), 0);
  while (reader->Read(&r)) {
  }
  grpc::Status s = reader->Finish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE) << s.error_message();
  EXPECT_NE(s.error_message().find("worker rank 1"), std::string::npos) << s.error_message();

  AwaitLine(*c.process, "tpserve-coordinator: worker rank 1", absl::Seconds(30));  // logged as it happens
  int rc = -1;
  Client({"health", "--server", c.address, "--service", "tpserve.liveness"}, &rc);
  EXPECT_EQ(rc, 0) << "liveness stays SERVING while the coordinator replaces its workers";
  // Then the group is replaced (tests/e2e/recovery_test.cc has the details).
  EXPECT_TRUE(AwaitServing(*c.stub)) << c.process->Log();
}

// A worker that stops (SIGSTOP: no crash, no closed connection, no heartbeat)
// is named by the step watchdog within --step-timeout: streams end
// UNAVAILABLE naming the rank; the stopped process is killed and replaced.
TEST_F(FailureTest, AStoppedWorkerIsNamedByTheStepWatchdog) {
  Coordinator c = Start({"--step-timeout", "2s"});
  ASSERT_TRUE(c.stub);
  const int pid = WorkerPid(ServerInfo(*c.stub), 1);
  ASSERT_GT(pid, 0);
  grpc::ClientContext ctx;
  auto reader = c.stub->Generate(&ctx, Long());
  v1::GenerateResponse r;
  ASSERT_TRUE(reader->Read(&r));
  ASSERT_EQ(kill(pid, SIGSTOP), 0);
  const absl::Time stopped = absl::Now();
  while (reader->Read(&r)) {
  }
  const grpc::Status s = reader->Finish();
  const absl::Duration noticed = absl::Now() - stopped;
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE) << s.error_message();
  EXPECT_NE(s.error_message().find("worker rank 1"), std::string::npos) << s.error_message();
  EXPECT_NE(s.error_message().find("stalled"), std::string::npos) << s.error_message();
  EXPECT_GE(noticed, absl::Seconds(1)) << "only the watchdog can see a stopped process";
  EXPECT_LT(noticed, absl::Seconds(20)) << "well before the collectives' timeout (step timeout + 30 s)";
  EXPECT_TRUE(AwaitServing(*c.stub)) << c.process->Log();
  EXPECT_NE(WorkerPid(ServerInfo(*c.stub), 1), pid) << "the stopped rank was replaced";
}

TEST_F(FailureTest, SigtermDrainsRunningStreamsThenExitsZero) {
  Coordinator c = Start({"--drain-timeout", "60s"});
  ASSERT_TRUE(c.stub);
  GenerateOutcome running;
  v1::GenerateRequest r = Greedy(300);
  r.set_prompt("drain me");
  std::thread t([&] { running = Generate(*c.stub, r); });
  for (int i = 0; i < 500 && ServerInfo(*c.stub).running() == 0; ++i) absl::SleepFor(absl::Milliseconds(5));
  c.process->Signal(SIGTERM);
  // New requests are refused while it drains.
  grpc::StatusCode refused = grpc::StatusCode::OK;
  for (int i = 0; i < 200 && refused == grpc::StatusCode::OK; ++i) {
    v1::GenerateRequest small = Greedy(1);
    small.set_prompt("x");
    refused = Generate(*c.stub, small, absl::Seconds(5)).status.error_code();
  }
  EXPECT_EQ(refused, grpc::StatusCode::UNAVAILABLE);
  t.join();
  EXPECT_TRUE(running.status.ok()) << running.status.error_message();
  EXPECT_EQ(running.complete.finish_reason(), v1::LENGTH);
  EXPECT_EQ(running.tokens.size(), 300u);
  EXPECT_EQ(c.process->Wait(absl::Seconds(30)), 0) << c.process->Log();
  EXPECT_NE(c.process->Log().find("Shutdown done"), std::string::npos) << "the workers got no Shutdown";
  EXPECT_EQ(c.process->Log().find("died:"), std::string::npos) << "a clean exit logged as a death";
}

TEST_F(FailureTest, DrainTimeoutCutsStreamsWithAborted) {
  Coordinator c = Start({"--drain-timeout", "300ms"});
  ASSERT_TRUE(c.stub);
  GenerateOutcome running;
  std::thread t([&] { running = Generate(*c.stub, Long()); });
  for (int i = 0; i < 500 && ServerInfo(*c.stub).running() == 0; ++i) absl::SleepFor(absl::Milliseconds(5));
  c.process->Signal(SIGTERM);
  t.join();
  EXPECT_TRUE(running.status.ok()) << running.status.error_message();
  EXPECT_EQ(running.complete.finish_reason(), v1::ABORTED);
  EXPECT_EQ(c.process->Wait(absl::Seconds(30)), 0) << c.process->Log();
}

TEST_F(FailureTest, StartupWithoutWorkersTimesOutNamingTheMissingRanks) {
  Process p({BinaryPath("tools/coordinator/tpserve-coordinator"), "--model", model_, "--tp", "2", "--listen",
             "127.0.0.1:0", "--worker-timeout", "1s"},
            dir_.path() + "/alone.log");
  EXPECT_EQ(p.Wait(absl::Seconds(30)), 1);
  EXPECT_NE(p.Log().find("ranks 0, 1 of 2 have not connected"), std::string::npos) << p.Log();
}

TEST_F(FailureTest, ASpawnedWorkerThatDiesBeforeHelloEndsStartupAtOnce) {
  // /bin/false stands in for a worker that crashes while starting: the
  // coordinator reports it instead of waiting out --worker-timeout.
  const absl::Time start = absl::Now();
  Process p({BinaryPath("tools/coordinator/tpserve-coordinator"), "--model", model_, "--tp", "2", "--listen",
             "127.0.0.1:0", "--spawn-workers", "--worker-binary", "/bin/false", "--worker-timeout", "120s"},
            dir_.path() + "/dies.log");
  EXPECT_EQ(p.Wait(absl::Seconds(60)), 1) << p.Log();
  EXPECT_LT(absl::Now() - start, absl::Seconds(60));
  EXPECT_NE(p.Log().find("exited with status 1"), std::string::npos) << p.Log();
  EXPECT_EQ(p.Log().find("have not connected"), std::string::npos) << "waited for the timeout:\n" << p.Log();
}

TEST_F(FailureTest, BackendCudaWithoutAGpuIsAClearStartupError) {
  // CI has no GPU: the workers refuse Load and the coordinator exits naming why.
  // (With a GPU the coordinator serves instead: then there is nothing to check here.)
  Process p({BinaryPath("tools/coordinator/tpserve-coordinator"), "--model", model_, "--tp", "2", "--listen",
             "127.0.0.1:0", "--spawn-workers", "--worker-binary", BinaryPath("tools/worker/tpserve-worker"),
             "--backend", "cuda", "--worker-timeout", "60s"},
            dir_.path() + "/cuda.log");
  const int rc = p.Wait(absl::Seconds(90));
  if (p.Log().find("sees no CUDA device") == std::string::npos &&
      p.Log().find("built without CUDA") == std::string::npos) {
    p.Signal(SIGTERM);
    GTEST_SKIP() << "the workers accepted --backend cuda (a GPU is present):\n" << p.Log();
  }
  EXPECT_EQ(rc, 1) << p.Log();
  EXPECT_NE(p.Log().find("--backend cpu"), std::string::npos) << p.Log();
}

TEST_F(FailureTest, ClientStreamsJsonAndReportsErrors) {
  Coordinator c = Start();
  ASSERT_TRUE(c.stub);
  int rc = -1;
  const std::string out = Client({"generate", "--server", c.address, "--prompt", "hi there", "--max-tokens", "5",
                                  "--temperature", "0", "--ignore-eos", "--json"},
                                 &rc);
  ASSERT_EQ(rc, 0) << out;
  std::istringstream lines(out);
  std::string line;
  // How the 5 tokens group into chunks is timing: the coordinator merges the
  // chunks a slow reader left waiting (coordinator/response_queue.h).
  int chunks = 0;
  size_t tokens = 0;
  nlohmann::json last;
  while (std::getline(lines, line)) {
    last = nlohmann::json::parse(line);
    if (!last.contains("token_ids")) continue;
    ++chunks;
    EXPECT_FALSE(last.at("token_ids").empty()) << line;
    tokens += last.at("token_ids").size();
  }
  EXPECT_GE(chunks, 1) << out;
  EXPECT_EQ(tokens, 5u) << out;
  EXPECT_EQ(last.at("finish_reason"), "length");
  EXPECT_EQ(last.at("usage").at("completion_tokens"), 5);
  EXPECT_TRUE(last.at("timing").contains("time_to_first_token_seconds"));

  const std::string bad = Client({"generate", "--server", c.address, "--prompt", "x", "--top-p", "2"}, &rc);
  EXPECT_EQ(rc, 1);
  EXPECT_NE(bad.find("INVALID_ARGUMENT: sampling.top_p"), std::string::npos) << bad;
  const std::string info = Client({"info", "--server", c.address}, &rc);
  EXPECT_EQ(rc, 0) << info;
  EXPECT_NE(info.find("\"tensor_parallel_size\": 2"), std::string::npos) << info;
  const std::string health = Client({"health", "--server", c.address}, &rc);
  EXPECT_EQ(rc, 0);
  EXPECT_NE(health.find("SERVING"), std::string::npos) << health;
}

}  // namespace
}  // namespace tpserve::e2e
