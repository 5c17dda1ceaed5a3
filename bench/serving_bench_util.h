// What bench/serving_overhead's sections share: children started and killed
// with their process group, a tpserve-coordinator ready to serve, streamed
// requests run at once from one client thread, the CPU a process's threads
// spent (/proc/PID/task), and the statistics printed.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "tpserve/v1/generation.grpc.pb.h"

namespace tpserve::bench {

using Clock = std::chrono::steady_clock;

std::string Tool(const std::string& rel);  // under TPSERVE_BINARY_DIR
[[noreturn]] void Die(const std::string& what);
std::string ReadFile(const std::filesystem::path& path);
// /proc/loadavg's 1-minute figure: on a shared machine, how busy the rest was.
double LoadAverage();
// What it measures now, on stderr (stdout keeps the tables).
void Progress(const std::string& what);

double Median(std::vector<double> v);
// The nearest-rank percentile `p` (0..100) of `v`; NAN when empty.
double Percentile(std::vector<double> v, double p);
// "median [min-max]" of a few repetitions, the median printed with `format`.
std::string Spread(const std::vector<double>& v, const char* format);

// A child in its own process group (killed with it), output to `log`.
class Child {
 public:
  Child(const std::vector<std::string>& argv, const std::filesystem::path& log);
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;
  ~Child() { Stop(); }

  pid_t pid() const { return pid_; }
  // The exit status when it has exited (128 + n for signal n), else nullopt.
  std::optional<int> Poll();
  int Wait();
  // SIGTERM (a coordinator drains and stops its workers), SIGKILL after 10 s.
  void Stop();

 private:
  pid_t pid_ = -1;
  bool exited_ = false;
  int status_ = 0;
};

int RunToEnd(const std::vector<std::string>& argv, const std::filesystem::path& log);

// A child that says where it serves on a line of its log starting with
// `marker` (and, when `ready` is not empty, is ready once a line contains
// it); the stub dials that address. `log` must be a new file.
class Server {
 public:
  Server(const std::vector<std::string>& argv, const std::filesystem::path& log, const std::string& marker,
         const std::string& ready);
  ~Server() { child_->Stop(); }
  tpserve::v1::Generation::Stub& stub() { return *stub_; }
  pid_t pid() const { return child_->pid(); }

 private:
  std::filesystem::path log_;
  std::unique_ptr<Child> child_;
  std::unique_ptr<tpserve::v1::Generation::Stub> stub_;
};

// tpserve-coordinator --spawn-workers --tp `tp` plus `extra`, ready to serve
// (coordinator/coordinator.h names the stderr lines looked for). The build's
// binary unless SetCoordinatorBinary named another (a build to compare with).
void SetCoordinatorBinary(std::string path);
// Flags added to every coordinator StartCoordinator starts (--output-threads 1, ...).
void AddCoordinatorFlag(std::string flag);
// `binary`: another tpserve-coordinator than that ("" = that one).
std::unique_ptr<Server> StartCoordinator(const std::filesystem::path& model, int tp,
                                         const std::vector<std::string>& extra, const std::filesystem::path& log,
                                         const std::string& binary = "");

inline constexpr int kPromptTokens = 16;
// Greedy, EOS ignored, `max_tokens` tokens after a 16-token prompt whose first
// two ids are `salt` (distinct salts share no prefix-cache block).
tpserve::v1::GenerateRequest Request(int max_tokens, int salt);

// One streamed request as the client saw it.
struct Stream {
  std::vector<Clock::time_point> chunks;  // arrival of every chunk
  int64_t tokens = 0;
  grpc::Status status;
};
// (n - 1) / (last - first chunk), NAN with fewer than 2 chunks.
double StepsPerSecond(const Stream& s);
// The time per output token as vLLM defines it for one request, in seconds:
// (last - first chunk) / (tokens - 1).
double TimePerOutputToken(const Stream& s);

// Runs every request at once on one completion queue (one client thread, so
// the client takes as little CPU from the server as it can). Dies when one fails.
std::vector<Stream> RunConcurrently(tpserve::v1::Generation::Stub& stub,
                                    const std::vector<tpserve::v1::GenerateRequest>& requests);

// The CPU a process's threads have spent so far: the process as a whole
// (/proc/PID/stat utime + stime: threads that ended count too) and each live
// thread (/proc/PID/task/TID/schedstat, nanoseconds on the CPU).
struct CpuSample {
  double process_seconds = 0;
  struct Thread {
    int tid = 0;
    std::string name;  // /proc/PID/task/TID/comm
    double seconds = 0;
  };
  std::vector<Thread> threads;
};
CpuSample SampleCpu(pid_t pid);

// What a process spent between two samples: all its threads, and the thread
// that spent most (threads born in between count from zero).
struct CpuSpent {
  double all_seconds = 0;
  double busiest_seconds = 0;
  std::string busiest_name;
  // By thread name, the threads of a pool together ("tpserve-out-0" and
  // "tpserve-out-1" as "tpserve-out-*").
  std::map<std::string, double> by_name;
};
CpuSpent CpuBetween(const CpuSample& before, const CpuSample& after);

}  // namespace tpserve::bench
