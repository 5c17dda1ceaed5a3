// CollapseContent: classify rules bottom-up (strongly connected components in
// reverse topological order), then collapse the topmost collapsible rules,
// descending into a rule's children when its own automaton is too large.
#include "grammar/collapse.h"

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "grammar/counted_dfa.h"
#include "grammar/nfa.h"
#include "grammar/regex_ast.h"
#include "grammar/scc.h"

namespace tpserve::grammar::internal {
namespace {

constexpr size_t kMaxRegexBytes = 64 << 10;  // a collapsed rule's regex
constexpr int64_t kMaxStates = 20'000;       // a collapsed rule's automaton

// A language of the form unit{lo,hi} (hi < 0: unbounded): what a counted run
// spelled as chunk rules adds up to.
struct Form {
  std::string unit;  // CanonicalRegex of one unit; "" for the form of "" alone
  int64_t lo = 0, hi = 0;
};

struct RuleInfo {
  bool collapsible = false;  // regular, no literal terminal, regex within kMaxRegexBytes
  bool sequence = false;     // some alternative below it has two or more symbols
  std::string regex;         // when collapsible
  std::optional<Form> form;  // when collapsible and its language is unit{lo,hi}
};

std::string FormRegex(const Form& f) {
  return absl::StrCat("(?:", f.unit, "){", f.lo, ",", f.hi < 0 ? "" : absl::StrCat(f.hi), "}");
}

// The concatenation (sum of counts) of two forms of the same unit.
std::optional<Form> Concat(const std::optional<Form>& a, const std::optional<Form>& b) {
  if (!a || !b) return std::nullopt;
  if (!a->unit.empty() && !b->unit.empty() && a->unit != b->unit) return std::nullopt;
  return Form{a->unit.empty() ? b->unit : a->unit, a->lo + b->lo, a->hi < 0 || b->hi < 0 ? -1 : a->hi + b->hi};
}

// The union of alternatives' forms, when the counts make one interval.
std::optional<Form> Union(std::vector<Form> forms) {
  std::string unit;
  for (const Form& f : forms) {
    if (!f.unit.empty() && !unit.empty() && f.unit != unit) return std::nullopt;
    if (!f.unit.empty()) unit = f.unit;
  }
  if (unit.empty() || forms.empty()) return std::nullopt;
  std::sort(forms.begin(), forms.end(), [](const Form& a, const Form& b) { return a.lo < b.lo; });
  Form out{unit, forms[0].lo, forms[0].hi};
  for (size_t i = 1; i < forms.size(); ++i) {
    if (out.hi < 0) break;
    if (forms[i].lo > out.hi + 1) return std::nullopt;  // a gap
    out.hi = forms[i].hi < 0 ? -1 : std::max(out.hi, forms[i].hi);
  }
  return out;
}

class Collapser {
 public:
  Collapser(const Grammar& g, LexerCache& cache, const CompileLimits& limits, absl::Time deadline)
      : g_(g), cache_(cache), limits_(limits), deadline_(deadline), info_(g.rules.size()),
        literal_(g.terminals.size(), 1), term_form_(g.terminals.size()), out_form_(g.rules.size()) {}

  Grammar Run() {
    // Collapsing is an optimization: it gets a tenth of the compile's time.
    const absl::Time give_up = std::min(deadline_, absl::Now() + limits_.max_time / 10);
    for (size_t t = 0; t < g_.terminals.size(); ++t) {
      auto a = cache_.Automaton(g_.terminals[t].regex, static_cast<int64_t>(limits_.max_automaton_states), deadline_);
      if (!a.ok()) return g_;  // Normalize reports it
      literal_[t] = IsLiteral((*a)->dfa);
      if (absl::StatusOr<RegexAst> ast = ParseRegex(g_.terminals[t].regex); ast.ok()) {
        const RegexNode& root = ast->nodes[static_cast<size_t>(ast->root)];
        term_form_[t] = root.kind == RegexNode::Kind::kRepeat
                            ? Form{CanonicalRegex(*ast, root.children[0]), root.min, root.max}
                            : Form{CanonicalRegex(*ast, ast->root), 1, 1};
      }
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
      const bool counted = info.form && info.form->hi > kCountedRepeat;
      const std::string regex = info.form ? FormRegex(*info.form) : info.regex;
      if (counted || SmallEnough(regex, std::min(kMaxStates, budget), give_up)) {
        a = cache_.Automaton(regex, std::min(kMaxStates, budget), give_up, /*counted_only=*/counted);
      }
      if (a.ok()) {
        budget -= (*a)->dfa.num_states();
        const auto t = static_cast<int32_t>(out.terminals.size());
        out.terminals.push_back({regex, absl::StrCat(g_.rules[static_cast<size_t>(r)].name, " (collapsed)")});
        out_form_[static_cast<size_t>(r)] = info.form;
        out.rules[static_cast<size_t>(r)].alternatives = {{Symbol{Symbol::Kind::kTerminal, t}}};
        continue;
      }
      for (const auto& alt : g_.rules[static_cast<size_t>(r)].alternatives) {  // too large: its parts instead
        for (const Symbol& s : alt) {
          if (s.kind == Symbol::Kind::kRule && Worth(s.id)) tops.push_back(s.id);
        }
      }
    }
    WrapQuoted(out, give_up);
    return Prune(std::move(out));
  }

