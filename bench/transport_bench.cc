// The command channel's round trip: one writer sends a message to 2 reader
// processes and waits for both echoes, as the coordinator does for an empty
// step to 2 workers. Measured in the same run:
//   * shm: transport/shm_channel.h (ShmHub -> 2 ShmEndpoints -> replies), for
//     each spin before the futex sleep (--spins, microseconds; 0 = sleep at
//     once);
//   * grpc: a bidirectional stream per reader on loopback (the readers dial
//     the writer, as workers dial the coordinator), driven straight from the
//     writer's thread: the leanest use of the gRPC stream, without the worker
//     pool's hand-off to a session thread;
//   * floor: the shm path in one thread that never waits (publish, receive,
//     reply, receive): the copying and atomics alone (messages that fit the
//     ring only).
//
//   transport_bench [--iterations 5000] [--spins 0,5,20,100] [--sizes 64,4096] [--ring 1048576]
//
// Reader processes are this program again (--child shm|grpc ...), killed if
// the bench dies. Not run in CI.
#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "bench/list_flag.h"
#include "transport/shm_channel.h"
#include "transport_bench_echo.grpc.pb.h"

namespace {

using Clock = std::chrono::steady_clock;
namespace pb = tpserve::bench;
constexpr int kReaders = 2;
constexpr int kWarmUp = 200;

struct Options {
  int iterations = 5000;
  std::vector<int> spins_us = {0, 5, 20, 100};
  std::vector<int> sizes = {64, 4096};
  size_t ring = size_t{1} << 20;
};


[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "transport_bench: %s\n", what.c_str());
  std::exit(1);
}

// Starts this program as a reader: `transport_bench --child ARGS...`.
pid_t SpawnChild(const std::vector<std::string>& args) {
  std::vector<std::string> all = {"/proc/self/exe", "--child"};
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : all) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(1);
    execv(argv[0], argv.data());
    _exit(127);
  }
  return pid;
}

void Reap(const std::vector<pid_t>& pids) {
  for (pid_t pid : pids) {
    int status = 0;
    waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) Die(absl::StrCat("a reader (pid ", pid, ") failed"));
  }
}

struct Stats {
  double p50, p99, mean;
};

Stats Summarize(std::vector<double> us) {
  std::sort(us.begin(), us.end());
  double sum = 0;
  for (double x : us) sum += x;
  auto at = [&](double p) { return us[static_cast<size_t>(p * static_cast<double>(us.size() - 1))]; };
  return {at(0.5), at(0.99), sum / static_cast<double>(us.size())};
}

// Times `round_trip` (after kWarmUp untimed calls), in microseconds each.
std::vector<double> Measure(int iterations, const std::function<void()>& round_trip) {
  std::vector<double> us;
  us.reserve(static_cast<size_t>(iterations));
  for (int i = 0; i < kWarmUp + iterations; ++i) {
    const auto t0 = Clock::now();
    round_trip();
    const auto t1 = Clock::now();
    if (i >= kWarmUp) us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
  }
  return us;
}

// ---- readers (child processes) ----

int ShmReader(const std::string& name, int reader) {
  auto endpoint = tpserve::ShmEndpoint::Open(name, reader);
  if (!endpoint.ok()) Die(std::string(endpoint.status().message()));
  while (true) {
    absl::StatusOr<std::string> m = (*endpoint)->Receive();
    if (!m.ok()) return 0;  // the writer closed: done
    if (!(*endpoint)->Reply(*m).ok()) return 0;
  }
}

int GrpcReader(const std::string& address, int reader) {
  auto stub = pb::Echo::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  auto stream = stub->Session(&context);
  pb::Blob blob;
  blob.set_seq(static_cast<uint64_t>(reader));
  if (!stream->Write(blob)) Die("the echo stream did not open");
  while (stream->Read(&blob)) {
    if (!stream->Write(blob)) break;
  }
  (void)stream->Finish();
  return 0;
}

// ---- writer: shm ----

std::vector<double> ShmRoundTrips(const Options& o, int size, int spin_us) {
  auto hub = tpserve::ShmHub::Create(kReaders, o.ring, absl::Microseconds(spin_us));
  if (!hub.ok()) Die(std::string(hub.status().message()));
  std::vector<pid_t> pids;
  for (int r = 0; r < kReaders; ++r) pids.push_back(SpawnChild({"shm", (*hub)->name(), std::to_string(r)}));
  const std::string message(static_cast<size_t>(size), 's');
  std::vector<double> us = Measure(o.iterations, [&] {
    if (!(*hub)->Publish(message).ok()) Die("Publish failed");
    for (int r = 0; r < kReaders; ++r) {
      absl::StatusOr<std::string> reply = (*hub)->Receive(r);
      if (!reply.ok() || reply->size() != message.size()) Die("bad shm reply");
    }
  });
  (*hub)->Close(absl::CancelledError("done"));
  Reap(pids);
  return us;
}

