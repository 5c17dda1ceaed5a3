// One sequence's constraint on rank 0: the grammar's matcher, and where the
// output is in its reasoning (only the answer after it is constrained). The
// step runner asks for the next token's mask while the forward runs, masks
// the logits with it, samples, and Accepts the sampled token.
//
//   phase      mask of the next token                 on the sampled token
//   first      the grammar's mask, plus think_start   think_start: reasoning;
//              (the model may open its reasoning)     else the answer's first
//   reasoning  none (free text)                       think_end: answer
//   answer     the grammar's mask (stop ids only      the matcher advances
//              when the output is complete)           (a stop id does not move it)
//
// A model without think tokens starts in `answer`; a prompt that opened the
// reasoning (starts_in_reasoning) starts in `reasoning`. Preemption and
// recompute rebuild it by replaying the output so far (Create), which gives
// the state the first run had.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "grammar/matcher.h"
#include "grammar/vocabulary.h"
#include "sampling/output_constraint.h"

namespace tpserve {

class SequenceConstraint {
 public:
  // `grammar` compiled from `c` against `vocabulary`, replayed over `output`
  // (the tokens generated before a preemption). INVALID_ARGUMENT when a
  // token of `output` is one the grammar refuses (naming its index).
  static absl::StatusOr<std::unique_ptr<SequenceConstraint>> Create(
      std::shared_ptr<const grammar::CompiledGrammar> grammar, std::shared_ptr<const grammar::Vocabulary> vocabulary,
      const OutputConstraint& c, std::span<const int32_t> output = {});

  // The next token's mask into `words` ([grammar::MaskWords(V)]); false, and
  // `words` untouched, while the output is free (in its reasoning).
  bool FillMask(std::span<uint32_t> words);
  // The same into a buffer whose bits are clear outside `range`
  // (grammar::Matcher::FillMask(words, dirty)); on true `range` is the words
  // the mask's allowed tokens lie in, on false it is untouched as `words` is
  // -- except when the grammar gave up (status()): then `words` is all clear
  // and `range` empty.
  bool FillMask(std::span<uint32_t> words, grammar::MaskRange& range);
  // Not OK once the grammar gave up on a mask (grammar::Matcher::status()):
  // the sequence cannot be constrained further and must end with this error.
  // FillMask then answers false and Accept and AcceptDeferred take any token
  // without a change, so the step that finds it can still sample and share a
  // token for the sequence like any other.
  const absl::Status& status() const { return matcher_.status(); }
  // Advances past the sampled token; false (and no change) when the grammar
  // does not allow it.
  bool Accept(int32_t token);
  // The step runner's split of Accept: the sampled token is recorded when it
  // is known (Defer: nothing else) and accepted on the mask thread before the
  // next mask (AcceptDeferred), off the step's critical path. AcceptDeferred:
  // false when the grammar refused the token (a sampler bug); true, and no
  // change, when none was deferred.
  void Defer(int32_t token) { deferred_ = token; }
  bool AcceptDeferred();
  // The answer is complete and nothing may follow but a stop id.
  bool terminated() const;

 private:
  enum class Phase { kFirst, kReasoning, kAnswer };
  SequenceConstraint(std::shared_ptr<const grammar::CompiledGrammar> grammar,
                     std::shared_ptr<const grammar::Vocabulary> vocabulary, const OutputConstraint& c);
  bool IsStop(int32_t token) const;

  grammar::Matcher matcher_;
  std::shared_ptr<const grammar::Vocabulary> vocabulary_;
  int32_t think_start_ = -1, think_end_ = -1;
  Phase phase_ = Phase::kAnswer;
  int32_t deferred_ = -1;  // Defer's token, not accepted yet
};

}  // namespace tpserve
