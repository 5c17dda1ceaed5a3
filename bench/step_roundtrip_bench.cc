// The fixed cost of the process split: one empty Step sent by the coordinator's
// WorkerPool to 2 real tpserve-worker processes and answered by both, over the
// gRPC streams and then over the shared-memory channel
// (WorkerPool::UseSharedMemory), next to the baseline of a plain unary gRPC
// call (StoreGet of a present key) to the same loopback server from this
// process, measured in the same run.
//
//   step_roundtrip_bench [--iterations 2000]
//
// It generates a tiny model with tpserve-make-model, starts the workers through
// the launcher (torchrun-style environment), and loads it, so the workers are in
// the state they serve from. Not run in CI.
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/host_name.h"
#include "coordinator/worker_pool.h"
#include "launcher/process_group.h"
#include "tpserve/internal/v1/worker.grpc.pb.h"

namespace iv1 = tpserve::internal::v1;
using Clock = std::chrono::steady_clock;

namespace {

double Percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(p * static_cast<double>(v.size() - 1))];
}

double Mean(const std::vector<double>& v) {
  double sum = 0;
  for (double x : v) sum += x;
  return sum / static_cast<double>(v.size());
}

void Print(const char* what, const std::vector<double>& us) {
  std::printf("%-44s mean %8.1f us   p50 %8.1f us   p99 %8.1f us\n", what, Mean(us), Percentile(us, 0.5),
              Percentile(us, 0.99));
}

int Fail(const std::string& what) {
  std::fprintf(stderr, "step_roundtrip_bench: %s\n", what.c_str());
  return 1;
}

// Load (tp 2, the generated model) and AllocateKv on both workers.
absl::Status LoadAndAllocate(tpserve::WorkerPool& pool, const std::filesystem::path& model) {
  iv1::CoordinatorMessage load;
  load.mutable_load()->set_model_dir(model.string());
  load.mutable_load()->set_backend("cpu");
  load.mutable_load()->set_tensor_parallel_size(2);
  load.mutable_load()->set_store_prefix("bench");
  load.mutable_load()->set_block_size(16);
  load.mutable_load()->set_max_num_batched_tokens(64);
  load.mutable_load()->set_max_num_seqs(8);
  load.mutable_load()->set_max_model_len(256);
  iv1::CoordinatorMessage allocate;
  allocate.mutable_allocate_kv()->set_num_blocks(16);
  for (const iv1::CoordinatorMessage* m : {&load, &allocate}) {
    if (auto r = pool.RunOnAll(*m); !r.ok()) return r.status();
  }
  return absl::OkStatus();
}

// `iterations` empty steps through the pool (after 100 unmeasured), each
// followed by the baseline: a unary StoreGet on the same loopback server, so
// load changes hit both. Appends the microseconds of each.
absl::Status MeasureSteps(tpserve::WorkerPool& pool, iv1::Worker::Stub& worker_client, int iterations,
                          std::vector<double>& step_us, std::vector<double>& rpc_us) {
  for (int i = 0; i < iterations + 100; ++i) {
    iv1::CoordinatorMessage step;
    step.mutable_step()->set_step_id(static_cast<uint64_t>(i));
    auto t0 = Clock::now();
    absl::StatusOr<std::vector<iv1::WorkerMessage>> replies = pool.RunOnAll(step);
    auto t1 = Clock::now();
    if (!replies.ok()) return replies.status();
    grpc::ClientContext ctx;
    iv1::StoreGetRequest get;
    get.set_key("ping");
    get.set_timeout_ms(1000);
    iv1::StoreGetResponse value;
    auto t2 = Clock::now();
    grpc::Status st = worker_client.StoreGet(&ctx, get, &value);
    auto t3 = Clock::now();
    if (!st.ok()) return absl::UnavailableError("StoreGet failed: " + st.error_message());
    if (i < 100) continue;
    step_us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    rpc_us.push_back(std::chrono::duration<double, std::micro>(t3 - t2).count());
  }
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  int iterations = 2000;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::string(argv[i]) == "--iterations") iterations = std::max(1, std::atoi(argv[i + 1]));
  }
  const std::filesystem::path bin = TPSERVE_BINARY_DIR;
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / absl::StrCat("tpserve-roundtrip-", getpid());
  const std::string make = absl::StrCat((bin / "tools/make_model/tpserve-make-model").string(), " ",
                                        (dir / "m").string(),
                                        " --arch qwen3 --layers 2 --hidden 64 --heads 4 --kv-heads 2"
                                        " --head-dim 16 --intermediate 128 > /dev/null");
  if (std::system(make.c_str()) != 0) return Fail("tpserve-make-model failed: " + make);

  tpserve::WorkerPool pool(2);
  int port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&pool);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server || port == 0) return Fail("cannot listen on 127.0.0.1");
  const std::string address = absl::StrCat("127.0.0.1:", port);

  tpserve::LaunchOptions launch;
  launch.argv = {(bin / "tools/worker/tpserve-worker").string(), "--coordinator", address};
  launch.nproc_per_node = 2;
  launch.output = tpserve::OutputMode::kPrefix;
  absl::StatusOr<tpserve::ProcessGroup> workers = tpserve::LaunchLocal(launch);
  if (!workers.ok()) return Fail(std::string(workers.status().message()));
  std::atomic<bool> cancel{false};
  if (absl::Status s = pool.WaitForWorkers(absl::Seconds(60), cancel); !s.ok()) {
    return Fail(std::string(s.message()));
  }
  if (absl::Status s = LoadAndAllocate(pool, dir / "m"); !s.ok()) return Fail(std::string(s.message()));

  auto worker_client = iv1::Worker::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  {
    grpc::ClientContext ctx;
    iv1::StoreSetRequest set;
    set.set_key("ping");
    set.set_value("x");
    iv1::StoreSetResponse ok;
    if (!worker_client->StoreSet(&ctx, set, &ok).ok()) return Fail("StoreSet failed");
  }
  std::vector<double> rpc_us, grpc_us, shm_us;
  if (absl::Status s = MeasureSteps(pool, *worker_client, iterations, grpc_us, rpc_us); !s.ok()) {
    return Fail(absl::StrCat("empty step: ", s.message()));
  }
  if (absl::Status s = pool.UseSharedMemory(size_t{1} << 20, tpserve::HostName()); !s.ok()) {
    return Fail(absl::StrCat("UseSharedMemory: ", s.message()));
  }
  if (absl::Status s = MeasureSteps(pool, *worker_client, iterations, shm_us, rpc_us); !s.ok()) {
    return Fail(absl::StrCat("empty step (shm): ", s.message()));
  }
  std::printf("coordinator <-> 2 workers, %d iterations each, %u cores\n", iterations,
              std::thread::hardware_concurrency());
  Print("empty step over the gRPC streams", grpc_us);
  Print("empty step over shared memory", shm_us);
  Print("baseline: unary gRPC call on loopback", rpc_us);
  std::printf("ratio (mean): gRPC streams %.2fx, shared memory %.2fx the loopback call\n",
              Mean(grpc_us) / Mean(rpc_us), Mean(shm_us) / Mean(rpc_us));

  iv1::CoordinatorMessage shutdown;
  shutdown.mutable_shutdown();
  (void)pool.RunOnAll(shutdown);
  pool.Close();
  (void)workers->Wait();
  server->Shutdown();
  std::filesystem::remove_all(dir);
  return 0;
}