// The per-message CPU cost of the shm path: one thread, no reader ever waits.
std::vector<double> ShmFloor(const Options& o, int size) {
  auto hub = tpserve::ShmHub::Create(1, o.ring);
  if (!hub.ok()) Die(std::string(hub.status().message()));
  auto endpoint = tpserve::ShmEndpoint::Open((*hub)->name(), 0);
  if (!endpoint.ok()) Die(std::string(endpoint.status().message()));
  const std::string message(static_cast<size_t>(size), 'f');
  return Measure(o.iterations, [&] {
    if (!(*hub)->Publish(message).ok()) Die("Publish failed");
    absl::StatusOr<std::string> m = (*endpoint)->Receive();
    if (!m.ok() || !(*endpoint)->Reply(*m).ok()) Die("endpoint failed");
    if (!(*hub)->Receive(0).ok()) Die("Receive failed");
  });
}

// ---- writer: gRPC ----

// The writer's side: each reader's stream, handed to the bench's thread while
// its handler waits for the end.
class EchoServer final : public pb::Echo::Service {
 public:
  using Stream = grpc::ServerReaderWriter<pb::Blob, pb::Blob>;

  grpc::Status Session(grpc::ServerContext*, Stream* stream) override {
    pb::Blob hello;
    if (!stream->Read(&hello) || hello.seq() >= kReaders) return grpc::Status::CANCELLED;
    absl::MutexLock lock(&mu_);
    streams_[hello.seq()] = stream;
    mu_.Await(absl::Condition(&done_));
    return grpc::Status::OK;
  }
  std::vector<Stream*> WaitForReaders() {
    absl::MutexLock lock(&mu_);
    auto all = [this]() -> bool {
      return std::all_of(std::begin(streams_), std::end(streams_), [](Stream* s) { return s != nullptr; });
    };
    mu_.Await(absl::Condition(&all));
    return std::vector<Stream*>(std::begin(streams_), std::end(streams_));
  }
  void Finish() {
    absl::MutexLock lock(&mu_);
    done_ = true;
  }

 private:
  absl::Mutex mu_;
  Stream* streams_[kReaders] = {};
  bool done_ = false;
};

std::vector<double> GrpcRoundTrips(const Options& o, int size) {
  EchoServer service;
  int port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server || port == 0) Die("cannot listen on 127.0.0.1");
  std::vector<pid_t> pids;
  for (int r = 0; r < kReaders; ++r) {
    pids.push_back(SpawnChild({"grpc", absl::StrCat("127.0.0.1:", port), std::to_string(r)}));
  }
  std::vector<EchoServer::Stream*> streams = service.WaitForReaders();
  pb::Blob out;
  out.set_payload(std::string(static_cast<size_t>(size), 'g'));
  pb::Blob in;
  std::vector<double> us = Measure(o.iterations, [&] {
    for (EchoServer::Stream* s : streams) {
      if (!s->Write(out)) Die("gRPC write failed");
    }
    for (EchoServer::Stream* s : streams) {
      if (!s->Read(&in) || in.payload().size() != out.payload().size()) Die("bad gRPC reply");
    }
  });
  service.Finish();
  server->Shutdown();
  Reap(pids);
  return us;
}

// ---- report ----

std::string LoadAverage() {
  std::ifstream f("/proc/loadavg");
  std::string one;
  f >> one;
  return one;
}

void Row(int size, const std::string& what, const std::vector<double>& us) {
  const Stats s = Summarize(us);
  std::printf("| %6d B | %-44s | %8.1f | %8.1f | %8.1f |\n", size, what.c_str(), s.p50, s.p99, s.mean);
  std::fflush(stdout);
}

Options Parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const std::string value = argv[i + 1];
    if (flag == "--iterations") o.iterations = std::max(1, std::stoi(value));
    else if (flag == "--spins") o.spins_us = tpserve::bench::ParseListFlag<int>(flag, value);
    else if (flag == "--sizes") o.sizes = tpserve::bench::ParseListFlag<int>(flag, value);
    else if (flag == "--ring") o.ring = std::stoul(value);
    else Die("unknown flag " + flag + "; see the comment at the top of bench/transport_bench.cc");
  }
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 5 && std::string(argv[1]) == "--child") {
    const std::string kind = argv[2];
    return kind == "shm" ? ShmReader(argv[3], std::stoi(argv[4])) : GrpcReader(argv[3], std::stoi(argv[4]));
  }
  const Options o = Parse(argc, argv);
  std::printf("round trip: 1 writer -> %d reader processes -> back; %d iterations (+%d warm-up); %u cores; "
              "load average %s; shm ring %zu bytes\n\n",
              kReaders, o.iterations, kWarmUp, std::thread::hardware_concurrency(), LoadAverage().c_str(), o.ring);
  std::printf("| payload  | transport                                    |  p50 us  |  p99 us  |  mean us |\n");
  std::printf("|---------:|----------------------------------------------|---------:|---------:|---------:|\n");
  for (int size : o.sizes) {
    for (int spin : o.spins_us) {
      Row(size, spin == 0 ? "shm, futex at once (no spin)" : absl::StrCat("shm, spin ", spin, " us then futex"),
          ShmRoundTrips(o, size, spin));
    }
    Row(size, "gRPC bidi streams on loopback (lean)", GrpcRoundTrips(o, size));
    // One thread cannot stream a message larger than the ring through it (it would wait for itself).
    if (static_cast<size_t>(size) + 2 * sizeof(tpserve::FrameHeader) <= o.ring) {
      Row(size, "floor: shm in one thread, never waiting", ShmFloor(o, size));
    }
  }
  return 0;
}
