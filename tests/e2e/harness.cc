#include "tests/e2e/harness.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>

#include "absl/base/thread_annotations.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
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

// Everything the child needs is built before fork: the test process has other
// threads (gRPC's), and a child of a multithreaded process may only make
// async-signal-safe calls before exec. An allocation there can wait forever on
// an allocator lock that another thread held at the fork (ASan's allocator, in
// the sanitized build, has no fork handler), and the test would wait forever in
// waitpid for a child that never ran.
//
// -1 (errno set) when fork fails: EAGAIN or ENOMEM under a process or memory
// limit, which many sanitized processes reach sooner. TPSERVE_HARNESS_FAIL_FORK
// set in the environment makes it fail so (harness_test checks what follows).
pid_t Spawn(const std::vector<std::string>& argv, const std::string& log) {
  if (std::getenv("TPSERVE_HARNESS_FAIL_FORK") != nullptr) {
    errno = EAGAIN;
    return -1;
  }
  std::vector<char*> args;
  args.reserve(argv.size() + 1);
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const char* const log_path = log.c_str();
  const pid_t parent = getpid();
  pid_t pid = fork();
  if (pid == 0) {
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    int fd = open(log_path, O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
      close(fd);
    }
    execvp(args[0], args.data());  // a bare name is looked up on PATH
    _exit(127);
  }
  if (pid > 0) setpgid(pid, pid);  // the group exists before anyone signals it (EACCES after exec is fine)
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

// The last `max_lines` lines of `text`, at most `max_bytes`.
std::string Tail(const std::string& text, int max_lines = 80, size_t max_bytes = 12000) {
  size_t from = text.size();
  for (int n = 0; n <= max_lines && from > 0; ++n) {
    const size_t nl = text.rfind('\n', from - 1);
    if (nl == std::string::npos) {
      from = 0;
      break;
    }
    if (n < max_lines) from = nl;
  }
  if (text.size() - from > max_bytes) from = text.size() - max_bytes;
  if (from == 0) return text;
  return absl::StrCat("[... ", from, " bytes before ...]", text.substr(from));
}

// The processes the running test has started and not yet destroyed, and what
// it is waiting for (WaitingFor): what a deadline's failure prints.
struct Registry {
  absl::Mutex mu;
  std::vector<const Process*> processes ABSL_GUARDED_BY(mu);
  std::vector<std::string> waits ABSL_GUARDED_BY(mu);
};

Registry& TheRegistry() {
  static Registry* registry = new Registry;  // never destroyed: the watchdog may outlive statics
  return *registry;
}

std::string LogsExcept(const Process* except) {
  Registry& r = TheRegistry();
  std::vector<std::pair<std::string, std::string>> logs;  // (heading, path)
  {
    absl::MutexLock lock(&r.mu);
    for (const Process* p : r.processes) {
      if (p == except) continue;
      logs.emplace_back(absl::StrCat("`", p->command(), "` (pid ", p->pid(), ")"), p->log_path());
    }
  }
  std::string out;
  for (const auto& [heading, path] : logs) {
    absl::StrAppend(&out, "\n---- log of ", heading, ", ", path, ":\n", Tail(ReadFile(path)));
  }
  return out;
}

std::string DescribeWaits() {
  Registry& r = TheRegistry();
  absl::MutexLock lock(&r.mu);
  if (r.waits.empty()) return "nothing the harness knows of (the test's own code: a call without a deadline?)";
  return absl::StrJoin(r.waits, ", within that: ");
}

std::string Join(const std::vector<std::string>& argv) {
  std::string joined = absl::StrJoin(argv, " ");
  if (joined.size() > 300) joined = absl::StrCat(joined.substr(0, 300), " ...");
  return joined;
}

int64_t EnvSeconds(const char* name, int64_t fallback) {
  const char* value = std::getenv(name);
  int64_t seconds = 0;
  if (value == nullptr || !absl::SimpleAtoi(value, &seconds) || seconds <= 0) return fallback;
  return seconds;
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

// Each test's deadline (TestDeadline): past it, the failure says what the test
// was waiting for with the logs of its processes, and every process the test
// started is killed, which ends a call blocked on one of them (an RPC to the
// coordinator, a read of a child's output). If the test still has not ended
// kKillGrace later, the binary exits, so ctest reports the failure with this
// output instead of killing it without a word at its TIMEOUT.
class TestWatchdog : public ::testing::EmptyTestEventListener {
 public:
  static constexpr absl::Duration kKillGrace = absl::Seconds(10);

  ~TestWatchdog() override { StopThread(); }

  void OnTestStart(const ::testing::TestInfo& test) override {
    absl::MutexLock lock(&mu_);
    name_ = absl::StrCat(test.test_suite_name(), ".", test.name());
    started_ = absl::Now();
    deadline_ = started_ + TestDeadline();
    ++generation_;
    if (!thread_.joinable()) thread_ = std::thread([this] { Run(); });
  }
  void OnTestEnd(const ::testing::TestInfo&) override {
    absl::MutexLock lock(&mu_);
    deadline_ = absl::InfiniteFuture();
    ++generation_;
  }
  void OnTestProgramEnd(const ::testing::UnitTest&) override { StopThread(); }

 private:
  void StopThread() {
    {
      absl::MutexLock lock(&mu_);
      stop_ = true;
    }
    if (thread_.joinable()) thread_.join();
  }

  void Run() {
    absl::MutexLock lock(&mu_);
    while (!stop_) {
      const uint64_t generation = generation_;
      auto changed = [this, generation]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stop_ || generation_ != generation;
      };
      if (mu_.AwaitWithDeadline(absl::Condition(&changed), deadline_)) continue;
      const std::string name = name_;
      const absl::Duration budget = deadline_ - started_;
      deadline_ = absl::InfiniteFuture();
      mu_.Unlock();
      Fire(name, budget);
      mu_.Lock();
      auto ended = [this, generation]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stop_ || generation_ != generation;
      };
      if (!mu_.AwaitWithTimeout(absl::Condition(&ended), kKillGrace)) {
        std::fprintf(stderr, "harness: %s is still blocked %s after its processes were killed; exiting\n",
                     name.c_str(), absl::FormatDuration(kKillGrace).c_str());
        std::fflush(stderr);
        _exit(1);
      }
    }
  }

  // Reports and kills; the test goes on (and usually fails on what it was waiting for).
  static void Fire(const std::string& name, absl::Duration budget) {
    ADD_FAILURE() << name << " ran past its deadline of " << absl::FormatDuration(budget)
                  << " (TPSERVE_TEST_TIMEOUT less a margin): it was waiting for " << DescribeWaits()
                  << ". Every process it started is killed now." << LogsExcept(nullptr);
    std::fflush(stdout);
    Registry& r = TheRegistry();
    absl::MutexLock lock(&r.mu);
    for (const Process* p : r.processes) {
      if (p->pid() <= 0) continue;
      kill(-p->pid(), SIGKILL);
      kill(p->pid(), SIGKILL);
    }
  }

  absl::Mutex mu_;
  std::string name_ ABSL_GUARDED_BY(mu_);
  absl::Time started_ ABSL_GUARDED_BY(mu_);
  absl::Time deadline_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

// Every binary that links the harness gets the watchdog, before its main runs.
[[maybe_unused]] const bool kWatchdogInstalled = [] {
  ::testing::UnitTest::GetInstance()->listeners().Append(new TestWatchdog);
  return true;
}();

}  // namespace

