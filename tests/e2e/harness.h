// Helpers for the end-to-end tests: real tpserve-coordinator and tpserve-worker
// processes over loopback gRPC, small generated models, the offline engine
// (tpserve-generate) as the reference, and a gRPC client.
//
// Every process a test starts is in its own process group and gets SIGKILL at
// teardown (and PR_SET_PDEATHSIG, so a crashed test leaves nothing behind); the
// coordinator's --spawn-workers ranks die with it.
//
// Nothing here waits without a deadline, so a test fails with its evidence
// instead of hanging until ctest kills it silently:
//   * a command (RunCommand, OfflineGenerate) is killed at its deadline;
//   * AwaitLine, StartCoordinator, Process::Wait and the RPC helpers give up at theirs;
//   * each test as a whole has one (TestDeadline(): ctest's TIMEOUT less a
//     margin): past it the watchdog kills every process the test started, which
//     ends any call still blocked on them, and ends the binary if that does not.
// Whichever deadline passes, the failure says what the test was waiting for
// (WaitingFor) and prints the log of the command and of every process the test
// still runs (the coordinator with its spawned workers, tpserve-http, ...).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/time/time.h"
#include "tpserve/v1/generation.grpc.pb.h"

namespace tpserve::e2e {

std::string BinaryPath(const std::string& relative);  // under TPSERVE_BINARY_DIR

// A fresh folder under $TMPDIR, removed by the destructor.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// How long a command of RunCommand may run, and an RPC of these helpers wait.
inline constexpr absl::Duration kCommandDeadline = absl::Seconds(120);
inline constexpr absl::Duration kRpcDeadline = absl::Seconds(60);
// RunCommand's status for a command killed at its deadline, or one that could
// not be started (fork failed); the test has failed, saying which, either way.
inline constexpr int kTimedOut = -1;

// The deadline of the running test: its ctest TIMEOUT (TPSERVE_TEST_TIMEOUT,
// which tpserve_add_gtest sets; 300 s when unset) less a tenth, at least 15 s,
// so the watchdog speaks before ctest kills the binary without a word.
absl::Duration TestDeadline();

// Names what the calling test waits for while the object lives (nested waits
// stack); a deadline's failure message quotes it. The harness's own waits
// set it; a test may wrap a blocking call of its own.
class WaitingFor {
 public:
  explicit WaitingFor(std::string what);
  ~WaitingFor();
  WaitingFor(const WaitingFor&) = delete;
  WaitingFor& operator=(const WaitingFor&) = delete;
};

// The tail of every log of a Process still running (what a deadline's failure
// prints), each headed by its command line; "" when none runs.
std::string LiveProcessLogs();

// Runs a command to completion (a bare argv[0] is looked up on PATH); returns
// its exit status (output to `log`). Past `deadline` its process group is
// killed, the test fails naming the command, with its log and LiveProcessLogs,
// and the status is kTimedOut.
int RunCommand(const std::vector<std::string>& argv, const std::string& log,
               absl::Duration deadline = kCommandDeadline);

// The official openai npm package's folder, fetched on demand
// (scripts/fetch-openai-client.sh, its output to `log`, into the cache that
// script uses); "" when npm cannot fetch it.
std::string OpenAiModule(const std::string& log);

// The tiny model (tests/testing/tiny_model.h) of `arch` plus `extra` in
// ROOT/ARCH; returns that folder. Fails the test on error.
std::string MakeModel(const std::string& root, const std::string& arch,
                      const std::vector<std::string>& extra = {});

// A child process in its own process group, output to a log file. It lives
// until destroyed or the test's deadline (the watchdog kills its group then).
class Process {
 public:
  Process(const std::vector<std::string>& argv, const std::string& log);
  // SIGTERM, then SIGKILL to its group if it has not ended within
  // kTeardownGrace; reaped. A sanitizer report in its log fails the test.
  ~Process();
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;
  static constexpr absl::Duration kTeardownGrace = absl::Seconds(10);
  pid_t pid() const { return pid_; }
  void Signal(int sig);
  // Waits for exit up to `timeout`; the exit status (128+n for a signal; the
  // same again once reaped; 127 at once when it never started), or -1 on timeout.
  int Wait(absl::Duration timeout);
  std::string Log() const;
  const std::string& log_path() const { return log_; }
  const std::string& command() const { return command_; }  // its argv, joined

