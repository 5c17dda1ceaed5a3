// Token-level controls of a request (issue 29): logit_bias, allowed_token_ids
// and bad_words, as the coordinator fills them (bad words already tokenized),
// the step protocol carries them to rank 0 and both samplers apply them.
//
// Semantics (vLLM's order, sampling/sampler.h step 0, before the penalties):
//   allowed_token_ids  only these tokens may be sampled (an empty list: all);
//   bad_words          a word of one token is banned always; a word of n > 1
//                      tokens bans its last token whenever the output's last
//                      n - 1 tokens equal its first n - 1 (the output only,
//                      not the prompt, as vLLM);
//   logit_bias         bias added to the token's logit (OpenAI's: -100 all but
//                      bans it, +100 all but forces it).
// A banned token's logit becomes -inf (a bias cannot bring it back).
//
// Cost: every function here is proportional to the request's own entries,
// never to the vocabulary. The samplers gather the allowed tokens instead of
// masking the others (sampler.cc, sampling_row.h's candidate list).
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "absl/status/status.h"

namespace tpserve {

struct TokenControls {
  std::vector<std::pair<int32_t, float>> logit_bias;  // [<= kMaxLogitBias] (token, bias), sorted by token, unique
  std::vector<int32_t> allowed_token_ids;             // sorted, unique; empty = every token
  std::vector<std::vector<int32_t>> bad_words;        // [<= kMaxBadWords] token sequences, each non-empty

  bool empty() const { return logit_bias.empty() && allowed_token_ids.empty() && bad_words.empty(); }
  // Output tokens the bad words look back at: the longest word's length - 1.
  int32_t TailLength() const;
  friend bool operator==(const TokenControls&, const TokenControls&) = default;
};

// Sorts and deduplicates the lists (a token given twice in logit_bias keeps
// its last bias; bad words keep their order). Validation comes after.
void NormalizeTokenControls(TokenControls& c);

// OK, or INVALID_ARGUMENT naming the list, the entry and the limit
// (sampling/limits.h): counts, bias range, ids in [0, vocab), sorted lists.
absl::Status ValidateTokenControls(const TokenControls& c, int32_t vocab);

// Appends the tokens banned for the next step: the last token of every bad
// word whose first n - 1 tokens end `tail` (the output's last tokens, oldest
// first). Unsorted, may repeat. O(tokens of the bad words).
void AppendBannedTokens(const TokenControls& c, std::span<const int32_t> tail, std::vector<int32_t>& out);

// The edits of one row: (token, bias) sorted by token, one per token, token <
// vocab; the logit_bias entries, and bias -inf for the tokens in `banned`.
// O((bias entries + bans) log).
void RowEdits(const TokenControls& c, std::span<const int32_t> banned, int32_t vocab,
              std::vector<std::pair<int32_t, float>>& out);

// The allowed tokens below `vocab` (a prefix of the sorted list); empty when
// none is given (every token is allowed).
std::span<const int32_t> AllowedInVocab(const TokenControls& c, int32_t vocab);

}  // namespace tpserve
