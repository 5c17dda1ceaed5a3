#include "bench/serving_bench_util.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace tpserve::bench {

namespace v1 = tpserve::v1;
namespace fs = std::filesystem;

std::string Tool(const std::string& rel) { return absl::StrCat(TPSERVE_BINARY_DIR, "/", rel); }

void Die(const std::string& what) {
  std::fprintf(stderr, "serving_overhead: %s\n", what.c_str());
  std::exit(1);
}

std::string ReadFile(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

double LoadAverage() {
  double one_minute = NAN;
  std::ifstream("/proc/loadavg") >> one_minute;
  return one_minute;
}

void Progress(const std::string& what) {
  static const auto start = Clock::now();
  std::fprintf(stderr, "[%5.1f s] %s\n", std::chrono::duration<double>(Clock::now() - start).count(), what.c_str());
}

double Median(std::vector<double> v) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  const double rank = std::ceil(p / 100.0 * static_cast<double>(v.size()));
  const size_t i = static_cast<size_t>(std::clamp(rank, 1.0, static_cast<double>(v.size()))) - 1;
  return v[i];
}

std::string Spread(const std::vector<double>& v, const char* format) {
  if (v.empty()) return "n/a";
  const auto [lo, hi] = std::minmax_element(v.begin(), v.end());
  char buf[128];
  std::snprintf(buf, sizeof buf, format, Median(v));
  std::string s = buf;
  if (v.size() > 1) {
    std::string range = absl::StrCat(" [", format, "-", format, "]");
    std::snprintf(buf, sizeof buf, range.c_str(), *lo, *hi);
    s += buf;
  }
  return s;
}

Child::Child(const std::vector<std::string>& argv, const fs::path& log) {
  const pid_t parent = getpid();
  pid_ = fork();
  if (pid_ < 0) Die("fork failed");
  if (pid_ == 0) {
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
      close(fd);
    }
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
}

std::optional<int> Child::Poll() {
  if (exited_) return status_;
  int raw = 0;
  if (waitpid(pid_, &raw, WNOHANG) != pid_) return std::nullopt;
  exited_ = true;
  status_ = WIFEXITED(raw) ? WEXITSTATUS(raw) : 128 + WTERMSIG(raw);
  kill(-pid_, SIGKILL);  // whatever is left in its group
  return status_;
}