 private:
  pid_t pid_ = -1;
  std::string log_;
  std::string command_;
  bool reaped_ = false;
  int status_ = -1;  // once reaped
};

// The text after `marker` on its line in the process's log, waiting up to
// `timeout` for it (fails the test, saying what it waited for, and returns ""
// if it never comes, or the process ends first). `after`: only text past this
// offset of the log counts.
std::string AwaitLine(Process& process, const std::string& marker, absl::Duration timeout = absl::Seconds(60),
                      size_t after = 0);

// tpserve-worker --coordinator ADDRESS as `rank` of `world` (local rank =
// rank), plus `extra`, its output in `log`.
std::unique_ptr<Process> StartWorker(const std::string& coordinator, int rank, int world, const std::string& log,
                                     const std::vector<std::string>& extra = {});

// openssl, as README's "Security" recipe does it, into `dir`: a CA (ca.pem,
// ca.key), the coordinator's certificate for `server_san` (server.pem,
// server.key, CN `server_cn`) signed by it, a worker's client certificate
// signed by it (worker.pem, worker.key) and a stranger's self-signed one
// (stranger.pem, stranger.key; SAN IP:127.0.0.1). Keys 0600. False when
// openssl failed (its output in dir/openssl.log).
bool MakeTestCertificates(const std::string& dir, const std::string& server_cn = "127.0.0.1",
                          const std::string& server_san = "IP:127.0.0.1,DNS:localhost");

// VmRSS of process `pid` in kB, or -1.
int64_t RssKb(pid_t pid);

// tpserve-http --server `server` --listen 127.0.0.1:0 plus `extra`, its output
// in `log`; its URL ("http://127.0.0.1:PORT") into `base`, "" when it did not
// say it listens within 30 s.
std::unique_ptr<Process> StartHttp(const std::string& server, const std::vector<std::string>& extra,
                                   const std::string& log, std::string* base);

struct Coordinator {
  std::unique_ptr<Process> process;
  std::string address;  // public API, HOST:PORT
  std::unique_ptr<tpserve::v1::Generation::Stub> stub;
};

// Starts tpserve-coordinator --model DIR --tp N --listen 127.0.0.1:0 --spawn-workers
// plus `extra`, and waits for "ready" (90 s). Fails the test (returns a null
// stub) on error or at that deadline, saying which line never came.
Coordinator StartCoordinator(const std::string& model_dir, int tp, const std::string& log,
                             const std::vector<std::string>& extra = {});

struct GenerateOutcome {
  std::vector<int32_t> tokens;
  std::string text;
  int chunks = 0;
  bool completed = false;
  tpserve::v1::Complete complete;
  grpc::Status status;
};

GenerateOutcome Generate(tpserve::v1::Generation::Stub& stub, const tpserve::v1::GenerateRequest& request,
                         absl::Duration timeout = absl::Seconds(120));

// A greedy request for `max_tokens` tokens that ignores EOS.
tpserve::v1::GenerateRequest Greedy(int max_tokens);

// Tokenize and GetServerInfo, each within kRpcDeadline (the test fails if not).
std::vector<int32_t> Tokenize(tpserve::v1::Generation::Stub& stub, const tpserve::v1::TokenizeRequest& request);
tpserve::v1::ServerInfo ServerInfo(tpserve::v1::Generation::Stub& stub);
// The pid of `rank` from ServerInfo's "rank R: host cpu (pid P)"; 0 if absent.
int WorkerPid(const tpserve::v1::ServerInfo& info, int rank);
// Polls until the server serves (a one-token Generate succeeds); false after `timeout`.
bool AwaitServing(tpserve::v1::Generation::Stub& stub, absl::Duration timeout = absl::Seconds(60));

// Greedy tokens of the offline engine (tpserve-generate --tp `tp`, EOS ignored)
// for every prompt; the command runs under RunCommand's deadline.
std::vector<std::vector<int32_t>> OfflineGreedy(const std::string& model_dir, int tp,
                                                const std::vector<std::vector<int32_t>>& prompts,
                                                int max_tokens, const std::string& scratch);

struct OfflineOutcome {
  std::vector<std::vector<int32_t>> tokens;  // [prompts] generated ids; empty on failure
  int64_t computed_tokens = 0;               // prefill + decode tokens of its steps
};
// OfflineGreedy with more tpserve-generate flags (`extra`, e.g. --block-size 8).
OfflineOutcome OfflineGenerate(const std::string& model_dir, int tp, const std::vector<std::vector<int32_t>>& prompts,
                               int max_tokens, const std::string& scratch, const std::vector<std::string>& extra);

}  // namespace tpserve::e2e
