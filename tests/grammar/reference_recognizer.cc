#include "tests/grammar/reference_recognizer.h"

#include <cstdio>

namespace tpserve::grammar::testing {
namespace {

std::string EscapeRegexChar(char c) {
  if (std::string("\\.^$|?*+()[]{}-").find(c) != std::string::npos) return std::string("\\") + c;
  return std::string(1, c);
}

std::string EscapeGbnfChar(char c) {
  if (c == '"' || c == '\\' || c == '[' || c == ']' || c == '-' || c == '^') return std::string("\\") + c;
  return std::string(1, c);
}

}  // namespace

std::string Tree::Regex() const {
  switch (kind) {
    case Kind::kLiteral: {
      std::string out = "(?:";
      for (char c : text) out += EscapeRegexChar(c);
      return out + ")";
    }
    case Kind::kSet: {
      std::string out = "[";
      for (char c : text) out += EscapeRegexChar(c);
      return out + "]";
    }
    case Kind::kConcat: return "(?:" + kids[0].Regex() + kids[1].Regex() + ")";
    case Kind::kAlt: return "(?:" + kids[0].Regex() + "|" + kids[1].Regex() + ")";
    case Kind::kStar: return "(?:" + kids[0].Regex() + ")*";
    case Kind::kOptional: return "(?:" + kids[0].Regex() + ")?";
    case Kind::kCount: return "(?:" + kids[0].Regex() + "){" + std::to_string(min) + "," + std::to_string(max) + "}";
  }
  return "";
}

std::string Tree::Gbnf() const {
  switch (kind) {
    case Kind::kLiteral: {
      std::string out = "\"";
      for (char c : text) out += EscapeGbnfChar(c);
      return out + "\"";
    }
    case Kind::kSet: {
      std::string out = "[";
      for (char c : text) out += EscapeGbnfChar(c);
      return out + "]";
    }
    case Kind::kConcat: return "(" + kids[0].Gbnf() + " " + kids[1].Gbnf() + ")";
    case Kind::kAlt: return "(" + kids[0].Gbnf() + " | " + kids[1].Gbnf() + ")";
    case Kind::kStar: return "(" + kids[0].Gbnf() + ")*";
    case Kind::kOptional: return "(" + kids[0].Gbnf() + ")?";
    case Kind::kCount: return "(" + kids[0].Gbnf() + "){" + std::to_string(min) + "," + std::to_string(max) + "}";
  }
  return "";
}

Reference::Reference(const RefGrammar& g, std::string w) : g_(g), w_(std::move(w)), n_(static_cast<int>(w_.size())) {
  Solve();
}

const std::set<int>& Reference::TreeEnds(const Tree& t, int i) const {
  const auto key = std::make_pair(&t, i);
  if (auto it = tree_ends_.find(key); it != tree_ends_.end()) return it->second;
  std::set<int> ends = ComputeTreeEnds(t, i);
  return tree_ends_[key] = std::move(ends);
}

bool Reference::TreePrefix(const Tree& t, int i) const {
  const auto key = std::make_pair(&t, i);
  if (auto it = tree_prefix_.find(key); it != tree_prefix_.end()) return it->second;
  const bool prefix = ComputeTreePrefix(t, i);
  return tree_prefix_[key] = prefix;
}

std::set<int> Reference::ComputeTreeEnds(const Tree& t, int i) const {
  std::set<int> out;
  switch (t.kind) {
    case Tree::Kind::kLiteral:
      if (w_.compare(static_cast<size_t>(i), t.text.size(), t.text) == 0 && i + static_cast<int>(t.text.size()) <= n_) {
        out.insert(i + static_cast<int>(t.text.size()));
      }
      break;
    case Tree::Kind::kSet:
      if (i < n_ && t.text.find(w_[static_cast<size_t>(i)]) != std::string::npos) out.insert(i + 1);
      break;
    case Tree::Kind::kConcat:
      for (int p : TreeEnds(t.kids[0], i)) {
        for (int q : TreeEnds(t.kids[1], p)) out.insert(q);
      }
      break;
    case Tree::Kind::kAlt:
      out = TreeEnds(t.kids[0], i);
      for (int q : TreeEnds(t.kids[1], i)) out.insert(q);
      break;
    case Tree::Kind::kOptional:
      out = TreeEnds(t.kids[0], i);
      out.insert(i);
      break;
    case Tree::Kind::kCount: {
      std::set<int> at = {i};
      for (int k = 0; k <= t.max; ++k) {
        if (k >= t.min) out.insert(at.begin(), at.end());
        std::set<int> next;
        for (int p : at) {
          for (int q : TreeEnds(t.kids[0], p)) next.insert(q);
        }
        at = std::move(next);
      }
      break;
    }
    case Tree::Kind::kStar: {
      out.insert(i);
      std::vector<int> work = {i};
      while (!work.empty()) {
        const int p = work.back();
        work.pop_back();
        for (int q : TreeEnds(t.kids[0], p)) {
          if (out.insert(q).second) work.push_back(q);
        }
      }
      break;
    }
  }
  return out;
}

// w[i:] is a prefix of some string of t (every tree's language is non-empty).
bool Reference::ComputeTreePrefix(const Tree& t, int i) const {
  if (i == n_) return true;
  switch (t.kind) {
    case Tree::Kind::kLiteral: {
      const size_t rest = static_cast<size_t>(n_ - i);
      return rest <= t.text.size() && t.text.compare(0, rest, w_, static_cast<size_t>(i), rest) == 0;
    }
    case Tree::Kind::kSet:
      return n_ - i == 1 && t.text.find(w_[static_cast<size_t>(i)]) != std::string::npos;
    case Tree::Kind::kConcat: {
      if (TreePrefix(t.kids[0], i)) return true;
      for (int p : TreeEnds(t.kids[0], i)) {
        if (TreePrefix(t.kids[1], p)) return true;
      }
      return false;
    }
    case Tree::Kind::kAlt: return TreePrefix(t.kids[0], i) || TreePrefix(t.kids[1], i);
    case Tree::Kind::kOptional: return TreePrefix(t.kids[0], i);
    case Tree::Kind::kStar:
      for (int p : TreeEnds(t, i)) {
        if (TreePrefix(t.kids[0], p)) return true;
      }
      return false;
    case Tree::Kind::kCount: {  // k < max whole copies, then a prefix of one more; or max copies to the end
      std::set<int> at = {i};
      for (int k = 0; k <= t.max; ++k) {
        for (int p : at) {
          if (k < t.max && TreePrefix(t.kids[0], p)) return true;
          if (p == n_) return true;
        }
        std::set<int> next;
        for (int p : at) {
          for (int q : TreeEnds(t.kids[0], p)) next.insert(q);
        }
        at = std::move(next);
      }
      return false;
    }
  }
  return false;
}

std::set<int> Reference::SymbolEnds(const RefSymbol& s, int i) const {
  return s.terminal ? TreeEnds(g_.terminals[static_cast<size_t>(s.id)], i) : ends_[static_cast<size_t>(s.id)][static_cast<size_t>(i)];
}

bool Reference::SymbolPrefix(const RefSymbol& s, int i) const {
  return s.terminal ? TreePrefix(g_.terminals[static_cast<size_t>(s.id)], i)
                    : prefix_[static_cast<size_t>(s.id)][static_cast<size_t>(i)];
}

void Reference::Solve() {
  const size_t r = g_.rules.size();
  productive_.assign(r, false);
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t a = 0; a < r; ++a) {
      if (productive_[a]) continue;
      for (const auto& alt : g_.rules[a]) {
        bool ok = true;
        for (const RefSymbol& s : alt) ok = ok && (s.terminal || productive_[static_cast<size_t>(s.id)]);
        if (ok) productive_[a] = true, changed = true;
      }
    }
  }
  ends_.assign(r, std::vector<std::set<int>>(static_cast<size_t>(n_) + 1));
  prefix_.assign(r, std::vector<bool>(static_cast<size_t>(n_) + 1, false));
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t a = 0; a < r; ++a) {
      for (const auto& alt : g_.rules[a]) {
        bool alt_productive = true;
        for (const RefSymbol& s : alt) alt_productive = alt_productive && (s.terminal || productive_[static_cast<size_t>(s.id)]);
        if (!alt_productive) continue;
        for (int i = 0; i <= n_; ++i) {
          std::set<int> at = {i};
          bool prefix = false;
          for (const RefSymbol& s : alt) {
            std::set<int> next;
            for (int p : at) {
              prefix = prefix || SymbolPrefix(s, p);
              for (int q : SymbolEnds(s, p)) next.insert(q);
            }
            at = std::move(next);
          }
          prefix = prefix || at.count(n_) > 0;
          for (int q : at) changed |= ends_[a][static_cast<size_t>(i)].insert(q).second;
          if (prefix && !prefix_[a][static_cast<size_t>(i)]) prefix_[a][static_cast<size_t>(i)] = true, changed = true;
        }
      }
    }
  }
  const auto start = static_cast<size_t>(g_.start);
  viable_ = productive_[start] && prefix_[start][0];
  complete_ = ends_[start][0].count(n_) > 0;
}

}  // namespace tpserve::grammar::testing
