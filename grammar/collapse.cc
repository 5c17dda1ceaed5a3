// CollapseContent: classify rules bottom-up (strongly connected components in
// reverse topological order), then collapse the topmost collapsible rules,
// descending into a rule's children when its own automaton is too large.
#include "grammar/collapse.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "grammar/nfa.h"
#include "grammar/regex_ast.h"
#include "grammar/scc.h"

namespace tpserve::grammar::internal {
namespace {

constexpr size_t kMaxRegexBytes = 64 << 10;  // a collapsed rule's regex
constexpr int64_t kMaxStates = 20'000;       // a collapsed rule's automaton

struct RuleInfo {
  bool collapsible = false;  // regular, no literal terminal, regex within kMaxRegexBytes
  bool sequence = false;     // some alternative below it has two or more symbols
  std::string regex;         // when collapsible
};

class Collapser {
 public:
  Collapser(const Grammar& g, LexerCache& cache, const CompileLimits& limits, absl::Time deadline)
      : g_(g), cache_(cache), limits_(limits), deadline_(deadline), info_(g.rules.size()), literal_(g.terminals.size(), 1) {}

  Grammar Run() {
    // Collapsing is an optimization: it gets a tenth of the compile's time.
    const absl::Time give_up = std::min(deadline_, absl::Now() + limits_.max_time / 10);
    for (size_t t = 0; t < g_.terminals.size(); ++t) {
      auto a = cache_.Automaton(g_.terminals[t].regex, static_cast<int64_t>(limits_.max_automaton_states), deadline_);
      if (!a.ok()) return g_;  // Normalize reports it
      literal_[t] = IsLiteral((*a)->dfa);
    }
    Classify();
    Grammar out = g_;
    std::vector<int32_t> tops = Tops();
    int64_t budget = static_cast<int64_t>(limits_.max_automaton_states) / 2;
    while (!tops.empty() && absl::Now() < give_up) {
      const int32_t r = tops.back();
      tops.pop_back();
      const RuleInfo& info = info_[static_cast<size_t>(r)];
      absl::StatusOr<std::shared_ptr<const TerminalAutomaton>> a = absl::ResourceExhaustedError("");
      if (SmallEnough(info.regex, std::min(kMaxStates, budget), give_up)) {
        a = cache_.Automaton(info.regex, std::min(kMaxStates, budget), give_up);
      }
      if (a.ok()) {
        budget -= (*a)->dfa.num_states();
        const auto t = static_cast<int32_t>(out.terminals.size());
        out.terminals.push_back({info.regex, absl::StrCat(g_.rules[static_cast<size_t>(r)].name, " (collapsed)")});
        out.rules[static_cast<size_t>(r)].alternatives = {{Symbol{Symbol::Kind::kTerminal, t}}};
        continue;
      }
      for (const auto& alt : g_.rules[static_cast<size_t>(r)].alternatives) {  // too large: its parts instead
        for (const Symbol& s : alt) {
          if (s.kind == Symbol::Kind::kRule && Worth(s.id)) tops.push_back(s.id);
        }
      }
    }
    return Prune(std::move(out));
  }

 private:
  // The regex's NFA stays within twice `states` (a cheap bound before the DFA).
  static bool SmallEnough(const std::string& regex, int64_t states, absl::Time deadline) {
    absl::StatusOr<RegexAst> ast = ParseRegex(regex);
    return ast.ok() && BuildNfa(*ast, 2 * states, deadline).ok();
  }

  bool Worth(int32_t r) const {
    const RuleInfo& info = info_[static_cast<size_t>(r)];
    return info.collapsible && info.sequence;
  }

  void Classify() {
    std::vector<std::vector<int32_t>> edges(g_.rules.size());
    for (size_t r = 0; r < g_.rules.size(); ++r) {
      for (const auto& alt : g_.rules[r].alternatives) {
        for (const Symbol& s : alt) {
          if (s.kind == Symbol::Kind::kRule) edges[r].push_back(s.id);
        }
      }
    }
    for (const std::vector<int32_t>& component : StronglyConnectedComponents(edges)) {
      const auto r = static_cast<size_t>(component[0]);
      if (component.size() > 1 || std::find(edges[r].begin(), edges[r].end(), component[0]) != edges[r].end()) continue;
      Describe(r);
    }
  }

