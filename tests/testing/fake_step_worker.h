// A model of a worker's side of the step protocol (scheduler/step_plan.h), for
// the tests of what sends steps: the scheduler's plans, the coordinator's
// engine loop (over the wire through tests/testing/fake_worker.h).
//
// FakeStepWorker keeps what a real worker must keep of every sequence, from the
// step diffs alone (the tokens in its KV cache and its block table), and
// "samples" a token that is a pure function of everything the sequence has
// computed (FakeNextToken). The tokens are then independent of batching,
// chunking, prefix caching and preemption, and any disagreement between what
// the sender sends and what it believes the workers hold shows up as a wrong
// token or an error.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "scheduler/step_plan.h"

namespace tpserve::testing_util {

// The fake model's next token after `tokens` (a hash of them, as a letter a..z).
int32_t FakeNextToken(std::span<const int32_t> tokens);
// The fake model's first `n` greedy tokens after `prompt`.
std::vector<int32_t> FakeContinuation(std::vector<int32_t> prompt, int n);

class FakeStepWorker {
 public:
  struct Sequence {
    std::vector<int32_t> tokens;       // computed so far: what the KV cache holds
    std::vector<int32_t> block_table;  // every block id learnt of, in order
    int32_t last_sampled = -1;         // sampled by its last step: a decode_sampled input
  };

  // Applies the diffs of `plan` in the order a worker must: drop `finished`,
  // add the new sequences, extend the continuing ones (a decode_sampled one
  // with the token its last step sampled). INTERNAL naming the
  // sequence for what a worker could not follow: a new sequence it already
  // holds, a continuing one it does not, a new sequence computing past its
  // tokens or sampled before its last one, or an `order` that is not the
  // step's sequences once each.
  absl::Status Apply(const StepPlan& plan);
  // Apply, then one token for every sequence the plan samples, in `order`:
  // FakeNextToken of its tokens (or the EOS token, see set_eos_after), log-prob
  // -0.5, itself as the only top alternative.
  absl::StatusOr<std::vector<StepToken>> Run(const StepPlan& plan);

  // The sequence's state, or null when the worker does not hold it.
  const Sequence* Find(uint64_t seq_id) const;
  size_t num_sequences() const { return seqs_.size(); }
  // From now on a sequence holding `num_tokens` tokens or more samples `eos`
  // (0: never).
  void set_eos_after(int num_tokens, int32_t eos) {
    eos_after_ = num_tokens;
    eos_ = eos;
  }

 private:
  absl::flat_hash_map<uint64_t, Sequence> seqs_;
  absl::flat_hash_map<uint64_t, bool> sample_;  // of the last plan applied
  int eos_after_ = 0;
  int32_t eos_ = 0;
};

}  // namespace tpserve::testing_util
