// bench/serving_overhead's constrained section (issue 26, "masks cost the
// GPU nothing"): steps per second of a batch whose every request is held to
// a JSON Schema against the same batch free, with the 300 us stand-in step.
//
// One tpserve-coordinator --simulate-step-us 300 (the workers sleep instead of
// computing, rank 0 picks each constrained token among those its mask allows:
// the grammar work of a real step, with a GPU's forward costing no CPU) over
// a model with Qwen3's 151,936 logits ids (the test tokenizer's 493 tokens,
// the rest padding, so every mask is 4,748 words). 64 requests of 400 tokens
// each, free (EOS ignored) then constrained (bench/results/
// constrained-array-schema.json: an array of at least 100 objects, which
// cannot end within 400 tokens), alternating. Per run: each request's steps
// per second ((n - 1) / (last - first chunk), section 2's measure), the
// median over the batch; the CPU of the coordinator, the worker and this
// client per step; and the worker CPU one mask costs with the accept of the
// token before it (constrained minus free, over the batch: the mask threads,
// tpserve-mask-N, and the step thread share the masks). From those: the
// mask work of one step and the cores the goal needs (the free run's CPU
// per step plus the masks', against a 300 us step). With --compare-worker
// FILE a second coordinator spawns that tpserve-worker, its runs alternating
// with this build's (before and after under the same load).
#pragma once

#include <filesystem>
#include <string>

#include "nlohmann/json.hpp"

namespace tpserve::bench {

struct ConstrainedSettings {
  int repetitions = 3;
  int batch = 64;
  int tokens = 400;  // per request
  int step_us = 300;  // the stand-in step (--simulate-step-us)
  std::filesystem::path scratch;
  std::string compare_worker;  // another build's tpserve-worker, measured alongside ("" = none)
};

// Measures, prints the table on stdout, and returns the figures as JSON.
nlohmann::json RunConstrained(const ConstrainedSettings& settings);

}  // namespace tpserve::bench
