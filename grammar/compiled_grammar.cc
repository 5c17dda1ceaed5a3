// Normalize: the IR to what the matcher runs. Every analysis (productive,
// reachable, nullable) is a linear worklist, so a grammar of max_rules rules
// is prepared in time proportional to its size.
#include "grammar/compiled_grammar.h"

#include <deque>
#include <string>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "grammar/collapse.h"

namespace tpserve::grammar::internal {
namespace {

using Alternatives = std::vector<std::vector<Symbol>>;

absl::Status TimeError() {
  return absl::InvalidArgumentError("compiling the grammar took longer than the limit (CompileLimits::max_time)");
}

std::string Shorten(const std::string& s) { return s.size() <= 60 ? s : s.substr(0, 57) + "..."; }

absl::StatusOr<std::vector<std::shared_ptr<const TerminalAutomaton>>> BuildAutomata(const Grammar& g,
                                                                                   LexerCache& cache,
                                                                                   const CompileLimits& limits,
                                                                                   absl::Time deadline) {
  std::vector<std::shared_ptr<const TerminalAutomaton>> automata;
  int64_t states = 0;
  const auto max = static_cast<int64_t>(limits.max_automaton_states);
  for (const Grammar::Terminal& t : g.terminals) {
    auto automaton = cache.Automaton(t.regex, std::max<int64_t>(max - states, 1), deadline);
    if (!automaton.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("terminal ", Shorten(t.name), ": ", automaton.status().message()));
    }
    states += (*automaton)->dfa.num_states();
    if (states > max) {
      return absl::InvalidArgumentError(absl::StrCat("the grammar's terminals need more than ", max,
                                                     " automaton states (CompileLimits::max_automaton_states)"));
    }
    automata.push_back(*std::move(automaton));
  }
  return automata;
}

// Terminals matching "" become optional; terminals matching nothing make their
// alternatives match nothing (dropped). Returns the rules' alternatives.
std::vector<Alternatives> RewriteEmptyTerminals(const Grammar& g, Grammar& out,
                                                const std::vector<std::shared_ptr<const TerminalAutomaton>>& automata) {
  std::vector<Alternatives> rules;
  for (const Grammar::Rule& r : g.rules) {
    out.rules.push_back({r.name, {}});
    rules.push_back(r.alternatives);
  }
  std::vector<int32_t> optional(g.terminals.size(), -1);  // [T] rule "t?" when made
  for (size_t r = 0; r < g.rules.size(); ++r) {
    Alternatives kept;
    for (const std::vector<Symbol>& alt : rules[r]) {
      std::vector<Symbol> seq;
      bool dead = false;
      for (const Symbol& s : alt) {
        if (s.kind == Symbol::Kind::kRule) {
          seq.push_back(s);
          continue;
        }
        const TerminalAutomaton& a = *automata[static_cast<size_t>(s.id)];
        const bool nonempty = a.dfa.start >= 0;
        if (!nonempty && !a.matches_empty) dead = true;
        if (!nonempty) continue;  // only "": nothing to read
        if (!a.matches_empty) {
          seq.push_back(s);
          continue;
        }
        int32_t& opt = optional[static_cast<size_t>(s.id)];
        if (opt < 0) {
          opt = static_cast<int32_t>(rules.size());
          out.rules.push_back({absl::StrCat(g.terminals[static_cast<size_t>(s.id)].name, "?"), {}});
          rules.push_back({{s}, {}});
        }
        seq.push_back({Symbol::Kind::kRule, opt});
      }
      if (!dead) kept.push_back(std::move(seq));
    }
    rules[r] = std::move(kept);
  }
  return rules;
}

// Rules deriving some string (terminals here all match some non-empty string).
std::vector<uint8_t> Productive(const std::vector<Alternatives>& rules) {
  std::vector<uint8_t> productive(rules.size(), 0);
  std::vector<std::vector<std::pair<int32_t, int32_t>>> users(rules.size());  // rule -> (rule, alt) using it
  std::vector<std::vector<int32_t>> missing(rules.size());                     // [rule][alt] unproductive symbols
  std::deque<int32_t> queue;
  for (size_t r = 0; r < rules.size(); ++r) {
    missing[r].assign(rules[r].size(), 0);
    for (size_t a = 0; a < rules[r].size(); ++a) {
      for (const Symbol& s : rules[r][a]) {
        if (s.kind != Symbol::Kind::kRule) continue;
        ++missing[r][a];
        users[static_cast<size_t>(s.id)].emplace_back(static_cast<int32_t>(r), static_cast<int32_t>(a));
      }
      if (missing[r][a] == 0 && !productive[r]) productive[r] = 1, queue.push_back(static_cast<int32_t>(r));
    }
  }
  while (!queue.empty()) {
    const int32_t rule = queue.front();
    queue.pop_front();
    for (const auto& [r, a] : users[static_cast<size_t>(rule)]) {
      if (--missing[static_cast<size_t>(r)][static_cast<size_t>(a)] == 0 && !productive[static_cast<size_t>(r)]) {
        productive[static_cast<size_t>(r)] = 1;
        queue.push_back(r);
      }
    }
  }
  return productive;
}

// Rules deriving "" (terminals never do after RewriteEmptyTerminals).
std::vector<uint8_t> Nullable(const std::vector<Alternatives>& rules) {
  std::vector<uint8_t> nullable(rules.size(), 0);
  std::vector<std::vector<std::pair<int32_t, int32_t>>> users(rules.size());
  std::vector<std::vector<int32_t>> missing(rules.size());
  std::deque<int32_t> queue;
  for (size_t r = 0; r < rules.size(); ++r) {
    missing[r].assign(rules[r].size(), 0);
    for (size_t a = 0; a < rules[r].size(); ++a) {
      bool has_terminal = false;
      for (const Symbol& s : rules[r][a]) {
        if (s.kind == Symbol::Kind::kTerminal) has_terminal = true;
      }
      if (has_terminal) {
        missing[r][a] = -1;  // never nullable
        continue;
      }
      for (const Symbol& s : rules[r][a]) {
        ++missing[r][a];
        users[static_cast<size_t>(s.id)].emplace_back(static_cast<int32_t>(r), static_cast<int32_t>(a));
      }
      if (missing[r][a] == 0 && !nullable[r]) nullable[r] = 1, queue.push_back(static_cast<int32_t>(r));
    }
  }
  while (!queue.empty()) {
    const int32_t rule = queue.front();
    queue.pop_front();
    for (const auto& [r, a] : users[static_cast<size_t>(rule)]) {
      if (--missing[static_cast<size_t>(r)][static_cast<size_t>(a)] == 0 && !nullable[static_cast<size_t>(r)]) {
        nullable[static_cast<size_t>(r)] = 1;
        queue.push_back(r);
      }
    }
  }
  return nullable;
}

bool UsesOnly(const std::vector<Symbol>& alt, const std::vector<uint8_t>& productive) {
  for (const Symbol& s : alt) {
    if (s.kind == Symbol::Kind::kRule && !productive[static_cast<size_t>(s.id)]) return false;
  }
  return true;
}

// Keeps the productive alternatives of the rules reachable from `start`,
// renumbering rules and terminals into `out` (whose rule names are set).
void KeepReachable(std::vector<Alternatives>& rules, const std::vector<uint8_t>& productive, int32_t start,
                   const Grammar& in, Grammar& out,
                   std::vector<std::shared_ptr<const TerminalAutomaton>>& automata) {
  std::vector<int32_t> rule_id(rules.size(), -1), terminal_id(in.terminals.size(), -1);
  std::vector<int32_t> order = {start};
  rule_id[static_cast<size_t>(start)] = 0;
  Grammar kept;
  std::vector<std::shared_ptr<const TerminalAutomaton>> kept_automata;
  for (size_t k = 0; k < order.size(); ++k) {
    const auto r = static_cast<size_t>(order[k]);
    kept.rules.push_back({out.rules[r].name, {}});
    for (std::vector<Symbol>& alt : rules[r]) {
      if (!UsesOnly(alt, productive)) continue;
      for (Symbol& s : alt) {
        if (s.kind == Symbol::Kind::kRule) {
          int32_t& id = rule_id[static_cast<size_t>(s.id)];
          if (id < 0) id = static_cast<int32_t>(order.size()), order.push_back(s.id);
          s.id = id;
        } else {
          int32_t& id = terminal_id[static_cast<size_t>(s.id)];
          if (id < 0) {
            id = static_cast<int32_t>(kept.terminals.size());
            kept.terminals.push_back(in.terminals[static_cast<size_t>(s.id)]);
            kept_automata.push_back(automata[static_cast<size_t>(s.id)]);
          }
          s.id = id;
        }
      }
      kept.rules.back().alternatives.push_back(std::move(alt));
    }
  }
  kept.start = 0;
  out = std::move(kept);
  automata = std::move(kept_automata);
}

ParserTables BuildTables(const Grammar& g, const std::vector<std::shared_ptr<const TerminalAutomaton>>& automata) {
  ParserTables t;
  t.start_rule = g.start;
  std::vector<Alternatives> rules;
  for (const Grammar::Rule& r : g.rules) rules.push_back(r.alternatives);
  t.nullable = Nullable(rules);
  t.rule_first.push_back(0);
  for (size_t r = 0; r < g.rules.size(); ++r) {
    for (const std::vector<Symbol>& alt : g.rules[r].alternatives) {
      t.starts.push_back(static_cast<int32_t>(t.next.size()));
      for (const Symbol& s : alt) {
        t.next.push_back(s.kind == Symbol::Kind::kRule ? s.id : ~s.id);
        t.rule_of.push_back(static_cast<int32_t>(r));
      }
      t.next.push_back(kEnd);
      t.rule_of.push_back(static_cast<int32_t>(r));
    }
    t.rule_first.push_back(static_cast<int32_t>(t.starts.size()));
  }
  for (const auto& a : automata) t.first_bytes.push_back(a->dfa.first_bytes);
  return t;
}

}  // namespace

