// A miniature coordinator for constrained-output tests: drives a StepRunner
// (rank 0, any backend and sampler) through the step protocol for a batch of
// constrained sequences until each stops or reaches max_tokens, overlapped
// (decode_sampled) or lock-step, optionally preempting and recomputing every
// sequence every few steps. Used by tests/constrained (CPU backend, host and
// device-sampler paths) and tests/cuda (the CUDA backend and CudaSampler,
// emulated under cuda-emu).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "sampling/output_constraint.h"
#include "worker/step_runner.h"

namespace tpserve::testing_util {

struct ConstrainedJob {
  std::shared_ptr<const OutputConstraint> constraint;
  uint64_t seed = 0;
  float temperature = 1.0f;
};

struct ConstrainedOutput {
  std::vector<int32_t> tokens;  // the stop id included, when it ended with one
  bool stopped = false;
  std::string error;  // rank 0 gave up on its grammar (StepToken::error): ended there, that token not output
};

enum class StepMode { kOverlap, kLockStep };

struct ConstrainedRun {
  std::span<const int32_t> prompt;    // every job's prompt
  std::vector<int32_t> stop_ids;      // the ids that end a sequence
  int max_tokens = 40;
  int block_size = 16;                // the cache's; jobs get blocks [i * per job, ...)
  StepMode mode = StepMode::kOverlap;
  int preempt_every = 0;              // > 0: every sequence preempted and recomputed every this many steps
  int64_t* forced_tokens = nullptr;   // set: the runner's forced_tokens() at the end (jump-forward)
};

// Runs `jobs` (at most the model's max_num_seqs; the cache must hold
// jobs × ceil((prompt + max_tokens) / block_size) blocks) through a fresh
// StepRunner with `options`. A failed step fails the calling test and ends
// the run early.
std::vector<ConstrainedOutput> RunConstrained(Model& model, KvCache& cache, const StepRunnerOptions& options,
                                              std::span<const ConstrainedJob> jobs, const ConstrainedRun& run);

}  // namespace tpserve::testing_util
