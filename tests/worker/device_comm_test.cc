// The NCCL communicator takes device buffers only; gloo takes anything. Every
// collective of the engine, the step runner and the model must therefore pass
// memory the backend allocated, or tensor parallelism on GPUs fails on its
// first step while every CPU test passes (it did once: the sampled tokens were
// broadcast from a host vector). Here each rank runs over
// DeviceOnlyCommunicator (tests/testing/device_memory.h), which refuses host
// memory as NCCL does, on the CPU: tp = 2 as two threads over gloo.
#include <gtest/gtest.h>

#include <filesystem>
#include <thread>
#include <vector>

#include "base/status_macros.h"
#include "comm/gloo_communicator.h"
#include "comm/store.h"
#include "tests/testing/device_memory.h"
#include "tests/worker/worker_test_util.h"
#include "worker/engine.h"

namespace tpserve {
namespace {

using testing_util::DeviceMemoryBackend;
using testing_util::MakeDeviceOnlyCommunicator;
using testing_util::TempDir;

TEST(DeviceOnlyCommunicator, RefusesHostMemoryAndTakesBackendBuffers) {
  DeviceMemoryBackend backend;
  std::unique_ptr<Communicator> comm = MakeDeviceOnlyCommunicator(MakeSoloCommunicator(), backend);
  std::vector<float> host(8, 1.0f);
  const Tensor host_tensor(host.data(), DType::kF32, Device::kCpu, {8});
  const absl::Status refused = comm->Broadcast(host_tensor, 0);
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument) << refused;
  EXPECT_NE(refused.message().find("host memory"), absl::string_view::npos) << refused;
  EXPECT_EQ(comm->AllReduceSum(host_tensor).code(), absl::StatusCode::kInvalidArgument);

  Buffer buffer = backend.Allocate(DType::kF32, {4, 8});
  EXPECT_TRUE(comm->Broadcast(buffer.tensor(), 0).ok());
  EXPECT_TRUE(comm->AllReduceSum(buffer.tensor().Rows(1, 2)).ok()) << "a view inside a buffer is device memory";
  Buffer gathered = backend.Allocate(DType::kF32, {1, 8});
  EXPECT_TRUE(comm->Gather(buffer.tensor().Rows(3, 1), gathered.tensor()).ok());
  EXPECT_EQ(comm->Gather(buffer.tensor().Rows(3, 1), host_tensor).code(), absl::StatusCode::kInvalidArgument);

  const Tensor stale = buffer.tensor();
  buffer.Reset();
  EXPECT_EQ(comm->Broadcast(stale, 0).code(), absl::StatusCode::kInvalidArgument) << "freed memory";
}

std::vector<GenerationRequest> Requests() {
  std::vector<GenerationRequest> requests;
  for (int i = 0; i < 5; ++i) {
    GenerationRequest r;
    for (int t = 0; t < 3 + 4 * i; ++t) r.prompt.push_back((17 * i + 5 * t + 1) % 311);
    r.max_tokens = 6 + i;
    r.ignore_eos = true;
    r.sampling.temperature = 0;  // greedy, but for the seeded ones below
    if (i % 2 == 1) {
      r.sampling.temperature = 0.8f;
      r.sampling.seed = 100 + i;
    }
    requests.push_back(r);
  }
  return requests;
}

absl::StatusOr<std::vector<GenerationResult>> RunRank(const std::filesystem::path& model, DeviceMemoryBackend& backend,
                                                      std::unique_ptr<Communicator> comm) {
  EngineOptions options;
  options.block_size = 4;
  options.model.max_num_tokens = 16;  // chunked prefill: several steps of each kind
  options.model.max_num_seqs = 3;
  TPSERVE_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine, Engine::Create(model, backend, *comm, options));
  return engine->Generate(Requests());
}

// The whole engine (scheduler, step runner with its token broadcast, the
// model's all-reduces and LM-head gather) at tp = 2 over memory that NCCL
// would take, against tp = 1.
TEST(DeviceOnlyCommunicator, EngineAtTp2PassesOnlyDeviceMemory) {
  TempDir dir;
  ASSERT_TRUE(testing_util::MakeModel(dir.path() / "m",
                          "--arch qwen3 --hidden 64 --intermediate 96 --layers 2 --heads 4 --kv-heads 2 "
                          "--head-dim 32 --vocab 311 --dtype f32 --tie 0 --seed 5"));
  DeviceMemoryBackend solo_backend;
  absl::StatusOr<std::vector<GenerationResult>> want =
      RunRank(dir.path() / "m", solo_backend, MakeDeviceOnlyCommunicator(MakeSoloCommunicator(), solo_backend));
  ASSERT_TRUE(want.ok()) << want.status();

  absl::StatusOr<std::vector<GenerationResult>> got[2] = {absl::UnknownError("not run"),
                                                          absl::UnknownError("not run")};
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < 2; ++rank) {
    ranks.emplace_back([&, rank] {
      DeviceMemoryBackend backend;
      absl::StatusOr<std::unique_ptr<FileStore>> store = FileStore::Open((dir.path() / "store").string());
      if (!store.ok()) {
        got[rank] = store.status();
        return;
      }
      GlooOptions gloo;
      gloo.timeout = std::chrono::seconds(30);
      absl::StatusOr<std::unique_ptr<Communicator>> comm = MakeGlooCommunicator(**store, rank, 2, gloo);
      if (!comm.ok()) {
        got[rank] = comm.status();
        return;
      }
      got[rank] = RunRank(dir.path() / "m", backend, MakeDeviceOnlyCommunicator(*std::move(comm), backend));
    });
  }
  for (std::thread& t : ranks) t.join();
  for (int rank = 0; rank < 2; ++rank) {
    ASSERT_TRUE(got[rank].ok()) << "rank " << rank << ": " << got[rank].status();
    ASSERT_EQ(got[rank]->size(), want->size());
    for (size_t i = 0; i < want->size(); ++i) {
      EXPECT_EQ((*got[rank])[i].tokens, (*want)[i].tokens) << "rank " << rank << ", request " << i;
    }
  }
}

}  // namespace
}  // namespace tpserve