absl::StatusOr<std::shared_ptr<const CompiledGrammar>> Normalize(const Grammar& grammar_in,
                                                                 std::shared_ptr<const VocabularyImpl> vocabulary,
                                                                 const CompileLimits& limits, absl::Time deadline) {
  if (grammar_in.rules.size() + grammar_in.terminals.size() > limits.max_rules) {
    return absl::InvalidArgumentError(absl::StrCat("the grammar has more than ", limits.max_rules,
                                                   " rules and terminals (CompileLimits::max_rules)"));
  }
  const Grammar collapsed = CollapseContent(grammar_in, vocabulary->cache(), limits, deadline);
  const Grammar& grammar = collapsed;
  auto compiled = std::make_shared<CompiledGrammar>();
  TPSERVE_ASSIGN_OR_RETURN(compiled->automata, BuildAutomata(grammar, vocabulary->cache(), limits, deadline));
  if (absl::Now() > deadline) return TimeError();
  Grammar& out = compiled->grammar;
  std::vector<Alternatives> rules = RewriteEmptyTerminals(grammar, out, compiled->automata);
  const std::vector<uint8_t> productive = Productive(rules);
  if (!productive[static_cast<size_t>(grammar.start)]) {
    return absl::InvalidArgumentError(
        absl::StrCat("the grammar matches no string (rule '", grammar.rules[static_cast<size_t>(grammar.start)].name,
                     "' cannot be completed)"));
  }
  KeepReachable(rules, productive, grammar.start, grammar, out, compiled->automata);
  if (absl::Now() > deadline) return TimeError();
  compiled->tables = BuildTables(out, compiled->automata);
  size_t bytes = compiled->tables.next.size() * 8 + compiled->tables.starts.size() * 4;
  for (const auto& a : compiled->automata) bytes += a->dfa.MemoryBytes();
  if (bytes > limits.max_memory_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("the compiled grammar needs ", bytes, " bytes, more than the limit of ",
                                                   limits.max_memory_bytes, " (CompileLimits::max_memory_bytes)"));
  }
  compiled->initial = EarleyDeriver(compiled->tables).Initial();
  compiled->max_mask_items = limits.max_mask_items;
  compiled->vocabulary = std::move(vocabulary);
  return std::shared_ptr<const CompiledGrammar>(std::move(compiled));
}

}  // namespace tpserve::grammar::internal
