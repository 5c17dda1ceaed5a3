// Proposer: what a generation loop needs of a draft-model-free proposer, one
// per sequence: the sequence's tokens as they become known (the prompt, then
// each accepted output token), and up to out.size() proposed next tokens per
// step. NgramProposer and SuffixProposer behind it (MakeProposer).
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "speculative/ngram_proposer.h"
#include "speculative/suffix_proposer.h"

namespace tpserve::speculative {

class Proposer {
 public:
  virtual ~Proposer() = default;
  // Tokens appended to the sequence, in order.
  virtual void Append(std::span<const int32_t> tokens) = 0;
  // Writes up to out.size() proposed tokens (fewer when the proposer's own
  // limits say so); returns how many.
  virtual int32_t Propose(std::span<int32_t> out) = 0;
  // Bytes the proposer holds for its sequence (0 when it does not say).
  virtual int64_t memory_bytes() const { return 0; }
};

std::unique_ptr<Proposer> MakeProposer(NgramProposer proposer);
std::unique_ptr<Proposer> MakeProposer(SuffixProposer proposer);

// Greedy verification: the tokens a step that checked `proposed` yields.
// target[i] ([k + 1]) is the target model's argmax at the row after the
// sequence's last token and proposed[0, i). Returns a in [0, k]: the longest
// prefix of proposed equal to target; the step yields proposed[0, a), then
// target[a] (the correction, or the bonus token when all k were right), so
// its output is the output of a + 1 one-token greedy steps.
int32_t AcceptGreedy(std::span<const int32_t> proposed, std::span<const int32_t> target);

}  // namespace tpserve::speculative
