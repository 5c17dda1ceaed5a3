// Between the protocol's Step / StepResult (worker.proto) and the proto-free
// StepPlan / StepToken of worker/step_runner.h.
#pragma once

#include <span>

#include "absl/status/statusor.h"
#include "tpserve/internal/v1/worker.pb.h"
#include "worker/step_runner.h"

namespace tpserve {

// The plan of `step`. INVALID_ARGUMENT naming the sequence for a field that
// does not fit (a negative num_computed_tokens cannot happen: it is unsigned).
absl::StatusOr<StepPlan> StepPlanFromProto(const tpserve::internal::v1::Step& step);

SamplingParams SamplingFromProto(const tpserve::internal::v1::SamplingParams& p);

// Appends the sampled tokens to `result` (token, its log-prob and the top
// alternatives when the sequence asked for log-probs).
void AppendTokens(std::span<const StepToken> tokens, tpserve::internal::v1::StepResult& result);

}  // namespace tpserve
