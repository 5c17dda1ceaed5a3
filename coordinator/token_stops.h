// A request's stop parameters, and the stops a sampled token decides by
// itself, without its text: EOS (unless ignore_eos) and stop_token_ids, both
// only after min_tokens; max_tokens and the model's maximum length.
//
// One piece of logic with two users (docs/architecture.md, "The step
// pipeline"): the engine thread runs it on every token to finish a sequence
// and free its blocks at once, and the output processor runs the same on the
// same tokens to end the text there (coordinator/output_processor.h). Both
// see every token of the request in order, so they reach the same verdict at
// the same token. Stop strings need the text and are the output processor's
// alone; it tells the engine (EngineLoop, "Finish from output").
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "chat_output/chat_output.h"

namespace tpserve {

enum class StopReason { kNone, kLength, kEos, kStop, kAborted };

struct StopParams {
  int64_t max_tokens = 0;  // > 0, already capped by the model's maximum length
  int64_t min_tokens = 0;
  std::vector<std::string> stop;
  std::vector<int32_t> stop_token_ids;
  bool ignore_eos = false;
  bool include_stop_str_in_output = false;
  bool skip_special_tokens = true;
  ChatOutputOptions chat_output;  // reasoning and tool calls apart (none by default)
};

class TokenStops {
 public:
  // `eos_token_ids` from the model's generation config; `max_total_tokens` is
  // the model's maximum length and `num_prompt_tokens` the prompt's length.
  TokenStops(const StopParams& params, std::span<const int32_t> eos_token_ids, int64_t num_prompt_tokens,
             int64_t max_total_tokens)
      : eos_(eos_token_ids.begin(), eos_token_ids.end()),
        stop_ids_(params.stop_token_ids),
        min_tokens_(params.min_tokens),
        max_tokens_(params.max_tokens),
        room_(max_total_tokens - num_prompt_tokens),
        ignore_eos_(params.ignore_eos) {}

  // Whether the `n`-th output token (n >= 1) may end the request by EOS, a
  // stop id or a stop string (min_tokens is behind).
  bool MayStop(int64_t n) const { return n > min_tokens_; }
  bool IsEos(int32_t token) const { return !ignore_eos_ && Contains(eos_, token); }
  bool IsStopId(int32_t token) const { return Contains(stop_ids_, token); }

  // The verdict on `token` as the `n`-th output token: kEos (an EOS id, also
  // when it is a stop id too), kStop (a stop id), kLength (max_tokens or the
  // model's length reached), else kNone. EOS and stop ids before min_tokens
  // count as ordinary tokens.
  StopReason Check(int32_t token, int64_t n) const {
    if (MayStop(n)) {
      if (IsEos(token)) return StopReason::kEos;
      if (IsStopId(token)) return StopReason::kStop;
    }
    return n >= max_tokens_ || n >= room_ ? StopReason::kLength : StopReason::kNone;
  }

 private:
  static bool Contains(const std::vector<int32_t>& ids, int32_t token) {
    return std::find(ids.begin(), ids.end(), token) != ids.end();
  }

  std::vector<int32_t> eos_;
  std::vector<int32_t> stop_ids_;
  int64_t min_tokens_;
  int64_t max_tokens_;
  int64_t room_;  // output tokens the model's maximum length leaves
  bool ignore_eos_;
};

}  // namespace tpserve
