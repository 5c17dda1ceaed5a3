// Holding a token sequence against a compiled grammar as the sampler would:
// before each token the mask is computed (and timed), the token must be in it,
// then accepted; after the last one the stop ids must be allowed. Used by
// tpserve-grammar --check and bench/grammar_bench.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "grammar/matcher.h"

namespace tpserve {

struct TokenCheck {
  bool accepted = false;
  // The first token not allowed; == the number of tokens when every token was
  // allowed but the end was not (the output is incomplete); -1 when accepted.
  int64_t rejected_at = -1;
  std::vector<double> mask_us;  // [masks computed] FillMask time of each step, microseconds
  // Masks that allowed exactly one token: jump-forward gives it without
  // sampling (sampling/token_mask.h SoleAllowedToken; docs/architecture.md).
  int64_t forced = 0;
  // The matcher gave up at mask rejected_at (grammar::Matcher::status()'s message).
  std::string gave_up;
};

TokenCheck CheckTokens(std::shared_ptr<const grammar::CompiledGrammar> grammar, int32_t vocab_size,
                       std::span<const int32_t> ids);

// The q-quantile (0 <= q <= 1) of `values` by nearest rank; 0 when empty.
double Percentile(std::vector<double> values, double q);

}  // namespace tpserve
