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
// 7: SamplingParams.logit_bias, allowed_token_ids, bad_words (token-level
// controls): a worker that ignored them would sample banned tokens.
// Also in 7: ContinuingSequence.draft_token_ids and Load.max_num_draft_tokens
// (speculative decoding): a worker that ignored them would keep positions and
// blocks the coordinator freed.
// 8: Hello.dp_rank (the data-parallel group a worker joins): a coordinator
// that ignored it would admit a worker for group 1 into group 0.
// 9: rank 0 proposes (Load.speculative_method, NewSequence.speculate and
// num_proposals, ContinuingSequence.num_draft_slots replacing draft_token_ids,
// Step.preempted, SampledToken.num_proposed): a worker of 8 would compute no
// proposals where the coordinator planned slots, and a coordinator of 8
// would send proposals a worker of 9 ignores.
// 10: SampledToken.error (rank 0 gave up on a sequence's grammar mask): a
// coordinator of 9 would stream that sequence's unconstrained token as output.
inline constexpr uint32_t kWorkerProtocolVersion = 10;

}  // namespace tpserve