absl::Duration TestDeadline() {
  const int64_t timeout = EnvSeconds("TPSERVE_TEST_TIMEOUT", 300);
  return absl::Seconds(timeout - std::max<int64_t>(timeout / 10, std::min<int64_t>(15, timeout / 2)));
}

WaitingFor::WaitingFor(std::string what) {
  Registry& r = TheRegistry();
  absl::MutexLock lock(&r.mu);
  r.waits.push_back(std::move(what));
}

WaitingFor::~WaitingFor() {
  Registry& r = TheRegistry();
  absl::MutexLock lock(&r.mu);
  r.waits.pop_back();
}

std::string LiveProcessLogs() { return LogsExcept(nullptr); }

int RunCommand(const std::vector<std::string>& argv, const std::string& log, absl::Duration deadline) {
  Process command(argv, log);
  // Not started (the test has failed, naming the fork's error). Before, the
  // wait that followed was waitpid(-1): for any child, i.e. the coordinator
  // the test runs, which does not exit, so the test hung until ctest's timeout.
  if (command.pid() <= 0) return kTimedOut;
  const std::string what = absl::StrCat("`", command.command(), "` to exit (deadline ",
                                        absl::FormatDuration(deadline), ")");
  WaitingFor waiting(what);
  const int status = command.Wait(deadline);
  if (status != -1) return status;  // ~Process looks for a sanitizer report
  command.Signal(SIGKILL);
  kill(-command.pid(), SIGKILL);
  command.Wait(absl::Seconds(10));
  ADD_FAILURE() << "harness: waited for " << what << "; it did not, and was killed.\n---- its log, " << log
                << ":\n" << Tail(ReadFile(log)) << LogsExcept(&command);
  return kTimedOut;
}

