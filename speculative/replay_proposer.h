// ReplayProposer: for tests and benchmarks, never for serving. Proposes the
// known continuation of a sequence (an earlier run's output), each proposed
// token replaced by a wrong one with probability p (seeded), so a run's
// acceptance is set by p: 0 accepts everything, 1 nothing. The tokens it is
// given must follow `prefix` + `continuation` (it proposes from where the
// sequence has got to).
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "speculative/proposer.h"

namespace tpserve::speculative {

class ReplayProposer final : public Proposer {
 public:
  // `known`: the whole sequence (prompt then the output to replay); k tokens
  // per step; corrupt probability p; vocab_size for the wrong tokens.
  ReplayProposer(std::vector<int32_t> known, int32_t k, double p, int32_t vocab_size, uint64_t seed)
      : known_(std::move(known)), k_(k), p_(p), vocab_(vocab_size), rng_(seed) {}

  void Append(std::span<const int32_t> tokens) override { length_ += static_cast<int64_t>(tokens.size()); }

  int32_t Propose(std::span<int32_t> out) override {
    int32_t n = 0;
    std::bernoulli_distribution wrong(p_);
    while (n < k_ && static_cast<size_t>(n) < out.size() &&
           length_ + n < static_cast<int64_t>(known_.size())) {
      const int32_t t = known_[static_cast<size_t>(length_ + n)];
      out[static_cast<size_t>(n++)] = wrong(rng_) ? (t + 1 + static_cast<int32_t>(rng_() % (vocab_ - 1))) % vocab_ : t;
    }
    return n;
  }

 private:
  std::vector<int32_t> known_;
  int32_t k_;
  double p_;
  int32_t vocab_;
  std::mt19937_64 rng_;
  int64_t length_ = 0;  // tokens of the sequence appended so far
};

}  // namespace tpserve::speculative
