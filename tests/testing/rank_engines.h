// The offline engines of one tensor-parallel group inside one process, each
// rank on its own thread (worker/engine.h), for the batch-invariance suites
// of the CPU backend (tests/worker/batch_invariance_test.cc) and of the CUDA
// backend's deterministic mode (tests/cuda/deterministic_engine_test.cc), and
// the bit-for-bit comparison of their results.
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "comm/communicator.h"
#include "sampling/device_sampler.h"
#include "worker/engine.h"

namespace tpserve::testing_util {

// Rank r's parts, owned by the caller and outliving the engines.
struct RankParts {
  Backend* backend = nullptr;
  Communicator* comm = nullptr;
  DeviceSampler* sampler = nullptr;  // rank 0 samples on the device when set (and logits are not returned)
};

class RankEngines {
 public:
  // One engine per rank over the same options (reused across Generate calls,
  // so the prefix cache carries over). A rank that fails to start is an
  // EXPECT failure, and Generate then returns {}.
  static RankEngines Create(const std::filesystem::path& model, const std::vector<RankParts>& ranks,
                            EngineOptions options);

  // Rank 0's results, every rank run at once; every rank's token ids are
  // checked equal to rank 0's. Rank 0's stats through *stats.
  std::vector<GenerationResult> Generate(const std::vector<GenerationRequest>& requests,
                                         GenerationStats* stats = nullptr);

 private:
  std::vector<std::unique_ptr<Engine>> ranks_;
};

// The CPU ranks of one tensor-parallel group inside this process: rank r's
// backend and communicator (tp 1: a solo communicator and two GEMM threads;
// tp > 1: gloo over a file store in `store_dir`, a fresh folder per group,
// one GEMM thread a rank). Make is nullptr, with an EXPECT failure naming the
// rank, when a rank cannot start or gloo is not built in.
class CpuRankGroup {
 public:
  static std::unique_ptr<CpuRankGroup> Make(int tp, const std::filesystem::path& store_dir);

  int size() const { return static_cast<int>(comms_.size()); }
  // Engines over the same options on every rank (reused across Generate
  // calls, so the prefix cache carries over).
  RankEngines Create(const std::filesystem::path& model, const EngineOptions& options);
  std::vector<GenerationResult> GenerateOnce(const std::filesystem::path& model, const EngineOptions& options,
                                             const std::vector<GenerationRequest>& requests,
                                             GenerationStats* stats = nullptr) {
    return Create(model, options).Generate(requests, stats);
  }

 private:
  CpuRankGroup() = default;
  std::vector<std::unique_ptr<Backend>> backends_;
  std::vector<std::unique_ptr<Communicator>> comms_;
};

// Whether two results are the same, bit for bit: token ids, log-probs, logits
// rows ("" when they are; else which comes first, named).
std::string BitDifference(const GenerationResult& got, const GenerationResult& want);

}  // namespace tpserve::testing_util
