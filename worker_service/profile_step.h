// The Profile forward (docs/architecture.md, "Start-up", step 4): one step as large as the
// model will ever be given, so that a GPU worker can measure its memory at the
// peak before it sizes the KV cache.
//
// The step is S = min(max_num_seqs, max_num_tokens) sequences from position 0
// that share T = max_num_tokens new tokens (fewer when the sequences would
// exceed the model's maximum length; a StepBatch, so when every sequence has
// one token they form a pure decode), so both the activation rows and the LM-head rows
// are at their maximum. It runs on a throw-away cache of one block: every slot
// is -1 (nothing is stored) and every block table entry is block 0, so
// attention reads in-range memory whose values do not matter.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "backend/backend.h"
#include "worker/model.h"

namespace tpserve {

// Sizes of the profile step for `model` (exposed for tests).
struct ProfileStepShape {
  int64_t num_seqs = 0;    // S
  int64_t num_tokens = 0;  // T
};
ProfileStepShape ProfileShape(const Model& model);

// Runs the profile step on every rank (the collectives pair up, like any step).
absl::Status RunProfileStep(Model& model, Backend& backend, int32_t block_size);

}  // namespace tpserve