std::string OpenAiModule(const std::string& log) {
  if (RunCommand({std::string(TPSERVE_SOURCE_DIR) + "/scripts/fetch-openai-client.sh"}, log) != 0) return "";
  const char* cache = std::getenv("TPSERVE_NPM_CACHE");
  const char* root = std::getenv("TPSERVE_CACHE");
  const char* home = std::getenv("HOME");
  const std::string dir = cache != nullptr ? cache
                          : root != nullptr ? absl::StrCat(root, "/npm")
                                            : absl::StrCat(home != nullptr ? home : "", "/.cache/tpserve/npm");
  return dir + "/node_modules/openai";
}

std::string MakeModel(const std::string& root, const std::string& arch, const std::vector<std::string>& extra) {
  const std::string dir = absl::StrCat(root, "/", arch);
  std::vector<std::string> args = {"--arch", arch};
  args.insert(args.end(), extra.begin(), extra.end());
  testing_util::MakeModel(dir, args);
  return dir;
}

Process::Process(const std::vector<std::string>& argv, const std::string& log) : log_(log), command_(Join(argv)) {
  pid_ = Spawn(argv, log);
  if (pid_ < 0) {
    const int err = errno;
    ADD_FAILURE() << "harness: could not start `" << command_ << "`: fork failed: " << std::strerror(err)
                  << " (a process or memory limit?)" << LogsExcept(nullptr);
  }
  Registry& r = TheRegistry();
  absl::MutexLock lock(&r.mu);
  r.processes.push_back(this);
}

Process::~Process() {
  if (!reaped_ && pid_ > 0) {
    // SIGTERM first: a process that ends on its own runs LeakSanitizer's
    // check at exit (and a coordinator shuts its workers down, which then do
    // too); one that does not within the grace gets SIGKILL.
    kill(pid_, SIGTERM);
    WaitingFor waiting(absl::StrCat("`", command_, "` to end after SIGTERM (then SIGKILL)"));
    if (Wait(kTeardownGrace) == -1) {
      kill(-pid_, SIGKILL);
      kill(pid_, SIGKILL);
      int status;
      waitpid(pid_, &status, 0);
    }
  }
  {
    Registry& r = TheRegistry();
    absl::MutexLock lock(&r.mu);
    r.processes.erase(std::find(r.processes.begin(), r.processes.end(), this));
  }
  if (pid_ > 0) ExpectNoSanitizerReport(log_);
}

void Process::Signal(int sig) {
  if (!reaped_ && pid_ > 0) kill(pid_, sig);  // never kill(-1, ...): every process we may signal
}

int Process::Wait(absl::Duration timeout) {
  if (reaped_) return status_;
  if (pid_ <= 0) return 127;  // never started: as a shell says of a command it cannot run
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    int status = 0;
    const pid_t r = waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
      reaped_ = true;
      status_ = ExitStatus(status);
      kill(-pid_, SIGKILL);  // anything left in its group
      return status_;
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
  constexpr absl::Duration kReadyDeadline = absl::Seconds(90);
  const absl::Time deadline = absl::Now() + kReadyDeadline;
  const std::string marker = "tpserve-coordinator: serving tpserve.v1.Generation on ";
  WaitingFor waiting(absl::StrCat("the coordinator to log \"", marker, "\" and \"tpserve-coordinator: ready\" (",
                                  absl::FormatDuration(kReadyDeadline), ")"));
  int exited = -1;
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
    if ((exited = c.process->Wait(absl::ZeroDuration())) != -1) break;
    absl::SleepFor(absl::Milliseconds(50));
  }
  ADD_FAILURE() << "harness: the coordinator did not get ready: "
                << (exited != -1 ? absl::StrCat("it exited with status ", exited)
                                 : absl::StrCat("no ", c.address.empty() ? "\"serving ... on\"" : "\"ready\"",
                                                " line within ", absl::FormatDuration(kReadyDeadline)))
                << ". Its log (with its spawned workers'), " << log << ":\n"
                << Tail(c.process->Log(), 200, 30000) << LogsExcept(c.process.get());
  return c;
}

GenerateOutcome Generate(v1::Generation::Stub& stub, const v1::GenerateRequest& request, absl::Duration timeout) {
  GenerateOutcome out;
  WaitingFor waiting(absl::StrCat("a Generate stream to end (deadline ", absl::FormatDuration(timeout), ")"));
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
  context.set_deadline(absl::ToChronoTime(absl::Now() + kRpcDeadline));
  v1::TokenizeResponse response;
  WaitingFor waiting("a Tokenize reply");
  grpc::Status s = stub.Tokenize(&context, request, &response);
  EXPECT_TRUE(s.ok()) << "Tokenize: " << s.error_message() << LiveProcessLogs();
  return {response.token_ids().begin(), response.token_ids().end()};
}

