// What a request constrains its output to, before compilation: the one
// description shared by the API (proto, HTTP), the coordinator, the worker
// that compiles it beside the sampler, and tpserve-grammar. No gRPC here.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/time/time.h"

namespace tpserve::grammar {

// How JSON the grammar produces is laid out (kJsonSchema, kJsonObject).
//   compact   no whitespace at all: {"a":1,"b":[true,null]}  (the default;
//             the fewest tokens, and one spelling per value)
//   indented  the layout of json.dumps(v, indent=2): a newline and two spaces
//             per level before each member and element, ": " after keys
// Properties come in the schema's `properties` order (required or not),
// then any additional ones; a model cannot reorder them.
enum class JsonLayout : uint8_t { kCompact, kIndented };

struct GrammarSpec {
  enum class Kind : uint8_t {
    kJsonSchema,  // text: a JSON Schema (draft 2020-12 keywords; json_schema.h says which)
    kJsonObject,  // any JSON object (OpenAI's response_format json_object)
    kRegex,       // text: a regular expression the whole output matches (regex.h's dialect)
    kEbnf,        // text: a grammar in llama.cpp's GBNF dialect, start rule `root` (ebnf.h)
    kChoice,      // choices: the output is exactly one of them
  };
  Kind kind = Kind::kJsonObject;
  std::string text;
  std::vector<std::string> choices;
  JsonLayout layout = JsonLayout::kCompact;

  // The same spec gives the same key: compiled grammars are cached by it.
  std::string CacheKey() const;
};

// Bounds on compiling what a client sent; past one, Compile answers
// INVALID_ARGUMENT naming the bound (and the flag that sets it, where one does).
struct CompileLimits {
  absl::Duration max_time = absl::Seconds(2);
  size_t max_spec_bytes = 1 << 20;       // schema, regex or grammar text
  int max_nesting = 64;                  // schema / grammar nesting
  size_t max_rules = 20'000;             // rules + terminals after expansion
  size_t max_automaton_states = 100'000; // states of all terminal automata together
  size_t max_memory_bytes = 256 << 20;   // the compiled grammar's tables and caches
  // Parser items one mask may make (Matcher::FillMask). Real schemas, tools and
  // json.gbnf make at most 262 (bench/grammar_bench, 2026-12-04); an ambiguous
  // grammar whose lexemes may end inside almost every token of a 152k
  // vocabulary made 7 million (0.2 s a mask), which would stall every step of
  // the server. Past this the Matcher gives up: Matcher::status().
  size_t max_mask_items = 200'000;
};

}  // namespace tpserve::grammar
