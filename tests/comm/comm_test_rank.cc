// comm_test_rank: one rank of a multi-process communicator test. The gtests in
// gloo_test.cc / nccl_test.cc start one of these per rank and check the exit
// code: 0 = every check of the scenario passed, 1 = a check failed, 2 = usage.
//
//   comm_test_rank --store DIR --rank R --world N --scenario S
//                  [--seed X] [--timeout_ms T] [--device cpu|cuda] [--backend gloo|nccl]
//                  [--missing "1,3"]
// Scenarios:
//   collectives  every collective against exact expected values (collective_checks.h)
//   missing      creating the communicator must fail with DEADLINE_EXCEEDED naming --missing
//   peer_exits   after a Barrier, ranks > 0 exit while rank 0 is inside AllReduceSum:
//                rank 0's call and the next one must fail (UNAVAILABLE/DEADLINE_EXCEEDED)
//   peer_stalls  ranks > 0 stop calling collectives: rank 0 must get DEADLINE_EXCEEDED
//                after about the timeout
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "collective_checks.h"
#include "comm/gloo_communicator.h"
#include "comm/store.h"
#if defined(TPSERVE_WITH_NCCL)
#include "comm/nccl_communicator.h"
#endif

namespace tpserve::comm_test {
namespace {

using Clock = std::chrono::steady_clock;

int Fail(int rank, const std::string& msg) {
  std::fprintf(stderr, "rank %d: FAIL: %s\n", rank, msg.c_str());
  return 1;
}

bool IsPeerError(const absl::Status& s) {
  return absl::IsUnavailable(s) || absl::IsDeadlineExceeded(s);
}

absl::StatusOr<std::unique_ptr<Communicator>> Connect(Store& store, int rank, int world,
                                                      std::chrono::milliseconds timeout,
                                                      const std::string& backend,
                                                      std::function<absl::Status()>* sync) {
  if (backend == "nccl") {
#if defined(TPSERVE_WITH_NCCL)
    cudaStream_t stream = nullptr;
    if (cudaSetDevice(rank) != cudaSuccess || cudaStreamCreate(&stream) != cudaSuccess)
      return absl::InternalError("cannot create a CUDA stream on device " + std::to_string(rank));
    auto comm = NcclCommunicator::Create(store, rank, world, {rank, stream, timeout});
    if (!comm.ok()) return comm.status();
    NcclCommunicator* raw = comm->get();
    *sync = [raw] { return raw->Synchronize(); };
    return std::unique_ptr<Communicator>(std::move(*comm));
#else
    (void)sync;
    return absl::FailedPreconditionError("built without NCCL");
#endif
  }
  GlooOptions options;
  options.timeout = timeout;
  return MakeGlooCommunicator(store, rank, world, options);
}

int Main(int argc, char** argv) {
  std::map<std::string, std::string> args = {{"seed", "1"},        {"timeout_ms", "20000"},
                                             {"device", "cpu"},    {"backend", "gloo"},
                                             {"scenario", "collectives"}};
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string key = argv[i];
    if (key.rfind("--", 0) != 0) return 2;
    args[key.substr(2)] = argv[i + 1];
  }
  if (!args.count("store") || !args.count("rank") || !args.count("world")) {
    std::fprintf(stderr, "usage: comm_test_rank --store DIR --rank R --world N [--scenario S]\n");
    return 2;
  }
  const int rank = std::atoi(args["rank"].c_str());
  const int world = std::atoi(args["world"].c_str());
  const auto timeout = std::chrono::milliseconds(std::atol(args["timeout_ms"].c_str()));
  const std::string scenario = args["scenario"];
  auto store = FileStore::Open(args["store"]);
  if (!store.ok()) return Fail(rank, store.status().ToString());

  std::function<absl::Status()> sync;
  const auto start = Clock::now();
  auto comm = Connect(**store, rank, world, timeout, args["backend"], &sync);
  const auto waited = Clock::now() - start;
  if (scenario == "missing") {
    if (comm.ok()) return Fail(rank, "the communicator was created although ranks are missing");
    std::fprintf(stderr, "rank %d: as expected: %s\n", rank, comm.status().ToString().c_str());
    if (!absl::IsDeadlineExceeded(comm.status())) return Fail(rank, "not DEADLINE_EXCEEDED");
    std::string want = "rank" + std::string(args["missing"].find(',') != std::string::npos ? "s " : " ") +
                       args["missing"];
    if (comm.status().message().find(want) == std::string::npos)
      return Fail(rank, "the error does not name '" + want + "'");
    if (waited < timeout || waited > timeout * 2 + std::chrono::seconds(1))
      return Fail(rank, "gave up after " + std::to_string(waited / std::chrono::milliseconds(1)) +
                            " ms, not after about the timeout");
    return 0;
  }
  if (!comm.ok()) return Fail(rank, comm.status().ToString());
  if ((*comm)->rank() != rank || (*comm)->world_size() != world) return Fail(rank, "rank/world");

  if (scenario == "collectives") {
    CheckOptions options;
    options.seed = std::strtoull(args["seed"].c_str(), nullptr, 10);
    options.device = args["device"] == "cuda" ? Device::kCuda : Device::kCpu;
    options.sync = sync;
    options.barrier_dir = args["store"];
    options.rank_order_sum = args["backend"] == "gloo";
    int failures = RunCollectiveChecks(**comm, options);
    if (failures > 0) return Fail(rank, std::to_string(failures) + " checks failed");
    return 0;
  }

  if (scenario == "peer_exits" || scenario == "peer_stalls") {
    absl::Status s = (*comm)->Barrier();
    if (!s.ok()) return Fail(rank, "first barrier: " + s.ToString());
    if (rank != 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      if (scenario == "peer_exits") _exit(0);  // mid-collective from rank 0's view
      std::this_thread::sleep_for(timeout * 2);
      return 0;
    }
    std::vector<float> data(4097, 1.0f);
    Tensor t(data.data(), DType::kF32, Device::kCpu, {4097});
    const auto t0 = Clock::now();
    s = (*comm)->AllReduceSum(t);
    const auto took = Clock::now() - t0;
    std::fprintf(stderr, "rank 0: as expected? %s (after %lld ms)\n", s.ToString().c_str(),
                 static_cast<long long>(took / std::chrono::milliseconds(1)));
    if (!IsPeerError(s)) return Fail(rank, "AllReduceSum did not report the lost peer");
    if (took > timeout + std::chrono::seconds(2)) return Fail(rank, "took longer than the timeout");
    if (scenario == "peer_stalls" && !absl::IsDeadlineExceeded(s))
      return Fail(rank, "a stalled peer should be DEADLINE_EXCEEDED");
    const auto t1 = Clock::now();
    absl::Status again = (*comm)->Broadcast(t, 0);
    if (!IsPeerError(again)) return Fail(rank, "the next collective did not fail: " + again.ToString());
    if (Clock::now() - t1 > std::chrono::milliseconds(500))
      return Fail(rank, "the next collective did not fail fast");
    return 0;
  }
  return Fail(rank, "unknown scenario " + scenario);
}

}  // namespace
}  // namespace tpserve::comm_test

int main(int argc, char** argv) { return tpserve::comm_test::Main(argc, argv); }
