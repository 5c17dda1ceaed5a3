// Helpers of the JSON Schema front end's tests: compile a schema, check the
// terminals are in regex.h's dialect (the engine's own parser), and hold
// strings against the grammar through the test oracle (grammar_oracle.h).
#pragma once

#include <memory>
#include <string>

#include <gtest/gtest.h>

#include "grammar/grammar.h"
#include "grammar/json_schema.h"
#include "grammar/regex.h"
#include "tests/grammar/grammar_oracle.h"

namespace tpserve::grammar::testing {

struct CompiledSchema {
  std::unique_ptr<Grammar> grammar;
  std::unique_ptr<Recognizer> recognizer;
  bool Accepts(const std::string& text) const { return recognizer->Accepts(text); }
};

// The schema compiled, its terminals checked with CheckRegex, and the oracle
// built; a failed status when any step fails.
inline absl::StatusOr<CompiledSchema> CompileForTest(const std::string& schema,
                                                     JsonLayout layout = JsonLayout::kCompact,
                                                     const CompileLimits& limits = {}) {
  auto g = JsonSchemaGrammar(schema, layout, limits);
  if (!g.ok()) return g.status();
  CompiledSchema c;
  c.grammar = std::make_unique<Grammar>(*std::move(g));
  for (const auto& t : c.grammar->terminals) {
    if (absl::Status s = CheckRegex(t.regex, limits); !s.ok()) {
      return absl::InternalError(absl::StrCat("terminal ", t.name, " /", t.regex, "/ is not in the dialect: ",
                                              s.message()));
    }
  }
  auto r = Recognizer::Create(*c.grammar);
  if (!r.ok()) return r.status();
  c.recognizer = std::make_unique<Recognizer>(*std::move(r));
  return c;
}

}  // namespace tpserve::grammar::testing
