#include "tests/e2e/harness.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"
#include "tests/testing/tiny_model.h"

namespace tpserve::e2e {

namespace v1 = tpserve::v1;

std::string BinaryPath(const std::string& relative) {
  return absl::StrCat(TPSERVE_BINARY_DIR, "/", relative);
}

TempDir::TempDir() {
  const char* tmp = std::getenv("TMPDIR");
  std::string pattern = absl::StrCat(tmp && *tmp ? tmp : "/tmp", "/tpserve-e2e-XXXXXX");
  char* made = mkdtemp(pattern.data());
  if (made == nullptr) ADD_FAILURE() << "mkdtemp failed";
  path_ = pattern;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

namespace {

pid_t Spawn(const std::vector<std::string>& argv, const std::string& log) {
  const pid_t parent = getpid();
  pid_t pid = fork();
  if (pid == 0) {
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
      close(fd);
    }
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execvp(args[0], args.data());  // a bare name is looked up on PATH
    _exit(127);
  }
  return pid;
}

int ExitStatus(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// In a sanitizer build (scripts/test-sanitized.sh) a child's report goes to its
// stderr, which Spawn sends to its log: the test that started it fails, even when the
// process was then killed on purpose or its exit status was not looked at.
void ExpectNoSanitizerReport(const std::string& log) {
  const std::string text = ReadFile(log);
  for (const char* marker : {"ERROR: AddressSanitizer", "ERROR: LeakSanitizer", ": runtime error: "}) {
    const size_t at = text.find(marker);
    if (at == std::string::npos) continue;
    const size_t from = at > 2000 ? at - 2000 : 0;
    ADD_FAILURE() << "sanitizer report in " << log << ":\n" << text.substr(from, 8000);
    return;
  }
}

}  // namespace

int RunCommand(const std::vector<std::string>& argv, const std::string& log) {
  const pid_t pid = Spawn(argv, log);
  int status = 0;
  waitpid(pid, &status, 0);
  ExpectNoSanitizerReport(log);
  return ExitStatus(status);
}

std::string MakeModel(const std::string& root, const std::string& arch, const std::vector<std::string>& extra) {
  const std::string dir = absl::StrCat(root, "/", arch);
  std::vector<std::string> args = {"--arch", arch};
  args.insert(args.end(), extra.begin(), extra.end());
  testing_util::MakeModel(dir, args);
  return dir;
}

Process::Process(const std::vector<std::string>& argv, const std::string& log) : log_(log) {
  pid_ = Spawn(argv, log);
}

Process::~Process() {
  if (!reaped_ && pid_ > 0) {
    // SIGTERM first: a process that ends on its own runs LeakSanitizer's
    // check at exit (and a coordinator shuts its workers down, which then do
    // too); one that does not within the grace gets SIGKILL.
    kill(pid_, SIGTERM);
    if (Wait(kTeardownGrace) == -1) {
      kill(-pid_, SIGKILL);
      kill(pid_, SIGKILL);
      int status;
      waitpid(pid_, &status, 0);
    }
  }
  if (pid_ > 0) ExpectNoSanitizerReport(log_);
}

void Process::Signal(int sig) {
  if (!reaped_) kill(pid_, sig);
}

int Process::Wait(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    int status = 0;
    const pid_t r = waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
      reaped_ = true;
      kill(-pid_, SIGKILL);  // anything left in its group
      return ExitStatus(status);
    }
    if (absl::Now() >= deadline) return -1;
    absl::SleepFor(absl::Milliseconds(20));
  }
}

std::string Process::Log() const { return ReadFile(log_); }