  // info_[r] from its alternatives (every rule it names is described already).
  void Describe(size_t r) {
    RuleInfo& info = info_[r];
    std::string regex = "(?:";
    for (size_t a = 0; a < g_.rules[r].alternatives.size(); ++a) {
      const auto& alt = g_.rules[r].alternatives[a];
      if (a > 0) regex += "|";
      info.sequence = info.sequence || alt.size() >= 2;
      for (const Symbol& s : alt) {
        if (s.kind == Symbol::Kind::kTerminal) {
          if (literal_[static_cast<size_t>(s.id)]) return;
          absl::StrAppend(&regex, "(?:", g_.terminals[static_cast<size_t>(s.id)].regex, ")");
        } else {
          const RuleInfo& sub = info_[static_cast<size_t>(s.id)];
          if (!sub.collapsible) return;
          info.sequence = info.sequence || sub.sequence;
          regex += sub.regex;
        }
        if (regex.size() > kMaxRegexBytes) return;
      }
    }
    info.regex = regex + ")";
    info.collapsible = true;
  }

  // Collapsible rules worth collapsing that a non-collapsible rule names (or the start rule).
  std::vector<int32_t> Tops() const {
    std::vector<uint8_t> top(g_.rules.size(), 0);
    if (Worth(g_.start)) top[static_cast<size_t>(g_.start)] = 1;
    for (size_t r = 0; r < g_.rules.size(); ++r) {
      if (info_[r].collapsible) continue;
      for (const auto& alt : g_.rules[r].alternatives) {
        for (const Symbol& s : alt) {
          if (s.kind == Symbol::Kind::kRule && Worth(s.id)) top[static_cast<size_t>(s.id)] = 1;
        }
      }
    }
    std::vector<int32_t> out;
    for (size_t r = 0; r < top.size(); ++r) {
      if (top[r]) out.push_back(static_cast<int32_t>(r));
    }
    return out;
  }

  // Drops the terminals no rule reachable from the start uses.
  Grammar Prune(Grammar g) const {
    std::vector<uint8_t> seen(g.rules.size(), 0);
    std::vector<int32_t> terminal_id(g.terminals.size(), -1), work = {g.start};
    seen[static_cast<size_t>(g.start)] = 1;
    std::vector<Grammar::Terminal> kept;
    while (!work.empty()) {
      const auto r = static_cast<size_t>(work.back());
      work.pop_back();
      for (auto& alt : g.rules[r].alternatives) {
        for (Symbol& s : alt) {
          if (s.kind == Symbol::Kind::kRule) {
            if (!seen[static_cast<size_t>(s.id)]) seen[static_cast<size_t>(s.id)] = 1, work.push_back(s.id);
            continue;
          }
          int32_t& id = terminal_id[static_cast<size_t>(s.id)];
          if (id < 0) id = static_cast<int32_t>(kept.size()), kept.push_back(g.terminals[static_cast<size_t>(s.id)]);
          s.id = id;
        }
      }
    }
    for (size_t r = 0; r < g.rules.size(); ++r) {
      if (!seen[r]) g.rules[r].alternatives = {{}};  // unreachable: Normalize drops it
    }
    g.terminals = std::move(kept);
    return g;
  }

  const Grammar& g_;
  LexerCache& cache_;
  const CompileLimits& limits_;
  const absl::Time deadline_;
  std::vector<RuleInfo> info_;    // [rules]
  std::vector<uint8_t> literal_;  // [terminals] matches one string
};

}  // namespace

bool IsLiteral(const Dfa& dfa) {
  int32_t s = dfa.start;
  for (int steps = 0; s >= 0 && steps <= dfa.num_states(); ++steps) {
    int32_t next = -1, live = 0;
    for (int b = 0; b < 256; ++b) {
      if (const int32_t t = dfa.Next(s, static_cast<uint8_t>(b)); t >= 0) next = t, ++live;
    }
    if (live == 0) return dfa.accepting[static_cast<size_t>(s)] != 0;
    if (live > 1 || dfa.accepting[static_cast<size_t>(s)]) return false;
    s = next;
  }
  return false;
}

Grammar CollapseContent(const Grammar& g, LexerCache& cache, const CompileLimits& limits, absl::Time deadline) {
  return Collapser(g, cache, limits, deadline).Run();
}

}  // namespace tpserve::grammar::internal
