// The version of the coordinator <-> worker protocol (tpserve/internal/v1/worker.proto).
// Workers send it in Hello; the coordinator refuses a worker whose version differs.
// Bump it whenever worker.proto changes incompatibly.
#pragma once

#include <cstdint>

namespace tpserve {

// 5: Step.block_copies and ContinuingSequence.replaced_blocks (copy-on-write
// of shared KV blocks): a worker that ignored them would write shared blocks.
// 6: SamplingParams.prompt_logprobs and StepResult.prompt_logprobs: a worker
// that ignored them would leave a request waiting for its prompt's log-probs.
inline constexpr uint32_t kWorkerProtocolVersion = 6;

}  // namespace tpserve