v1::ServerInfo ServerInfo(v1::Generation::Stub& stub) {
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + kRpcDeadline));
  v1::ServerInfo info;
  WaitingFor waiting("a GetServerInfo reply");
  grpc::Status s = stub.GetServerInfo(&context, v1::ServerInfoRequest(), &info);
  EXPECT_TRUE(s.ok()) << "GetServerInfo: " << s.error_message() << LiveProcessLogs();
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

bool MakeTestCertificates(const std::string& d, const std::string& server_cn, const std::string& server_san) {
  const std::string log = d + "/openssl.log";
  const std::vector<std::string> ec = {"-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"};
  auto req = [&](std::vector<std::string> args) {
    std::vector<std::string> argv = {"openssl", "req"};
    argv.insert(argv.end(), args.begin(), args.end());
    argv.insert(argv.end(), ec.begin(), ec.end());
    return RunCommand(argv, log) == 0;
  };
  auto sign = [&](const std::string& name, const std::string& ext) {
    return RunCommand({"sh", "-c",
                       absl::StrCat("printf '", ext, "\\n' > ", d, "/", name, ".ext && openssl x509 -req -in ", d, "/",
                                    name, ".csr -CA ", d, "/ca.pem -CAkey ", d, "/ca.key -CAcreateserial -days 2 ",
                                    "-extfile ", d, "/", name, ".ext -out ", d, "/", name, ".pem")},
                      log) == 0;
  };
  const bool ok =
      req({"-x509", "-days", "2", "-subj", "/CN=test cluster CA", "-addext", "basicConstraints=critical,CA:TRUE",
           "-keyout", d + "/ca.key", "-out", d + "/ca.pem"}) &&
      req({"-new", "-subj", "/CN=" + server_cn, "-keyout", d + "/server.key", "-out", d + "/server.csr"}) &&
      sign("server", "subjectAltName=" + server_san) &&
      req({"-new", "-subj", "/CN=worker", "-keyout", d + "/worker.key", "-out", d + "/worker.csr"}) &&
      sign("worker", "extendedKeyUsage=clientAuth") &&
      req({"-x509", "-days", "2", "-subj", "/CN=stranger", "-addext", "subjectAltName=IP:127.0.0.1", "-keyout",
           d + "/stranger.key", "-out", d + "/stranger.pem"});
  for (const char* key : {"ca", "server", "worker", "stranger"}) chmod(absl::StrCat(d, "/", key, ".key").c_str(), 0600);
  return ok;
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
  WaitingFor waiting(absl::StrCat("the server to serve a one-token Generate (", absl::FormatDuration(timeout), ")"));
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
  WaitingFor waiting(absl::StrCat("\"", marker, "\" in the log of `", process.command(), "` (",
                                  absl::FormatDuration(timeout), ")"));
  int exited = -1;
  while (absl::Now() < deadline) {
    const std::string text = process.Log();
    const size_t at = text.find(marker, std::min(after, text.size()));
    if (at != std::string::npos && text.find('\n', at) != std::string::npos) {
      return text.substr(at + marker.size(), text.find('\n', at) - at - marker.size());
    }
    if ((exited = process.Wait(absl::ZeroDuration())) != -1) break;
    absl::SleepFor(absl::Milliseconds(50));
  }
  ADD_FAILURE() << "harness: waited for \"" << marker << "\" in the log of `" << process.command() << "`"
                << (after > 0 ? absl::StrCat(" past byte ", after) : "") << ": "
                << (exited != -1 ? absl::StrCat("it exited first, status ", exited)
                                 : absl::StrCat("not there after ", absl::FormatDuration(timeout)))
                << ". Its log, " << process.log_path() << ":\n" << Tail(process.Log(), 200, 30000)
                << LogsExcept(&process);
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
  EXPECT_EQ(rc, 0) << Tail(ReadFile(log));
  OfflineOutcome out;
  if (rc != 0) return out;
  const nlohmann::json j = nlohmann::json::parse(ReadFile(json));
  for (const auto& s : j.at("sequences")) out.tokens.push_back(s.at("tokens").get<std::vector<int32_t>>());
  const nlohmann::json& stats = j.at("stats");
  out.computed_tokens = stats.at("prefill_tokens").get<int64_t>() + stats.at("decode_tokens").get<int64_t>();
  return out;
}

}  // namespace tpserve::e2e
