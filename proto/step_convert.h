// The one conversion between the step protocol's wire format (worker.proto:
// Step, SamplingParams, StepResult) and its proto-free form
// (scheduler/step_plan.h: StepPlan, tpserve::SamplingParams, StepToken). The
// coordinator's engine loop sends StepPlanToProto and reads TokensFromProto;
// the worker runs StepPlanFromProto and answers with AppendTokens.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "scheduler/step_plan.h"
#include "tpserve/internal/v1/worker.pb.h"

namespace tpserve {

tpserve::internal::v1::SamplingParams SamplingToProto(const SamplingParams& s);
SamplingParams SamplingFromProto(const tpserve::internal::v1::SamplingParams& p);

tpserve::internal::v1::Step StepPlanToProto(const StepPlan& plan, uint64_t step_id);
// The plan of `step`. INVALID_ARGUMENT naming the sequence for a new sequence
// without sampling parameters (a negative num_computed_tokens cannot happen:
// it is unsigned).
absl::StatusOr<StepPlan> StepPlanFromProto(const tpserve::internal::v1::Step& step);

// Appends the sampled tokens to `result` (token, its log-prob and the top
// alternatives when the sequence asked for log-probs).
void AppendTokens(std::span<const StepToken> tokens, tpserve::internal::v1::StepResult& result);
// The tokens of `result`, in its order (no logits: they never travel).
std::vector<StepToken> TokensFromProto(const tpserve::internal::v1::StepResult& result);

// Prompt log-probs (rank 0's StepRunner::prompt_logprobs) to and from the
// result; a malformed entry (arrays of different lengths) is INVALID_ARGUMENT.
void AppendPromptLogprobs(std::span<const PromptLogprobs> prompts, tpserve::internal::v1::StepResult& result);
absl::StatusOr<std::vector<PromptLogprobs>> PromptLogprobsFromProto(const tpserve::internal::v1::StepResult& result);

}  // namespace tpserve
