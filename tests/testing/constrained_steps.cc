#include "tests/testing/constrained_steps.h"

#include <algorithm>
#include <utility>

#include "gtest/gtest.h"

namespace tpserve::testing_util {
namespace {

// The plan of one step: new (or recomputed) sequences whole, the others as decodes.
StepPlan PlanStep(std::span<const ConstrainedJob> jobs, const ConstrainedRun& run, int step,
                  const std::vector<ConstrainedOutput>& out, std::vector<bool>& known, const std::vector<bool>& done,
                  std::vector<uint64_t>& finished) {
  const int64_t blocks_each = (std::ssize(run.prompt) + run.max_tokens + run.block_size - 1) / run.block_size;
  StepPlan plan;
  plan.finished = std::exchange(finished, {});
  std::vector<uint64_t> decodes;
  for (size_t i = 0; i < jobs.size(); ++i) {
    if (done[i]) continue;
    const uint64_t id = i + 1;
    const bool preempt = known[i] && run.preempt_every > 0 && step % run.preempt_every == 0;
    if (known[i] && !preempt) {
      ContinuingSequencePlan c{.seq_id = id, .sample = true, .decode_sampled = run.mode == StepMode::kOverlap};
      if (run.mode == StepMode::kLockStep) c.token_ids = {out[i].tokens.back()};
      plan.continuing.push_back(std::move(c));
      decodes.push_back(id);
      continue;
    }
    if (preempt) plan.finished.push_back(id);
    NewSequencePlan n{.seq_id = id, .prompt = {run.prompt.begin(), run.prompt.end()}, .output = out[i].tokens};
    n.token_ids = n.prompt;
    n.token_ids.insert(n.token_ids.end(), out[i].tokens.begin(), out[i].tokens.end());
    for (int64_t b = 0; b < blocks_each; ++b) n.block_ids.push_back(static_cast<int32_t>(i * blocks_each + b));
    n.sampling = SamplingParams{.temperature = jobs[i].temperature, .seed = jobs[i].seed, .constraint = jobs[i].constraint};
    n.sample = true;
    plan.order.push_back(id);
    plan.new_sequences.push_back(std::move(n));
    known[i] = true;
  }
  plan.order.insert(plan.order.end(), decodes.begin(), decodes.end());
  return plan;
}

}  // namespace

std::vector<ConstrainedOutput> RunConstrained(Model& model, KvCache& cache, const StepRunnerOptions& options,
                                              std::span<const ConstrainedJob> jobs, const ConstrainedRun& run) {
  StepRunner runner(model, cache, /*rank=*/0, options);
  std::vector<ConstrainedOutput> out(jobs.size());
  std::vector<bool> known(jobs.size(), false), done(jobs.size(), false);
  std::vector<uint64_t> finished;
  for (int step = 1;; ++step) {
    const StepPlan plan = PlanStep(jobs, run, step, out, known, done, finished);
    if (plan.order.empty()) break;
    absl::StatusOr<std::vector<StepToken>> tokens = runner.Run(plan);
    EXPECT_TRUE(tokens.ok()) << tokens.status();
    if (!tokens.ok()) return out;
    for (const StepToken& t : *tokens) {
      const size_t i = t.seq_id - 1;
      if (!t.error.empty()) {  // as the coordinator: the sequence ends with the error
        out[i].error = t.error;
        done[i] = true;
        finished.push_back(t.seq_id);
        continue;
      }
      out[i].tokens.push_back(t.sampled.token);
      out[i].stopped = std::find(run.stop_ids.begin(), run.stop_ids.end(), t.sampled.token) != run.stop_ids.end();
      if (out[i].stopped || std::ssize(out[i].tokens) >= run.max_tokens) {
        done[i] = true;
        finished.push_back(t.seq_id);
      }
    }
  }
  if (run.forced_tokens != nullptr) *run.forced_tokens = runner.forced_tokens();
  return out;
}

}  // namespace tpserve::testing_util
