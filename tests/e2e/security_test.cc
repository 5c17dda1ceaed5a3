// End to end, real processes: the doors of the service (README, "Security").
// Forged workers with no or the wrong cluster secret, before and after the
// real ones, and store calls from outside are refused while the real workers
// serve; --spawn-workers makes a secret of its own; a worker port off
// loopback needs a secret; API keys, the per-client stream cap, TLS and
// mutual TLS on the public API.
#include <sys/stat.h>

#include <gtest/gtest.h>

#include <fstream>
#include <iterator>

#include "absl/strings/str_cat.h"
#include "auth/api_keys.h"
#include "auth/cluster_secret.h"
#include "proto/protocol_version.h"
#include "tests/e2e/harness.h"
#include "tpserve/internal/v1/worker.grpc.pb.h"

namespace tpserve::e2e {
namespace {

namespace v1 = tpserve::v1;
namespace iv1 = tpserve::internal::v1;

// A process that pretends to be a worker: it asks for a challenge and says
// Hello as `rank` with a proof made from `secret` (none: no proof), over
// `credentials` (plain text by default).
grpc::Status ForgedHello(const std::string& worker_address, int rank, int world,
                         const std::optional<ClusterSecret>& secret,
                         std::shared_ptr<grpc::ChannelCredentials> credentials = grpc::InsecureChannelCredentials()) {
  auto stub = iv1::Worker::NewStub(grpc::CreateChannel(worker_address, credentials));
  grpc::ClientContext challenge_context;
  iv1::ChallengeResponse challenge;
  grpc::Status status = stub->Challenge(&challenge_context, iv1::ChallengeRequest(), &challenge);
  if (!status.ok()) return status;
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(20)));
  auto stream = stub->Session(&context);
  iv1::WorkerMessage hello;
  iv1::Hello* h = hello.mutable_hello();
  h->set_protocol_version(kWorkerProtocolVersion);
  h->set_rank(rank);
  h->set_world_size(world);
  h->set_host("forger");
  h->set_device("cpu");
  h->set_challenge(challenge.challenge());
  if (secret) h->set_proof(secret->HelloProof(challenge.challenge(), rank, world));
  stream->Write(hello);
  iv1::CoordinatorMessage command;
  const bool got_command = stream->Read(&command);
  EXPECT_FALSE(got_command) << "a forged worker got a command: " << command.DebugString();
  return stream->Finish();
}