int Child::Wait() {
  while (!Poll()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  return status_;
}

void Child::Stop() {
  if (exited_) return;
  kill(pid_, SIGTERM);
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  while (!Poll() && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  if (!exited_) {
    kill(-pid_, SIGKILL);
    Wait();
  }
}

int RunToEnd(const std::vector<std::string>& argv, const fs::path& log) { return Child(argv, log).Wait(); }

Server::Server(const std::vector<std::string>& argv, const fs::path& log, const std::string& marker,
               const std::string& ready)
    : log_(log) {
  if (fs::exists(log)) Die(absl::StrCat(log.string(), " exists already"));
  child_ = std::make_unique<Child>(argv, log);
  const auto deadline = Clock::now() + std::chrono::seconds(120);
  std::string address;
  while (Clock::now() < deadline) {
    const std::string text = ReadFile(log_);
    const size_t at = text.find(marker);
    if (at != std::string::npos && (ready.empty() || text.find(ready) != std::string::npos)) {
      const size_t begin = at + marker.size();
      address = text.substr(begin, text.find('\n', begin) - begin);
      break;
    }
    if (child_->Poll()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (address.empty()) Die(absl::StrCat("did not get ready: ", absl::StrJoin(argv, " "), "\n", ReadFile(log_)));
  stub_ = v1::Generation::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
}

namespace {
std::string& CoordinatorBinary() {
  static std::string path = Tool("tools/coordinator/tpserve-coordinator");
  return path;
}
std::vector<std::string>& CoordinatorFlags() {
  static std::vector<std::string> flags;
  return flags;
}
}  // namespace

void SetCoordinatorBinary(std::string path) { CoordinatorBinary() = std::move(path); }
void AddCoordinatorFlag(std::string flag) { CoordinatorFlags().push_back(std::move(flag)); }

std::unique_ptr<Server> StartCoordinator(const fs::path& model, int tp, const std::vector<std::string>& extra,
                                         const fs::path& log, const std::string& binary) {
  std::vector<std::string> argv = {binary.empty() ? CoordinatorBinary() : binary, "--model", model.string(),
                                   "--tp", std::to_string(tp), "--listen", "127.0.0.1:0", "--spawn-workers",
                                   "--worker-binary", Tool("tools/worker/tpserve-worker")};
  argv.insert(argv.end(), extra.begin(), extra.end());
  argv.insert(argv.end(), CoordinatorFlags().begin(), CoordinatorFlags().end());
  return std::make_unique<Server>(argv, log, "tpserve-coordinator: serving tpserve.v1.Generation on ",
                                  "tpserve-coordinator: ready");
}

v1::GenerateRequest Request(int max_tokens, int salt) {
  v1::GenerateRequest r;
  r.mutable_prompt_token_ids()->add_ids(static_cast<uint32_t>(5 + salt % 480));
  r.mutable_prompt_token_ids()->add_ids(static_cast<uint32_t>(5 + (salt / 480) % 480));
  for (int i = 2; i < kPromptTokens; ++i) r.mutable_prompt_token_ids()->add_ids(static_cast<uint32_t>(5 + i * 13));
  r.mutable_sampling()->set_temperature(0);
  r.mutable_stopping()->set_max_tokens(static_cast<uint32_t>(max_tokens));
  r.mutable_stopping()->set_ignore_eos(true);
  return r;
}

double StepsPerSecond(const Stream& s) {
  if (s.chunks.size() < 2) return NAN;
  const double seconds = std::chrono::duration<double>(s.chunks.back() - s.chunks.front()).count();
  return static_cast<double>(s.chunks.size() - 1) / seconds;
}

double TimePerOutputToken(const Stream& s) {
  if (s.chunks.size() < 2 || s.tokens < 2) return NAN;
  return std::chrono::duration<double>(s.chunks.back() - s.chunks.front()).count() /
         static_cast<double>(s.tokens - 1);
}

std::vector<Stream> RunConcurrently(v1::Generation::Stub& stub, const std::vector<v1::GenerateRequest>& requests) {
  struct Call {
    grpc::ClientContext context;
    std::unique_ptr<grpc::ClientAsyncReader<v1::GenerateResponse>> reader;
    v1::GenerateResponse response;
    bool finishing = false;
  };
  grpc::CompletionQueue cq;
  std::vector<Call> calls(requests.size());
  std::vector<Stream> streams(requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    calls[i].context.set_deadline(std::chrono::system_clock::now() + std::chrono::minutes(5));
    calls[i].reader = stub.PrepareAsyncGenerate(&calls[i].context, requests[i], &cq);
    calls[i].reader->StartCall(reinterpret_cast<void*>(i));
  }
  size_t open = requests.size();
  void* tag = nullptr;
  bool ok = false;
  // After StartCall, each call has exactly one operation pending: a Read until
  // one fails, then its Finish.
  while (open > 0 && cq.Next(&tag, &ok)) {
    const auto now = Clock::now();
    const size_t i = reinterpret_cast<size_t>(tag);
    Call& call = calls[i];
    if (call.finishing) {
      --open;
      continue;
    }
    if (ok && call.response.has_chunk()) {
      streams[i].chunks.push_back(now);
      streams[i].tokens += call.response.chunk().token_ids_size();
    }
    call.response.Clear();
    if (ok) {
      call.reader->Read(&call.response, tag);
    } else {
      call.finishing = true;
      call.reader->Finish(&streams[i].status, tag);
    }
  }
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
  for (const Stream& s : streams) {
    if (!s.status.ok()) Die(absl::StrCat("Generate failed: ", s.status.error_message()));
  }
  return streams;
}

CpuSample SampleCpu(pid_t pid) {
  CpuSample sample;
  static const double ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
  // /proc/PID/stat: "pid (comm) state ..." — utime and stime are fields 14 and
  // 15, counted after the comm's closing parenthesis (a comm may hold spaces).
  const std::string stat = ReadFile(absl::StrCat("/proc/", pid, "/stat"));
  const size_t paren = stat.rfind(')');
  if (paren != std::string::npos) {
    const std::vector<std::string> fields = absl::StrSplit(stat.substr(paren + 2), ' ', absl::SkipEmpty());
    double utime = 0, stime = 0;
    if (fields.size() > 12 && absl::SimpleAtod(fields[11], &utime) && absl::SimpleAtod(fields[12], &stime)) {
      sample.process_seconds = (utime + stime) / ticks;
    }
  }
  const std::string task_dir = absl::StrCat("/proc/", pid, "/task");
  DIR* dir = opendir(task_dir.c_str());
  if (dir == nullptr) return sample;
  while (const dirent* e = readdir(dir)) {
    int tid = 0;
    if (!absl::SimpleAtoi(e->d_name, &tid)) continue;
    const std::string base = absl::StrCat(task_dir, "/", tid);
    double ns = 0;
    std::ifstream(base + "/schedstat") >> ns;
    std::string name = ReadFile(base + "/comm");
    while (!name.empty() && name.back() == '\n') name.pop_back();
    sample.threads.push_back({tid, std::move(name), ns * 1e-9});
  }
  closedir(dir);
  return sample;
}

CpuSpent CpuBetween(const CpuSample& before, const CpuSample& after) {
  std::map<int, double> start;
  for (const CpuSample::Thread& t : before.threads) start[t.tid] = t.seconds;
  CpuSpent spent;
  double threads_sum = 0;
  for (const CpuSample::Thread& t : after.threads) {
    const auto it = start.find(t.tid);
    const double d = t.seconds - (it == start.end() ? 0.0 : it->second);
    threads_sum += d;
    std::string group = t.name;
    while (!group.empty() && group.back() >= '0' && group.back() <= '9') group.pop_back();
    if (group.size() < t.name.size()) group += "*";
    spent.by_name[group] += d;
    if (d > spent.busiest_seconds) {
      spent.busiest_seconds = d;
      spent.busiest_name = t.name;
    }
  }
  // The process's own total also holds threads that ended in between; it is
  // counted in clock ticks, so the live threads' sum is the finer figure when
  // nothing ended.
  spent.all_seconds = std::max(threads_sum, after.process_seconds - before.process_seconds);
  return spent;
}

}  // namespace tpserve::bench