Coordinator StartCoordinator(const std::string& model_dir, int tp, const std::string& log,
                             const std::vector<std::string>& extra) {
  Coordinator c;
  std::vector<std::string> argv = {BinaryPath("tools/coordinator/tpserve-coordinator"),
                                   "--model", model_dir, "--tp", std::to_string(tp),
                                   "--listen", "127.0.0.1:0", "--spawn-workers",
                                   "--worker-timeout", "60s",
                                   // Teardown's SIGTERM cuts streams left open soon (extra may override).
                                   "--drain-timeout", "1s",
                                   "--worker-binary", BinaryPath("tools/worker/tpserve-worker")};
  argv.insert(argv.end(), extra.begin(), extra.end());
  c.process = std::make_unique<Process>(argv, log);
  const absl::Time deadline = absl::Now() + absl::Seconds(90);
  const std::string marker = "tpserve-coordinator: serving tpserve.v1.Generation on ";
  while (absl::Now() < deadline) {
    const std::string text = c.process->Log();
    const size_t at = text.find(marker);
    if (at != std::string::npos && c.address.empty()) {
      const size_t end = text.find('\n', at);
      c.address = text.substr(at + marker.size(), end - at - marker.size());
    }
    if (!c.address.empty() && text.find("tpserve-coordinator: ready") != std::string::npos) {
      c.stub = v1::Generation::NewStub(grpc::CreateChannel(c.address, grpc::InsecureChannelCredentials()));
      return c;
    }
    if (c.process->Wait(absl::ZeroDuration()) != -1) break;
    absl::SleepFor(absl::Milliseconds(50));
  }
  ADD_FAILURE() << "the coordinator did not get ready:\n" << c.process->Log();
  return c;
}

GenerateOutcome Generate(v1::Generation::Stub& stub, const v1::GenerateRequest& request, absl::Duration timeout) {
  GenerateOutcome out;
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  auto reader = stub.Generate(&context, request);
  v1::GenerateResponse r;
  while (reader->Read(&r)) {
    if (r.has_chunk()) {
      ++out.chunks;
      for (uint32_t t : r.chunk().token_ids()) out.tokens.push_back(static_cast<int32_t>(t));
      out.text += r.chunk().text();
    } else if (r.has_complete()) {
      out.completed = true;
      out.complete = r.complete();
    }
  }
  out.status = reader->Finish();
  return out;
}

v1::GenerateRequest Greedy(int max_tokens) {
  v1::GenerateRequest r;
  r.mutable_sampling()->set_temperature(0);
  r.mutable_stopping()->set_max_tokens(static_cast<uint32_t>(max_tokens));
  r.mutable_stopping()->set_ignore_eos(true);
  return r;
}

std::vector<int32_t> Tokenize(v1::Generation::Stub& stub, const v1::TokenizeRequest& request) {
  grpc::ClientContext context;
  v1::TokenizeResponse response;
  grpc::Status s = stub.Tokenize(&context, request, &response);
  EXPECT_TRUE(s.ok()) << s.error_message();
  return {response.token_ids().begin(), response.token_ids().end()};
}

v1::ServerInfo ServerInfo(v1::Generation::Stub& stub) {
  grpc::ClientContext context;
  v1::ServerInfo info;
  grpc::Status s = stub.GetServerInfo(&context, v1::ServerInfoRequest(), &info);
  EXPECT_TRUE(s.ok()) << s.error_message();
  return info;
}

int WorkerPid(const v1::ServerInfo& info, int rank) {
  if (rank >= info.workers_size()) return 0;
  const std::string& w = info.workers(rank);
  const size_t at = w.rfind("(pid ");
  int pid = 0;
  if (at == std::string::npos || !absl::SimpleAtoi(w.substr(at + 5, w.size() - at - 6), &pid)) return 0;
  return pid;
}

std::unique_ptr<Process> StartWorker(const std::string& coordinator, int rank, int world, const std::string& log,
                                     const std::vector<std::string>& extra) {
  std::vector<std::string> argv = {BinaryPath("tools/worker/tpserve-worker"), "--coordinator", coordinator,
                                   "--rank", std::to_string(rank), "--world-size", std::to_string(world),
                                   "--local-rank", std::to_string(rank)};
  argv.insert(argv.end(), extra.begin(), extra.end());
  return std::make_unique<Process>(argv, log);
}

