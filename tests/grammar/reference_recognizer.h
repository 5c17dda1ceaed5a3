// An independent recognizer for the matcher tests: a context-free grammar
// whose terminals are small regular-expression trees, decided by set-based
// dynamic programming (least fixpoints over positions), with no automata and
// no Earley items. Slow and simple: for strings of tens of bytes.
//   Viable(w):   w is a prefix of some sentence
//   Complete(w): w is a sentence
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace tpserve::grammar::testing {

struct Tree {
  enum class Kind { kLiteral, kSet, kConcat, kAlt, kStar, kOptional, kCount };
  Kind kind = Kind::kLiteral;
  std::string text;  // kLiteral: the bytes; kSet: the member bytes (non-empty)
  std::vector<Tree> kids;
  int min = 0, max = 0;  // kCount: kids[0]{min,max}

  // In regex.h's dialect.
  std::string Regex() const;
  // In GBNF (ebnf.h).
  std::string Gbnf() const;
};

struct RefSymbol {
  bool terminal = false;
  int id = 0;
};

struct RefGrammar {
  std::vector<Tree> terminals;
  std::vector<std::vector<std::vector<RefSymbol>>> rules;  // [rule][alternative] symbols
  int start = 0;
};

class Reference {
 public:
  Reference(const RefGrammar& g, std::string w);
  bool Viable() const { return viable_; }
  bool Complete() const { return complete_; }

 private:
  const std::set<int>& TreeEnds(const Tree& t, int i) const;
  bool TreePrefix(const Tree& t, int i) const;
  std::set<int> ComputeTreeEnds(const Tree& t, int i) const;
  bool ComputeTreePrefix(const Tree& t, int i) const;
  std::set<int> SymbolEnds(const RefSymbol& s, int i) const;
  bool SymbolPrefix(const RefSymbol& s, int i) const;
  void Solve();

  const RefGrammar& g_;
  std::string w_;
  int n_ = 0;
  std::vector<bool> productive_;                  // [rule]
  std::vector<std::vector<std::set<int>>> ends_;  // [rule][i] positions j with rule =>* w[i:j]
  std::vector<std::vector<bool>> prefix_;         // [rule][i] w[i:] is a prefix of something rule derives
  bool viable_ = false, complete_ = false;
  mutable std::map<std::pair<const Tree*, int>, std::set<int>> tree_ends_;  // memo of TreeEnds
  mutable std::map<std::pair<const Tree*, int>, bool> tree_prefix_;         // memo of TreePrefix
};

}  // namespace tpserve::grammar::testing