  // A rule `literal X literal` whose X is a counted run (a JSON string of
  // maxLength n: `"` chars{0,n} `"`) becomes one counted terminal, quotes
  // included: the lexeme then ends only at its closing quote.
  void WrapQuoted(Grammar& out, absl::Time give_up) {
    for (size_t r = 0; r < out.rules.size() && absl::Now() < give_up; ++r) {
      if (out.rules[r].alternatives.size() != 1 || out.rules[r].alternatives[0].size() != 3) continue;
      const std::vector<Symbol>& alt = out.rules[r].alternatives[0];
      if (alt[0].kind != Symbol::Kind::kTerminal || alt[2].kind != Symbol::Kind::kTerminal) continue;
      if (alt[0].id >= static_cast<int32_t>(g_.terminals.size()) || alt[2].id >= static_cast<int32_t>(g_.terminals.size()) ||
          !literal_[static_cast<size_t>(alt[0].id)] || !literal_[static_cast<size_t>(alt[2].id)]) {
        continue;
      }
      std::optional<Form> form;
      if (alt[1].kind == Symbol::Kind::kRule) form = out_form_[static_cast<size_t>(alt[1].id)];
      if (alt[1].kind == Symbol::Kind::kTerminal && alt[1].id < static_cast<int32_t>(g_.terminals.size())) {
        form = term_form_[static_cast<size_t>(alt[1].id)];
      }
      if (!form || form->hi <= kCountedRepeat) continue;
      const std::string regex = absl::StrCat(out.terminals[static_cast<size_t>(alt[0].id)].regex, FormRegex(*form),
                                             out.terminals[static_cast<size_t>(alt[2].id)].regex);
      if (!cache_.Automaton(regex, kMaxStates, give_up, /*counted_only=*/true).ok()) continue;
      const auto t = static_cast<int32_t>(out.terminals.size());
      out.terminals.push_back({regex, absl::StrCat(g_.rules[r].name, " (collapsed)")});
      out.rules[r].alternatives = {{Symbol{Symbol::Kind::kTerminal, t}}};
    }
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
    std::vector<Form> forms;
    bool has_forms = true;
    bool spelled = true;  // `regex` spells the rule (false past kMaxRegexBytes: then only its form can)
    for (size_t a = 0; a < g_.rules[r].alternatives.size(); ++a) {
      const auto& alt = g_.rules[r].alternatives[a];
      if (a > 0 && spelled) regex += "|";
      info.sequence = info.sequence || alt.size() >= 2;
      std::optional<Form> form = Form{};
      for (const Symbol& s : alt) {
        if (s.kind == Symbol::Kind::kTerminal) {
          if (literal_[static_cast<size_t>(s.id)]) return;
          if (spelled) absl::StrAppend(&regex, "(?:", g_.terminals[static_cast<size_t>(s.id)].regex, ")");
          form = Concat(form, term_form_[static_cast<size_t>(s.id)]);
        } else {
          const RuleInfo& sub = info_[static_cast<size_t>(s.id)];
          if (!sub.collapsible) return;
          info.sequence = info.sequence || sub.sequence;
          if (spelled) regex += sub.regex;
          form = Concat(form, sub.form);
        }
        if (regex.size() > kMaxRegexBytes) spelled = false, regex.clear();  // never spelled out again: it may double per rule
        if (!spelled && !form) return;
      }
      if (form) forms.push_back(*form);
      has_forms = has_forms && form.has_value();
    }
    if (has_forms) info.form = Union(std::move(forms));
    if (spelled) info.regex = regex + ")";
    if (!spelled && info.form) info.regex = FormRegex(*info.form);
    if (info.regex.empty() || info.regex.size() > kMaxRegexBytes) return;
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
  std::vector<std::optional<Form>> term_form_;  // [terminals] unit{lo,hi}, when parsed
  std::vector<std::optional<Form>> out_form_;   // [rules] the form of a rule collapsed into a terminal
};

}  // namespace

bool IsLiteral(const Dfa& dfa) {
  if (dfa.counted) return false;
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