grpc::Status ForgedStoreSet(const std::string& worker_address) {
  auto stub = iv1::Worker::NewStub(grpc::CreateChannel(worker_address, grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  iv1::StoreSetRequest request;
  request.set_key("tpserve/forged");
  request.set_value(std::string(1000, 'x'));
  iv1::StoreSetResponse response;
  return stub->StoreSet(&context, request, &response);
}

grpc::Status ForgedStoreGet(const std::string& worker_address) {
  auto stub = iv1::Worker::NewStub(grpc::CreateChannel(worker_address, grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  iv1::StoreGetRequest request;
  request.set_key("tpserve/anything");
  request.set_timeout_ms(100);
  iv1::StoreGetResponse response;
  return stub->StoreGet(&context, request, &response);
}

class SecurityTest : public ::testing::Test {
 protected:
  void SetUp() override { model_ = MakeModel(dir_.path(), "qwen3", {"--seed", "8", "--max-pos", "4096"}); }

  std::string WriteFile(const std::string& name, const std::string& text, mode_t mode = 0600) {
    const std::string path = absl::StrCat(dir_.path(), "/", name);
    std::ofstream(path) << text;
    chmod(path.c_str(), mode);
    return path;
  }
  std::unique_ptr<Process> Worker(const std::string& address, int rank, int world, const std::string& secret_file) {
    std::vector<std::string> extra;
    if (!secret_file.empty()) extra = {"--cluster-secret-file", secret_file};
    return StartWorker(address, rank, world, absl::StrCat(dir_.path(), "/worker-", rank, "-", ++workers_, ".log"),
                       extra);
  }
  std::unique_ptr<Process> CoordinatorProcess(const std::vector<std::string>& extra) {
    std::vector<std::string> argv = {BinaryPath("tools/coordinator/tpserve-coordinator"), "--model", model_,
                                     "--listen", "127.0.0.1:0", "--worker-timeout", "60s"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return std::make_unique<Process>(argv, dir_.path() + "/coordinator.log");
  }

  TempDir dir_;
  std::string model_;
  int workers_ = 0;
};

TEST_F(SecurityTest, ForgedWorkersAndStoreCallsAreRefusedAndTheRealWorkersServe) {
  const std::string secret_file = WriteFile("cluster-secret", "the-real-cluster-secret-0123456789\n");
  const std::string other_file = WriteFile("other-secret", "a-wrong-cluster-secret-0123456789\n");
  std::unique_ptr<Process> coordinator = CoordinatorProcess({"--tp", "2", "--cluster-secret-file", secret_file});
  const std::string workers = AwaitLine(*coordinator, "tpserve-coordinator: workers connect to ");
  const std::string public_address = AwaitLine(*coordinator, "serving tpserve.v1.Generation on ");
  ASSERT_FALSE(workers.empty());

  // Before the real workers: every forged rank and store call is refused.
  const absl::StatusOr<ClusterSecret> wrong = ClusterSecret::FromFile(other_file, "test");
  ASSERT_TRUE(wrong.ok());
  EXPECT_EQ(ForgedHello(workers, 0, 2, std::nullopt).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(ForgedHello(workers, 1, 2, *wrong).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(ForgedStoreSet(workers).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(ForgedStoreGet(workers).error_code(), grpc::StatusCode::UNAUTHENTICATED);

  std::unique_ptr<Process> rank0 = Worker(workers, 0, 2, secret_file);
  std::unique_ptr<Process> rank1 = Worker(workers, 1, 2, secret_file);
  AwaitLine(*coordinator, "tpserve-coordinator: ready");
  auto stub = v1::Generation::NewStub(grpc::CreateChannel(public_address, grpc::InsecureChannelCredentials()));
  v1::GenerateRequest request = Greedy(6);
  request.set_prompt("hello");
  GenerateOutcome out = Generate(*stub, request);
  EXPECT_TRUE(out.status.ok()) << out.status.error_message() << "\n" << coordinator->Log();
  EXPECT_EQ(out.tokens.size(), 6u);

  // After: still refused (UNAUTHENTICATED, not "rank taken"), the service unharmed.
  EXPECT_EQ(ForgedHello(workers, 1, 2, *wrong).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(ForgedHello(workers, 0, 2, std::nullopt).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(ForgedStoreSet(workers).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_TRUE(Generate(*stub, request).status.ok());
  const std::string log = coordinator->Log();
  EXPECT_NE(log.find("refused a worker"), std::string::npos) << log;
  EXPECT_EQ(log.find("the-real-cluster-secret"), std::string::npos) << "the secret is never logged";
}

TEST_F(SecurityTest, AWorkerWithoutTheSecretIsToldHowToGetIt) {
  const std::string secret_file = WriteFile("cluster-secret", "the-real-cluster-secret-0123456789\n");
  std::unique_ptr<Process> coordinator = CoordinatorProcess({"--tp", "1", "--cluster-secret-file", secret_file});
  const std::string workers = AwaitLine(*coordinator, "tpserve-coordinator: workers connect to ");
  std::unique_ptr<Process> worker = Worker(workers, 0, 1, "");
  EXPECT_EQ(worker->Wait(absl::Seconds(60)), 1);
  EXPECT_NE(worker->Log().find("--cluster-secret-file"), std::string::npos) << worker->Log();
}

TEST_F(SecurityTest, SpawnedWorkersShareAFreshSecretThatForgersLack) {
  Coordinator c = StartCoordinator(model_, 1, dir_.path() + "/spawned.log");
  ASSERT_TRUE(c.stub);
  const std::string workers = AwaitLine(*c.process, "tpserve-coordinator: workers connect to ");
  EXPECT_EQ(ForgedHello(workers, 0, 1, std::nullopt).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(ForgedStoreSet(workers).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  v1::GenerateRequest request = Greedy(4);
  request.set_prompt("hi");
  EXPECT_TRUE(Generate(*c.stub, request).status.ok());
}

TEST_F(SecurityTest, AWorkerPortOffLoopbackNeedsASecret) {
  std::unique_ptr<Process> coordinator =
      CoordinatorProcess({"--tp", "1", "--worker-listen", "0.0.0.0:0", "--worker-timeout", "5s"});
  EXPECT_NE(coordinator->Wait(absl::Seconds(60)), 0);
  EXPECT_NE(coordinator->Log().find("--cluster-secret-file"), std::string::npos) << coordinator->Log();
}

// A long greedy request (thousands of steps unless cancelled).
v1::GenerateRequest Long() {
  v1::GenerateRequest r = Greedy(4000);
  r.set_prompt("count forever");
  return r;
}

// Calls with "authorization: Bearer KEY" (none when `key` is empty).
std::unique_ptr<grpc::ClientContext> KeyedContext(const std::string& key) {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(60)));
  if (!key.empty()) context->AddMetadata("authorization", absl::StrCat("Bearer ", key));
  return context;
}

grpc::Status Tokenize(v1::Generation::Stub& stub, const std::string& key) {
  std::unique_ptr<grpc::ClientContext> context = KeyedContext(key);
  v1::TokenizeRequest request;
  request.set_text("hello");
  v1::TokenizeResponse response;
  return stub.Tokenize(context.get(), request, &response);
}

// The first response of a stream (the stream stays open).
struct OpenStream {
  std::unique_ptr<grpc::ClientContext> context;
  std::unique_ptr<grpc::ClientReader<v1::GenerateResponse>> reader;
  bool got_first = false;
};
OpenStream Open(v1::Generation::Stub& stub, const std::string& key) {
  OpenStream s;
  s.context = KeyedContext(key);
  s.reader = stub.Generate(s.context.get(), Long());
  v1::GenerateResponse first;
  s.got_first = s.reader->Read(&first);
  return s;
}

TEST_F(SecurityTest, ApiKeysGuardEveryCallAndScopeTheStreamCap) {
  const std::string alice = "alice-key-0123456789abcdef", bob = "bob-key-0123456789abcdef";
  const std::string keys = WriteFile("api-keys", absl::StrCat("alice ", alice, "\nbob ", bob, "\n"));
  Coordinator c = StartCoordinator(model_, 1, dir_.path() + "/keys.log",
                                   {"--api-key-file", keys, "--max-streams-per-client", "2"});
  ASSERT_TRUE(c.process);
  auto stub = v1::Generation::NewStub(grpc::CreateChannel(c.address, grpc::InsecureChannelCredentials()));
  EXPECT_EQ(Tokenize(*stub, "").error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(Tokenize(*stub, "not-a-key-0123456789abc").error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_TRUE(Tokenize(*stub, alice).ok());
  for (const std::string& key : {std::string(), alice}) {
    std::unique_ptr<grpc::ClientContext> context = KeyedContext(key);
    v1::DetokenizeRequest request;
    request.add_token_ids(1);
    v1::DetokenizeResponse response;
    EXPECT_EQ(stub->Detokenize(context.get(), request, &response).error_code(),
              key.empty() ? grpc::StatusCode::UNAUTHENTICATED : grpc::StatusCode::OK);
    std::unique_ptr<grpc::ClientContext> loads_context = KeyedContext(key);  // a router needs a key too
    v1::Loads loads;
    EXPECT_EQ(stub->GetLoads(loads_context.get(), v1::LoadsRequest(), &loads).error_code(),
              key.empty() ? grpc::StatusCode::UNAUTHENTICATED : grpc::StatusCode::OK);
  }
  {
    std::unique_ptr<grpc::ClientContext> context = KeyedContext("");
    v1::GenerateResponse r;
    auto reader = stub->Generate(context.get(), Long());
    EXPECT_FALSE(reader->Read(&r));
    EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::UNAUTHENTICATED);
  }

  // Two streams for alice fill her cap; a third is refused, bob still gets in.
  OpenStream a1 = Open(*stub, alice), a2 = Open(*stub, alice);
  ASSERT_TRUE(a1.got_first && a2.got_first);
  OpenStream a3 = Open(*stub, alice);
  EXPECT_FALSE(a3.got_first);
  const grpc::Status refused = a3.reader->Finish();
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(refused.error_message().find("--max-streams-per-client"), std::string::npos) << refused.error_message();
  OpenStream b1 = Open(*stub, bob);
  EXPECT_TRUE(b1.got_first);
  // Alice's id space is hers: bob cannot abort her request by its id.
  for (OpenStream* s : {&a1, &a2, &b1}) s->context->TryCancel();
  for (OpenStream* s : {&a1, &a2, &b1}) (void)s->reader->Finish();
  // Once her streams ended she may open again.
  absl::SleepFor(absl::Milliseconds(200));
  OpenStream again = Open(*stub, alice);
  EXPECT_TRUE(again.got_first);
  again.context->TryCancel();
  (void)again.reader->Finish();

  int rc = 0;
  const std::string client_log = dir_.path() + "/client.out";
  rc = RunCommand({BinaryPath("tools/client/tpserve-client"), "--server", c.address, "--api-key-file", keys,
                   "--prompt", "hello", "--max-tokens", "3", "--temperature", "0", "generate"},
                  client_log);
  EXPECT_EQ(rc, 0) << client_log;
  EXPECT_EQ(c.process->Log().find(alice), std::string::npos) << "keys are never logged";
}

// A self-signed certificate for 127.0.0.1 and its key, made by openssl.
bool MakeCertificate(const std::string& dir, const std::string& name) {
  const int rc = RunCommand({"openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                             "-nodes", "-days", "2", "-subj", absl::StrCat("/CN=", name), "-addext",
                             "subjectAltName=IP:127.0.0.1,DNS:localhost", "-keyout", dir + "/" + name + ".key",
                             "-out", dir + "/" + name + ".pem"},
                            dir + "/openssl-" + name + ".log");
  chmod((dir + "/" + name + ".key").c_str(), 0600);
  return rc == 0;
}

std::string Pem(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

TEST_F(SecurityTest, TlsAndMutualTlsOnThePublicApi) {
  const std::string d = dir_.path();
  ASSERT_TRUE(MakeCertificate(d, "server") && MakeCertificate(d, "client") && MakeCertificate(d, "stranger"))
      << "openssl could not make test certificates";
  Coordinator c = StartCoordinator(model_, 1, d + "/tls.log",
                                   {"--tls-cert", d + "/server.pem", "--tls-key", d + "/server.key",
                                    "--tls-client-ca", d + "/client.pem"});
  ASSERT_TRUE(c.process);
  auto channel = [&](const std::string& client) {
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = Pem(d + "/server.pem");
    if (!client.empty()) {
      ssl.pem_cert_chain = Pem(d + "/" + client + ".pem");
      ssl.pem_private_key = Pem(d + "/" + client + ".key");
    }
    return v1::Generation::NewStub(grpc::CreateChannel(c.address, grpc::SslCredentials(ssl)));
  };
  EXPECT_TRUE(Tokenize(*channel("client"), "").ok());
  EXPECT_FALSE(Tokenize(*channel(""), "").ok()) << "no client certificate";
  EXPECT_FALSE(Tokenize(*channel("stranger"), "").ok()) << "a certificate the CA did not sign";
  auto plain = v1::Generation::NewStub(grpc::CreateChannel(c.address, grpc::InsecureChannelCredentials()));
  EXPECT_FALSE(Tokenize(*plain, "").ok()) << "plain text to a TLS port";

  const std::string client_log = d + "/tls-client.out";
  const int rc = RunCommand({BinaryPath("tools/client/tpserve-client"), "--server", c.address, "--tls-ca",
                             d + "/server.pem", "--tls-cert", d + "/client.pem", "--tls-key", d + "/client.key",
                             "--prompt", "hello", "--max-tokens", "3", "--temperature", "0", "generate"},
                            client_log);
  EXPECT_EQ(rc, 0) << Pem(client_log);
}

// Issue 15: TLS on the internal channel. With --worker-tls-cert/-key/-ca the
// worker port speaks mutual TLS: the spawned workers are given the CA and a
// certificate and serve; plain text, TLS without a client certificate, and a
// certificate the CA did not sign are all refused before any Hello.
TEST_F(SecurityTest, TheWorkerPortSpeaksMutualTls) {
  const std::string d = dir_.path();
  ASSERT_TRUE(MakeCertificate(d, "cluster") && MakeCertificate(d, "stranger"))
      << "openssl could not make test certificates";
  Coordinator c = StartCoordinator(model_, 2, d + "/coordinator.log",
                                   {"--worker-tls-cert", d + "/cluster.pem", "--worker-tls-key", d + "/cluster.key",
                                    "--worker-tls-ca", d + "/cluster.pem"});
  ASSERT_TRUE(c.stub);
  v1::GenerateRequest request = Greedy(4);
  request.set_prompt("over mutual TLS");
  const GenerateOutcome out = Generate(*c.stub, request);
  EXPECT_TRUE(out.status.ok()) << out.status.error_message();
  EXPECT_EQ(out.tokens.size(), 4u);
  const std::string log = c.process->Log();
  EXPECT_NE(log.find("the worker port speaks mutual TLS"), std::string::npos) << log;

  const std::string workers = AwaitLine(*c.process, "tpserve-coordinator: workers connect to ");
  EXPECT_NE(ForgedHello(workers, 0, 2, std::nullopt).error_code(), grpc::StatusCode::OK) << "plain text";
  grpc::SslCredentialsOptions no_client_cert;
  no_client_cert.pem_root_certs = Pem(d + "/cluster.pem");
  EXPECT_EQ(ForgedHello(workers, 0, 2, std::nullopt, grpc::SslCredentials(no_client_cert)).error_code(),
            grpc::StatusCode::UNAVAILABLE)
      << "no client certificate: the handshake fails";
  grpc::SslCredentialsOptions stranger = no_client_cert;
  stranger.pem_cert_chain = Pem(d + "/stranger.pem");
  stranger.pem_private_key = Pem(d + "/stranger.key");
  EXPECT_EQ(ForgedHello(workers, 0, 2, std::nullopt, grpc::SslCredentials(stranger)).error_code(),
            grpc::StatusCode::UNAVAILABLE)
      << "a certificate the cluster CA did not sign";
  EXPECT_TRUE(Generate(*c.stub, request).status.ok()) << "the real workers serve on";
}

// Identity through the HTTP front (issue 29): tpserve-http names each
// caller's API key to the coordinator, which trusts its key to do so
// (--trusted-fronts): two keys through one tpserve-http each have their own
// stream cap and request-id space, one cannot abort the other's request, and
// a caller that is no trusted front cannot name a client.
TEST_F(SecurityTest, TheHttpFrontNamesItsCallersAndNobodyElseCan) {
  const std::string front = "front-key-0123456789abcdef", direct = "direct-key-0123456789abcdef";
  const std::string alice = "alice-http-0123456789abcdef", bob = "bob-http-0123456789abcdef";
  const std::string keys = WriteFile("coordinator-keys", absl::StrCat("front ", front, "\ndirect ", direct, "\n"));
  const std::string front_key = WriteFile("front-key", front + "\n");
  const std::string http_keys = WriteFile("http-keys", absl::StrCat("alice ", alice, "\nbob ", bob, "\n"));
  Coordinator c = StartCoordinator(model_, 1, dir_.path() + "/front.log",
                                   {"--api-key-file", keys, "--trusted-fronts", "front", "--max-streams-per-client", "1"});
  ASSERT_TRUE(c.process);
  std::string base;
  std::unique_ptr<Process> http = StartHttp(c.address, {"--api-key-file", http_keys, "--server-api-key-file", front_key},
                                            dir_.path() + "/http.log", &base);
  ASSERT_FALSE(base.empty()) << http->Log();
  auto post = [&](const std::string& key, const std::string& id, const std::string& body) {
    std::vector<std::string> argv = {"curl", "-sS", "-N", "-w", "\nHTTP %{http_code}\n", base + "/v1/completions",
                                     "-H", "Authorization: Bearer " + key, "-H", "Content-Type: application/json",
                                     "--data-binary", body};
    if (!id.empty()) argv.insert(argv.end(), {"-H", "X-Request-Id: " + id});
    return argv;
  };
  auto read = [](const std::string& path) {
    std::ifstream in(path);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  };
  const std::string long_body = R"({"prompt": "count forever", "max_tokens": 4000, "temperature": 0,
                                    "ignore_eos": true, "stream": true})";
  const std::string short_body = R"({"prompt": "hello", "max_tokens": 2, "temperature": 0})";
  // Alice's stream fills her cap of one.
  Process alice_stream(post(alice, "job-1", long_body), dir_.path() + "/alice.out");
  const absl::Time until = absl::Now() + absl::Seconds(30);
  while (absl::Now() < until && alice_stream.Log().find("data: ") == std::string::npos) absl::SleepFor(absl::Milliseconds(20));
  ASSERT_NE(alice_stream.Log().find("data: "), std::string::npos) << alice_stream.Log();
  const std::string alice_second = dir_.path() + "/alice-2.out";
  RunCommand(post(alice, "", short_body), alice_second);
  EXPECT_NE(read(alice_second).find("HTTP 429"), std::string::npos) << read(alice_second);
  EXPECT_NE(read(alice_second).find("--max-streams-per-client"), std::string::npos) << read(alice_second);
  // Bob has his own cap, and his own ids: the same X-Request-Id is no conflict.
  const std::string bob_out = dir_.path() + "/bob.out";
  RunCommand(post(bob, "job-1", short_body), bob_out);
  EXPECT_NE(read(bob_out).find("HTTP 200"), std::string::npos) << read(bob_out);

  // The front speaking for bob cannot abort alice's job-1; for alice it can.
  auto stub = v1::Generation::NewStub(grpc::CreateChannel(c.address, grpc::InsecureChannelCredentials()));
  auto abort = [&](const std::string& key, const std::string& name, v1::AbortResponse* response) {
    std::unique_ptr<grpc::ClientContext> context = KeyedContext(key);
    if (!name.empty()) context->AddMetadata(kClientNameMetadata, name);
    v1::AbortRequest request;
    request.set_request_id("job-1");
    return stub->Abort(context.get(), request, response);
  };
  v1::AbortResponse response;
  ASSERT_TRUE(abort(front, "bob", &response).ok());
  EXPECT_FALSE(response.found()) << "bob aborted alice's request";
  ASSERT_TRUE(abort(front, "", &response).ok());
  EXPECT_FALSE(response.found()) << "the front's own identity is not alice's";
  // A caller that is no trusted front cannot name a client, for any call.
  const grpc::Status forged = abort(direct, "alice", &response);
  EXPECT_EQ(forged.error_code(), grpc::StatusCode::PERMISSION_DENIED) << forged.error_message();
  EXPECT_NE(forged.error_message().find("--trusted-fronts"), std::string::npos) << forged.error_message();
  {
    std::unique_ptr<grpc::ClientContext> context = KeyedContext(direct);
    context->AddMetadata(kClientNameMetadata, "alice");
    auto reader = stub->Generate(context.get(), Long());
    v1::GenerateResponse r;
    EXPECT_FALSE(reader->Read(&r));
    EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::PERMISSION_DENIED);
  }
  ASSERT_TRUE(abort(front, "alice", &response).ok());
  EXPECT_TRUE(response.found());
  EXPECT_EQ(alice_stream.Wait(absl::Seconds(30)), 0) << alice_stream.Log();
  EXPECT_NE(alice_stream.Log().find(R"("finish_reason":"abort")"), std::string::npos) << alice_stream.Log();
  EXPECT_NE(alice_stream.Log().find("data: [DONE]"), std::string::npos) << alice_stream.Log();
}

}  // namespace
}  // namespace tpserve::e2e
