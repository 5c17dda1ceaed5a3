// What tpserve-bench sends and when: prompts (random token ids, or a JSON-lines
// file) and arrival times (Poisson, or gamma for burstiness). Pure and seeded:
// the same flags give the same workload.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tpserve::bench {

struct BenchPrompt {
  std::vector<uint32_t> token_ids;  // [input length] when given as ids
  std::string text;                 // else the prompt text
  int64_t output_len = 0;           // max_tokens (ignore_eos makes it exact)
};

// An inclusive range "MIN..MAX" or one number "N" (= N..N).
struct LengthRange {
  int64_t min = 0, max = 0;
};
// INVALID_ARGUMENT naming `flag` unless 1 <= MIN <= MAX.
absl::StatusOr<LengthRange> ParseLengthRange(absl::string_view text, absl::string_view flag);

// `n` prompts of random token ids in [0, vocab_size), input and output
// lengths uniform in their ranges, from std::mt19937_64(seed).
std::vector<BenchPrompt> RandomPrompts(int64_t n, LengthRange input, LengthRange output, int64_t vocab_size,
                                       uint64_t seed);

// A shared-prefix multi-turn chat workload: `conversations` conversations of
// `turns` turns each, every turn resending the conversation's history. Turn
// t's prompt is the shared prefix (`shared_prefix_len` tokens, the same in
// every conversation: a system prompt), then for each earlier turn its
// question and a stand-in answer of that turn's output length, then turn t's
// question (`question` tokens); so turn t + 1's prompt starts with turn t's
// prompt. The stand-in answers are random (the server's real answers are not
// known when the workload is drawn), so a later turn can reuse from the
// prefix cache the shared prefix and the earlier prompts, not the earlier
// outputs. Prompts come turn by turn: turn 0 of every conversation, then
// turn 1, ...; random ids in [0, vocab_size) from std::mt19937_64(seed).
std::vector<BenchPrompt> MultiTurnPrompts(int64_t conversations, int64_t turns, int64_t shared_prefix_len,
                                          LengthRange question, LengthRange output, int64_t vocab_size,
                                          uint64_t seed);

// The first `n` lines of a JSON-lines file (cycled when it has fewer):
//   {"prompt": "text" | "prompt_token_ids": [1, 2], "output_len": N}
// output_len defaults to `default_output_len`. Errors name the file and line.
absl::StatusOr<std::vector<BenchPrompt>> LoadPrompts(const std::string& path, int64_t n,
                                                     int64_t default_output_len);

// Send times in seconds from the start for `n` requests at `rate` requests/s:
// the first at 0, then gaps drawn from a gamma distribution of shape
// `burstiness` and mean 1 / rate (burstiness 1 = Poisson arrivals; below 1
// burstier, above 1 more even), as vLLM's benchmark does. rate = inf: all at 0.
std::vector<double> ArrivalTimes(int64_t n, double rate, double burstiness, uint64_t seed);

// "inf" or "1,2,4.5" -> the request rates of a serve run; each > 0.
absl::StatusOr<std::vector<double>> ParseRates(absl::string_view text);

}  // namespace tpserve::bench
