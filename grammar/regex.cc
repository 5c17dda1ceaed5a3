// CheckRegex, CompileRegex and EscapeRegexLiteral: the regex dialect's entry
// points (the parser is regex_parser.cc, the automata nfa.cc and dfa.cc).
#include "grammar/regex.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "grammar/counted_dfa.h"
#include "grammar/dfa.h"
#include "grammar/regex_ast.h"

namespace tpserve::grammar {
namespace internal {

absl::StatusOr<Dfa> CompileRegex(absl::string_view regex, int64_t max_states, absl::Time deadline) {
  TPSERVE_ASSIGN_OR_RETURN(const RegexAst ast, ParseRegex(regex));
  return CompileRegexAst(ast, max_states, deadline);
}

absl::StatusOr<Dfa> CompileRegexAst(const RegexAst& ast, int64_t max_states, absl::Time deadline) {
  TPSERVE_ASSIGN_OR_RETURN(const Nfa nfa, BuildNfa(ast, 4 * max_states, deadline));
  return BuildDfa(nfa, max_states, deadline);
}

}  // namespace internal

absl::Status CheckRegex(absl::string_view regex, const CompileLimits& limits) {
  if (regex.size() > limits.max_spec_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("regex of ", regex.size(), " bytes is longer than the limit of ",
                                                   limits.max_spec_bytes, " (CompileLimits::max_spec_bytes)"));
  }
  // As the engine compiles a terminal (LexerCache::Automaton): counted when that is exact, else a plain automaton.
  TPSERVE_ASSIGN_OR_RETURN(const internal::RegexAst ast, internal::ParseRegex(regex));
  const auto max_states = static_cast<int64_t>(limits.max_automaton_states);
  const absl::Time deadline = absl::Now() + limits.max_time;
  if (internal::BuildCountedDfa(ast, max_states, deadline)) return absl::OkStatus();
  return internal::CompileRegexAst(ast, max_states, deadline).status();
}

namespace {

bool IsRegexMeta(char c) {
  switch (c) {
    case '\\': case '.': case '^': case '$': case '|': case '?': case '*': case '+':
    case '(': case ')': case '[': case ']': case '{': case '}':
      return true;
    default:
      return false;
  }
}

}  // namespace

std::string EscapeRegexLiteral(absl::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  for (unsigned char c : bytes) {
    if (IsRegexMeta(static_cast<char>(c))) {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c == 0x7F) {
      absl::StrAppendFormat(&out, "\\x%02X", c);
    } else {
      out += static_cast<char>(c);  // bytes >= 0x80 stand for themselves
    }
  }
  return out;
}

}  // namespace tpserve::grammar
