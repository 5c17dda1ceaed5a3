#include "coordinator/output_processor.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace tpserve {

absl::Status ValidateStopStrings(const std::vector<std::string>& stop) {
  if (stop.size() > kMaxStopStrings) {
    return absl::InvalidArgumentError(absl::StrCat("stopping.stop: ", stop.size(), " stop strings, at most ",
                                                   kMaxStopStrings, "; give fewer"));
  }
  for (size_t i = 0; i < stop.size(); ++i) {
    if (stop[i].empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("stopping.stop[", i, "]: is empty; remove it (an empty string cannot mark a stop)"));
    }
    if (stop[i].size() > kMaxStopStringBytes) {
      return absl::InvalidArgumentError(absl::StrCat("stopping.stop[", i, "]: is ", stop[i].size(),
                                                     " bytes long, at most ", kMaxStopStringBytes, "; shorten it"));
    }
  }
  return absl::OkStatus();
}

OutputProcessor::OutputProcessor(const Tokenizer& tokenizer, StopParams params,
                                 std::vector<int32_t> eos_token_ids, int64_t num_prompt_tokens,
                                 int64_t max_total_tokens)
    : tokenizer_(tokenizer),
      params_(std::move(params)),
      stops_(params_, eos_token_ids, num_prompt_tokens, max_total_tokens),
      detok_(tokenizer, params_.skip_special_tokens) {
  if (ChatOutputParser::Needed(params_.chat_output)) parser_.emplace(params_.chat_output);
}

size_t OutputProcessor::HoldBack() const {
  size_t keep = 0;
  for (const std::string& s : params_.stop) {
    // The longest suffix of held_ that is a proper prefix of s.
    if (s.empty()) continue;
    for (size_t len = std::min(s.size() - 1, held_.size()); len > keep; --len) {
      if (held_.compare(held_.size() - len, len, s, 0, len) == 0) {
        keep = len;
        break;
      }
    }
  }
  return keep;
}

void OutputProcessor::Finish(OutputDelta& delta, StopReason reason) {
  delta.finish = reason;
  finished_ = true;
}

void OutputProcessor::Release(std::string_view text, bool final, OutputDelta& delta) {
  held_ += text;
  const bool check_stops = stops_.MayStop(num_output_);
  if (check_stops && !params_.stop.empty()) {
    // The earliest match wins (ties: the longer stop string).
    size_t best = std::string::npos;
    const std::string* matched = nullptr;
    for (const std::string& s : params_.stop) {
      const size_t pos = held_.find(s);
      if (pos != std::string::npos &&
          (pos < best || (pos == best && s.size() > matched->size()))) {
        best = pos;
        matched = &s;
      }
    }
    if (matched) {
      delta.text.append(held_, 0, best);
      if (params_.include_stop_str_in_output) delta.text += *matched;
      delta.matched_stop = *matched;
      held_.clear();
      return Finish(delta, StopReason::kStop);
    }
  }
  const size_t keep = (final || !check_stops) ? 0 : HoldBack();
  delta.text.append(held_, 0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
}

OutputDelta OutputProcessor::Append(int32_t token) {
  OutputDelta delta;
  Append(token, delta);
  return delta;
}

void OutputProcessor::Append(int32_t token, OutputDelta& delta) {
  delta.Clear();
  AppendRaw(token, delta);
  if (!parser_) return;
  ChatOutputParts parts = parser_->Append(delta.text);
  if (delta.finish != StopReason::kNone) parts.Add(parser_->Finish());
  delta.text = std::move(parts.content);
  delta.reasoning = std::move(parts.reasoning);
  delta.tool_calls = std::move(parts.tool_calls);
}

void OutputProcessor::AppendRaw(int32_t token, OutputDelta& delta) {
  ++num_output_;
  const StopReason stop = stops_.Check(token, num_output_);
  if (stop == StopReason::kEos || stop == StopReason::kStop) {
    Release(detok_.Finish(), /*final=*/true, delta);
    if (delta.finish != StopReason::kNone) return;
    if (stop == StopReason::kStop) {
      auto text = tokenizer_.Decode(std::span<const int32_t>(&token, 1), false);
      delta.matched_stop = text.ok() ? *text : "";
    }
    return Finish(delta, stop);
  }
  const bool at_length = stop == StopReason::kLength;
  std::string text = detok_.Add(token);
  if (at_length) text += detok_.Finish();
  Release(text, at_length, delta);
  if (delta.finish != StopReason::kNone) return;
  if (at_length) Finish(delta, StopReason::kLength);
}

}  // namespace tpserve
