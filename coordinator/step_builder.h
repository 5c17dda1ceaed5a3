// Translates one ScheduledStep into the internal Step every worker runs
// (worker.proto): sequences the workers do not know yet go out whole
// (NewSequence: prompt, output so far, tokens to compute, block table,
// sampling), known ones as diffs (ContinuingSequence: new blocks, tokens to
// compute: the next prefill chunk, or for a decode the token sampled last step,
// tokens[num_computed]). `finished` lists the sequences dropped since the last
// step; `order` lists every scheduled sequence, prefills first, as scheduled.
//
// Call before Scheduler::OnStepDone (which advances num_computed_tokens).
#pragma once

#include <cstdint>
#include <functional>

#include "scheduler/scheduler.h"
#include "tpserve/internal/v1/worker.pb.h"

namespace tpserve {

// The sampling parameters of a sequence, by id (must exist for every new one).
using SamplingLookup =
    std::function<const tpserve::internal::v1::SamplingParams&(uint64_t seq_id)>;

tpserve::internal::v1::Step BuildStep(const ScheduledStep& step, uint64_t step_id,
                                      const SamplingLookup& sampling);

}  // namespace tpserve
