// Compiling a GrammarSpec against a model's Vocabulary, and matching one
// sequence's output token by token: the mask of the tokens allowed next, as a
// packed bitmask the host and CUDA samplers apply as it is.
//
//   auto compiled = Compile(spec, vocabulary, limits);   // once per spec (cache by CacheKey)
//   Matcher m(*compiled);                                 // one per sequence
//   m.FillMask(words);          // before sampling: bit t set <=> token t allowed
//   m.Accept(token);            // after: the sampled token (it must be allowed)
//   m.Rollback(n);              // speculative tokens rejected, or a preemption's recompute
//
// Contracts:
//   * Exactly the tokens whose bytes extend the output to a prefix of some
//     sentence of the grammar are allowed (never a token the grammar forbids;
//     never a special id), plus the stop ids exactly when IsComplete().
//   * A Matcher replayed with Accept over a sequence's tokens reaches the same
//     state as the one that produced them (preemption and recompute rebuild it
//     this way).
//   * Cost: FillMask follows the tokens that can still match, not the
//     vocabulary (a token trie walked with the lexer's state, and masks
//     precomputed for states whose mask does not depend on the context).
//     Targets, one thread, 128k-152k vocabularies: p50 <= 10 us, p99 <= 500 us;
//     Compile p50 <= 2 ms for real JSON schemas. A mask's parser work is
//     bounded (CompileLimits::max_mask_items; past it, status()).
// A Matcher is used by one thread at a time; a CompiledGrammar is immutable
// and shared freely.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "absl/status/statusor.h"
#include "grammar/spec.h"
#include "grammar/vocabulary.h"

namespace tpserve::grammar {

class CompiledGrammar;
struct Grammar;

// `spec` against `vocabulary`. INVALID_ARGUMENT saying what is wrong (the
// schema keyword, the regex construct, the grammar rule) or which limit was
// passed; never a grammar that would let through output the spec forbids.
absl::StatusOr<std::shared_ptr<const CompiledGrammar>> Compile(const GrammarSpec& spec,
                                                               std::shared_ptr<const Vocabulary> vocabulary,
                                                               const CompileLimits& limits = {});

// A grammar built with GrammarBuilder (grammar.h), e.g. a tool call's frame
// around AddJsonSchema's rules: the same contract and limits as Compile.
absl::StatusOr<std::shared_ptr<const CompiledGrammar>> CompileGrammar(const Grammar& grammar,
                                                                      std::shared_ptr<const Vocabulary> vocabulary,
                                                                      const CompileLimits& limits = {});

// Words of a mask over `vocab_size` tokens: bit t % 32 of word t / 32.
inline size_t MaskWords(int32_t vocab_size) { return (static_cast<size_t>(vocab_size) + 31) / 32; }

// Words [begin, end) of a mask: every set bit lies inside (empty: none).
struct MaskRange {
  size_t begin = 0, end = 0;
};

class Matcher {
 public:
  explicit Matcher(std::shared_ptr<const CompiledGrammar> grammar);
  ~Matcher();
  Matcher(Matcher&&) noexcept;
  Matcher& operator=(Matcher&&) noexcept;

  // words: [MaskWords(V)], overwritten.
  void FillMask(std::span<uint32_t> words);
  // The same mask into `words` ([MaskWords(V)]) whose bits are all clear
  // outside `dirty` (the range this returned for the buffer's last mask, or
  // {0, words.size()} for a buffer of any content): only `dirty` is cleared,
  // and the words the allowed tokens lie in are returned. A buffer reused
  // from mask to mask then costs what the masks span, not the vocabulary
  // (FillMask clears all V / 32 words).
  MaskRange FillMask(std::span<uint32_t> words, MaskRange dirty);
  // Advances past `token`; false, and no change, when it is not allowed.
  bool Accept(int32_t token);
  // Undoes the last `n` accepted tokens (n <= accepted()).
  void Rollback(size_t n);
  size_t accepted() const;

  // The output so far is a sentence of the grammar: stop ids are allowed.
  bool IsComplete() const;
  // Complete, and no byte may follow: only stop ids are allowed.
  bool IsTerminated() const;
  // The one token allowed next, when exactly one non-stop token is (jump-forward:
  // emitting it is what sampling would do).
  std::optional<int32_t> ForcedToken();

  // OK until a mask would have made more parser items than the grammar's
  // CompileLimits::max_mask_items (a grammar so ambiguous that its masks cost
  // far more than real ones); then INVALID_ARGUMENT naming the limit, for good:
  // that mask and every later one allow nothing, Accept refuses every token,
  // IsComplete is false. The server ends such a sequence with this status.
  const absl::Status& status() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace tpserve::grammar
