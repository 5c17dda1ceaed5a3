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
      eos_(std::move(eos_token_ids)),
      detok_(tokenizer, params_.skip_special_tokens),
      num_prompt_(num_prompt_tokens),
      max_total_(max_total_tokens) {
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

OutputDelta OutputProcessor::Finish(OutputDelta delta, StopReason reason) {
  delta.finish = reason;
  finished_ = true;
  return delta;
}

OutputDelta OutputProcessor::Release(std::string text, bool final) {
  OutputDelta delta;
  held_ += text;
  const bool check_stops = num_output_ > params_.min_tokens;
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
      delta.text = held_.substr(0, best);
      if (params_.include_stop_str_in_output) delta.text += *matched;
      delta.matched_stop = *matched;
      held_.clear();
      return Finish(std::move(delta), StopReason::kStop);
    }
  }
  const size_t keep = (final || !check_stops) ? 0 : HoldBack();
  delta.text = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return delta;
}

OutputDelta OutputProcessor::Append(int32_t token) {
  OutputDelta delta = AppendRaw(token);
  if (!parser_) return delta;
  ChatOutputParts parts = parser_->Append(delta.text);
  if (delta.finish != StopReason::kNone) parts.Add(parser_->Finish());
  delta.text = std::move(parts.content);
  delta.reasoning = std::move(parts.reasoning);
  delta.tool_calls = std::move(parts.tool_calls);
  return delta;
}

OutputDelta OutputProcessor::AppendRaw(int32_t token) {
  ++num_output_;
  const bool may_stop = num_output_ > params_.min_tokens;
  const bool is_eos = !params_.ignore_eos && std::find(eos_.begin(), eos_.end(), token) != eos_.end();
  const bool is_stop_id = std::find(params_.stop_token_ids.begin(), params_.stop_token_ids.end(),
                                    token) != params_.stop_token_ids.end();
  if (may_stop && (is_eos || is_stop_id)) {
    OutputDelta delta = Release(detok_.Finish(), /*final=*/true);
    if (delta.finish != StopReason::kNone) return delta;
    if (is_stop_id && !is_eos) {
      auto text = tokenizer_.Decode(std::span<const int32_t>(&token, 1), false);
      delta.matched_stop = text.ok() ? *text : "";
      return Finish(std::move(delta), StopReason::kStop);
    }
    return Finish(std::move(delta), StopReason::kEos);
  }
  const bool at_length =
      num_output_ >= params_.max_tokens || num_prompt_ + num_output_ >= max_total_;
  std::string text = detok_.Add(token);
  if (at_length) text += detok_.Finish();
  OutputDelta delta = Release(std::move(text), at_length);
  if (delta.finish != StopReason::kNone) return delta;
  if (at_length) return Finish(std::move(delta), StopReason::kLength);
  return delta;
}

}  // namespace tpserve