bool AwaitServing(v1::Generation::Stub& stub, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  v1::GenerateRequest probe = Greedy(1);
  probe.set_prompt("are you serving");
  while (absl::Now() < deadline) {
    if (Generate(stub, probe, absl::Seconds(10)).status.ok()) return true;
    absl::SleepFor(absl::Milliseconds(50));
  }
  return false;
}

int64_t RssKb(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) != 0) continue;
    int64_t kb = -1;
    std::string digits;
    for (char c : line) {
      if (c >= '0' && c <= '9') digits.push_back(c);
    }
    return absl::SimpleAtoi(digits, &kb) ? kb : -1;
  }
  return -1;
}

std::unique_ptr<Process> StartHttp(const std::string& server, const std::vector<std::string>& extra,
                                   const std::string& log, std::string* base) {
  std::vector<std::string> argv = {BinaryPath("tools/http/tpserve-http"), "--server", server, "--listen",
                                   "127.0.0.1:0"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  auto http = std::make_unique<Process>(argv, log);
  const std::string port = AwaitLine(*http, "listening on 127.0.0.1:", absl::Seconds(30));
  base->clear();
  if (!port.empty()) *base = absl::StrCat("http://127.0.0.1:", port);
  return http;
}

std::string AwaitLine(Process& process, const std::string& marker, absl::Duration timeout, size_t after) {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    const std::string text = process.Log();
    const size_t at = text.find(marker, std::min(after, text.size()));
    if (at != std::string::npos && text.find('\n', at) != std::string::npos) {
      return text.substr(at + marker.size(), text.find('\n', at) - at - marker.size());
    }
    if (process.Wait(absl::ZeroDuration()) != -1) break;
    absl::SleepFor(absl::Milliseconds(50));
  }
  ADD_FAILURE() << "no \"" << marker << "\" in:\n" << process.Log();
  return "";
}

std::vector<std::vector<int32_t>> OfflineGreedy(const std::string& model_dir, int tp,
                                                const std::vector<std::vector<int32_t>>& prompts,
                                                int max_tokens, const std::string& scratch) {
  return OfflineGenerate(model_dir, tp, prompts, max_tokens, scratch, {}).tokens;
}

OfflineOutcome OfflineGenerate(const std::string& model_dir, int tp, const std::vector<std::vector<int32_t>>& prompts,
                               int max_tokens, const std::string& scratch, const std::vector<std::string>& extra) {
  std::vector<std::string> joined;
  for (const auto& p : prompts) joined.push_back(absl::StrJoin(p, ","));
  const std::string json = absl::StrCat(scratch, "/offline-", getpid(), ".json");
  const std::string log = absl::StrCat(scratch, "/offline.log");
  std::vector<std::string> argv = {BinaryPath("tools/engine_cli/tpserve-generate"), "--model", model_dir, "--tp",
                                   std::to_string(tp), "--prompt_ids", absl::StrJoin(joined, ";"), "--max_tokens",
                                   std::to_string(max_tokens), "--ignore_eos", "--output_json", json};
  argv.insert(argv.end(), extra.begin(), extra.end());
  const int rc = RunCommand(argv, log);
  EXPECT_EQ(rc, 0) << ReadFile(log);
  OfflineOutcome out;
  if (rc != 0) return out;
  const nlohmann::json j = nlohmann::json::parse(ReadFile(json));
  for (const auto& s : j.at("sequences")) out.tokens.push_back(s.at("tokens").get<std::vector<int32_t>>());
  const nlohmann::json& stats = j.at("stats");
  out.computed_tokens = stats.at("prefill_tokens").get<int64_t>() + stats.at("decode_tokens").get<int64_t>();
  return out;
}

}  // namespace tpserve::e2e
