// Compiling a request's OutputConstraint against the model's vocabulary, once
// per distinct constraint: the coordinator compiles to validate (a schema the
// engine refuses, or one past the limits, is INVALID_ARGUMENT / HTTP 400
// before the request is queued), and rank 0 compiles again beside the
// sampler, with the same vocabulary (the same tokenizer and config), the
// result cached by the constraint's text.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "grammar/matcher.h"
#include "grammar/spec.h"
#include "grammar/vocabulary.h"
#include "sampling/output_constraint.h"

namespace tpserve {

// The grammar part of `c` as one string (its kind and text, the functions of
// a tool call): equal keys compile to the same grammar. The reasoning ids do
// not count (they do not change the grammar).
std::string ConstraintKey(const OutputConstraint& c);

// `c` compiled against `vocabulary` within `limits` (no cache).
// INVALID_ARGUMENT: the engine's message (the schema keyword, the regex
// construct, the grammar rule, the tool's parameters, the limit passed).
absl::StatusOr<std::shared_ptr<const grammar::CompiledGrammar>> CompileConstraint(
    const OutputConstraint& c, std::shared_ptr<const grammar::Vocabulary> vocabulary,
    const grammar::CompileLimits& limits);

// Makes the vocabulary when first needed (loading a tokenizer costs tenths of
// a second and a 150k-token trie some megabytes: only servers that see a
// constrained request pay).
using VocabularyLoader = std::function<absl::StatusOr<std::shared_ptr<const grammar::Vocabulary>>()>;

class ConstraintCompiler {
 public:
  // `capacity`: compiled grammars kept (the oldest goes first).
  explicit ConstraintCompiler(VocabularyLoader loader, grammar::CompileLimits limits = {}, size_t capacity = 256)
      : loader_(std::move(loader)), limits_(limits), capacity_(capacity) {}

  // The vocabulary (loaded on the first call; its error is kept and returned again).
  absl::StatusOr<std::shared_ptr<const grammar::Vocabulary>> vocabulary() ABSL_LOCKS_EXCLUDED(mu_);
  // `c` compiled, from the cache when it was compiled before. Thread-safe;
  // compiling happens outside the lock. Errors are not cached.
  absl::StatusOr<std::shared_ptr<const grammar::CompiledGrammar>> Compile(const OutputConstraint& c)
      ABSL_LOCKS_EXCLUDED(mu_);

  const grammar::CompileLimits& limits() const { return limits_; }
  int64_t hits() const ABSL_LOCKS_EXCLUDED(mu_);
  int64_t misses() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  const VocabularyLoader loader_;
  const grammar::CompileLimits limits_;
  const size_t capacity_;
  mutable absl::Mutex mu_;
  std::optional<absl::StatusOr<std::shared_ptr<const grammar::Vocabulary>>> vocabulary_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, std::shared_ptr<const grammar::CompiledGrammar>> cache_ ABSL_GUARDED_BY(mu_);
  std::deque<std::string> order_ ABSL_GUARDED_BY(mu_);  // cache_'s keys, oldest first
  int64_t hits_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t misses_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace tpserve
