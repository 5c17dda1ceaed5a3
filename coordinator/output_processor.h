// Turns one request's sampled tokens into streamed text and decides when it stops.
//
// Per token, in order:
//   1. EOS ids (unless ignore_eos) and stop_token_ids end the request; the token
//      id is reported but its text is not streamed. Both wait for min_tokens.
//      (Steps 1 and 3 are TokenStops, coordinator/token_stops.h, which the
//      engine thread runs on the same tokens to free the blocks at once.)
//   2. Otherwise the token goes through the incremental detokenizer. Stop
//      strings are matched across token boundaries: text that could still be
//      the start of a stop string is withheld until it can no longer match; a
//      match ends the request, and the stop string is left out of the stream
//      unless include_stop_str_in_output (text after it is always dropped).
//   3. max_tokens and the model's maximum length end it with LENGTH.
//   4. With StopParams::chat_output set, the text that is final goes through
//      a ChatOutputParser (chat_output/chat_output.h): the reasoning and the
//      tool calls come apart from the answer's text.
// The streamed pieces are valid UTF-8 and, for a request that ends by LENGTH or
// EOS without chat_output, concatenate to the detokenized output.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "chat_output/chat_output.h"
#include "coordinator/token_stops.h"
#include "tokenizer/detokenizer.h"
#include "tokenizer/tokenizer.h"

namespace tpserve {

// Limits a request's stop strings must respect (checked before admission).
inline constexpr int kMaxStopStrings = 16;
inline constexpr size_t kMaxStopStringBytes = 256;
absl::Status ValidateStopStrings(const std::vector<std::string>& stop);

struct OutputDelta {
  std::string text;                    // newly final text of the answer (may be empty)
  std::string reasoning;               // newly final reasoning (chat_output only)
  std::vector<ParsedToolCall> tool_calls;  // calls completed now (chat_output only)
  StopReason finish = StopReason::kNone;
  std::string matched_stop;            // the stop string, or the stop token's text
  // Empties it, keeping its strings' capacity (a delta reused token after token).
  void Clear() {
    text.clear();
    reasoning.clear();
    tool_calls.clear();
    finish = StopReason::kNone;
    matched_stop.clear();
  }
};

class OutputProcessor {
 public:
  // `tokenizer` must outlive this object. `eos_token_ids` from the model's
  // generation config. `max_total_tokens` is the model's maximum length and
  // `num_prompt_tokens` the prompt's length.
  OutputProcessor(const Tokenizer& tokenizer, StopParams params,
                  std::vector<int32_t> eos_token_ids, int64_t num_prompt_tokens,
                  int64_t max_total_tokens);

  // Feeds the next sampled token. After a delta with finish != kNone the
  // request is over and Append must not be called again.
  OutputDelta Append(int32_t token);
  // The same into `delta` (cleared first): a caller that keeps one delta for
  // every token reuses its strings instead of allocating new ones.
  void Append(int32_t token, OutputDelta& delta);
  int64_t num_output_tokens() const { return num_output_; }
  bool finished() const { return finished_; }

 private:
  void AppendRaw(int32_t token, OutputDelta& delta);  // steps 1-3
  // Appends `text` to held_ and moves into delta.text what can no longer
  // start a stop string; finishes the delta when held_ now contains a
  // complete stop string.
  void Release(std::string_view text, bool final, OutputDelta& delta);
  size_t HoldBack() const;  // bytes at the end of held_ that may begin a stop string
  void Finish(OutputDelta& delta, StopReason reason);

  const Tokenizer& tokenizer_;
  StopParams params_;
  TokenStops stops_;
  IncrementalDetokenizer detok_;
  int64_t num_output_ = 0;
  std::string held_;  // detokenized text not yet streamed (a possible stop-string start)
  bool finished_ = false;
  std::optional<ChatOutputParser> parser_;  // with params_.chat_output
};

}  // namespace tpserve
