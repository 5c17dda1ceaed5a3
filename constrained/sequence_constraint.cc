#include "constrained/sequence_constraint.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace tpserve {

SequenceConstraint::SequenceConstraint(std::shared_ptr<const grammar::CompiledGrammar> grammar,
                                       std::shared_ptr<const grammar::Vocabulary> vocabulary,
                                       const OutputConstraint& c)
    : matcher_(std::move(grammar)), vocabulary_(std::move(vocabulary)) {
  const auto in_vocab = [&](int32_t id) { return id >= 0 && id < vocabulary_->size(); };
  if (in_vocab(c.think_start) && in_vocab(c.think_end)) {
    think_start_ = c.think_start;
    think_end_ = c.think_end;
    phase_ = c.starts_in_reasoning ? Phase::kReasoning : Phase::kFirst;
  }
}

absl::StatusOr<std::unique_ptr<SequenceConstraint>> SequenceConstraint::Create(
    std::shared_ptr<const grammar::CompiledGrammar> grammar, std::shared_ptr<const grammar::Vocabulary> vocabulary,
    const OutputConstraint& c, std::span<const int32_t> output) {
  std::unique_ptr<SequenceConstraint> s(new SequenceConstraint(std::move(grammar), std::move(vocabulary), c));
  for (size_t i = 0; i < output.size(); ++i) {
    if (!s->Accept(output[i])) {
      return absl::InvalidArgumentError(absl::StrCat("output token ", i, " (id ", output[i],
                                                     ") is not one the constraint allows there"));
    }
  }
  return s;
}

bool SequenceConstraint::IsStop(int32_t token) const {
  const std::vector<int32_t>& stops = vocabulary_->stop_ids();
  return std::find(stops.begin(), stops.end(), token) != stops.end();
}

bool SequenceConstraint::FillMask(std::span<uint32_t> words) {
  grammar::MaskRange all{0, words.size()};
  return FillMask(words, all);
}

bool SequenceConstraint::FillMask(std::span<uint32_t> words, grammar::MaskRange& range) {
  if (phase_ == Phase::kReasoning) return false;
  range = matcher_.FillMask(words, range);
  if (!matcher_.status().ok()) return false;  // all clear, range empty
  if (phase_ == Phase::kFirst) {
    const auto w = static_cast<size_t>(think_start_ / 32);
    words[w] |= 1u << (think_start_ % 32);
    range = range.begin < range.end ? grammar::MaskRange{std::min(range.begin, w), std::max(range.end, w + 1)}
                                    : grammar::MaskRange{w, w + 1};
  }
  return true;
}

bool SequenceConstraint::Accept(int32_t token) {
  if (!matcher_.status().ok()) return true;  // the sequence ends with status()
  switch (phase_) {
    case Phase::kReasoning:
      if (token == think_end_) phase_ = Phase::kAnswer;
      return true;
    case Phase::kFirst:
      if (token == think_start_) {
        phase_ = Phase::kReasoning;
        return true;
      }
      break;
    case Phase::kAnswer:
      break;
  }
  // A stop id ends the output; when the coordinator goes on past it
  // (min_tokens), the grammar's state stays where the answer was complete.
  if (IsStop(token)) {
    if (!matcher_.IsComplete()) return false;
    phase_ = Phase::kAnswer;
    return true;
  }
  if (!matcher_.Accept(token)) return false;
  phase_ = Phase::kAnswer;
  return true;
}

bool SequenceConstraint::AcceptDeferred() {
  if (deferred_ < 0) return true;
  const int32_t token = std::exchange(deferred_, -1);
  return Accept(token);
}

bool SequenceConstraint::terminated() const { return phase_ == Phase::kAnswer && matcher_.IsTerminated(); }

}  // namespace tpserve
