#include "constrained/constraint_compiler.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "constrained/tool_call_grammar.h"

namespace tpserve {
namespace {

grammar::GrammarSpec SpecOf(const OutputConstraint& c) {
  using K = OutputConstraint::Kind;
  grammar::GrammarSpec spec;
  switch (c.kind) {
    case K::kJsonSchema: spec.kind = grammar::GrammarSpec::Kind::kJsonSchema; break;
    case K::kJsonObject: spec.kind = grammar::GrammarSpec::Kind::kJsonObject; break;
    case K::kRegex: spec.kind = grammar::GrammarSpec::Kind::kRegex; break;
    case K::kEbnf: spec.kind = grammar::GrammarSpec::Kind::kEbnf; break;
    case K::kChoice: spec.kind = grammar::GrammarSpec::Kind::kChoice; break;
    case K::kToolCalls: break;  // not a spec (ToolCallGrammar)
  }
  spec.text = c.text;
  spec.choices = c.choices;
  spec.layout = c.indented ? grammar::JsonLayout::kIndented : grammar::JsonLayout::kCompact;
  return spec;
}

// A length-prefixed field, so that no two constraints share a key.
void AppendField(std::string& key, const std::string& field) { absl::StrAppend(&key, field.size(), ":", field); }

}  // namespace

std::string ConstraintKey(const OutputConstraint& c) {
  if (c.kind != OutputConstraint::Kind::kToolCalls) return SpecOf(c).CacheKey();
  std::string key = absl::StrCat("tools/", static_cast<int>(c.tool_format), "/", c.parallel_tool_calls ? 1 : 0, "/",
                                 c.indented ? 1 : 0, "/");
  for (const ToolFunction& f : c.functions) {
    AppendField(key, f.name);
    AppendField(key, f.parameters_json);
  }
  return key;
}

absl::StatusOr<std::shared_ptr<const grammar::CompiledGrammar>> CompileConstraint(
    const OutputConstraint& c, std::shared_ptr<const grammar::Vocabulary> vocabulary,
    const grammar::CompileLimits& limits) {
  if (c.kind != OutputConstraint::Kind::kToolCalls) return grammar::Compile(SpecOf(c), std::move(vocabulary), limits);
  const absl::Time start = absl::Now();
  absl::StatusOr<grammar::Grammar> g = ToolCallGrammar(c, limits);
  if (!g.ok()) return g.status();
  grammar::CompileLimits rest = limits;  // the frame's time counts against the limit too
  rest.max_time = std::max(absl::ZeroDuration(), limits.max_time - (absl::Now() - start));
  return grammar::CompileGrammar(*g, std::move(vocabulary), rest);
}

absl::StatusOr<std::shared_ptr<const grammar::Vocabulary>> ConstraintCompiler::vocabulary() {
  absl::MutexLock lock(&mu_);
  if (!vocabulary_) vocabulary_ = loader_();  // once; compiles wait for it
  return *vocabulary_;
}

absl::StatusOr<std::shared_ptr<const grammar::CompiledGrammar>> ConstraintCompiler::Compile(const OutputConstraint& c) {
  std::string key = ConstraintKey(c);
  {
    absl::MutexLock lock(&mu_);
    if (auto it = cache_.find(key); it != cache_.end()) {
      ++hits_;
      return it->second;
    }
    ++misses_;
  }
  absl::StatusOr<std::shared_ptr<const grammar::Vocabulary>> vocab = vocabulary();
  if (!vocab.ok()) {
    return absl::Status(vocab.status().code(),
                        absl::StrCat("the model's vocabulary for the grammar engine: ", vocab.status().message()));
  }
  absl::StatusOr<std::shared_ptr<const grammar::CompiledGrammar>> compiled = CompileConstraint(c, *vocab, limits_);
  if (!compiled.ok()) return compiled.status();
  absl::MutexLock lock(&mu_);
  if (cache_.emplace(key, *compiled).second) {
    order_.push_back(std::move(key));
    while (order_.size() > capacity_) {
      cache_.erase(order_.front());
      order_.pop_front();
    }
  }
  return compiled;
}

int64_t ConstraintCompiler::hits() const {
  absl::MutexLock lock(&mu_);
  return hits_;
}

int64_t ConstraintCompiler::misses() const {
  absl::MutexLock lock(&mu_);
  return misses_;
}

}  // namespace tpserve
