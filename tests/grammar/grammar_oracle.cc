// The grammar test oracle (grammar_oracle.h).
#include "tests/grammar/grammar_oracle.h"

#include <algorithm>
#include <functional>
#include <limits>
#include <map>
#include <set>
#include <tuple>

#include "absl/strings/str_cat.h"

namespace tpserve::grammar::testing {

using Ranges = std::vector<std::pair<uint32_t, uint32_t>>;

struct OracleRegex::Node {
  enum Kind { kEmpty, kSet, kConcat, kAlt, kRepeat } kind = kEmpty;
  Ranges set;
  std::vector<int> kids;
  int64_t min = 0, max = -1;
};

namespace {

constexpr uint32_t kMax = 0x10FFFF;

Ranges Norm(Ranges r) {
  std::sort(r.begin(), r.end());
  Ranges out;
  for (auto [lo, hi] : r) {
    if (!out.empty() && lo <= out.back().second + 1) {
      out.back().second = std::max(out.back().second, hi);
    } else {
      out.emplace_back(lo, hi);
    }
  }
  return out;
}

// Every scalar value not in r (surrogates never).
Ranges Negate(const Ranges& r) {
  Ranges with_surrogates = r;
  with_surrogates.emplace_back(0xD800, 0xDFFF);
  with_surrogates = Norm(with_surrogates);
  Ranges out;
  uint32_t next = 0;
  for (auto [lo, hi] : with_surrogates) {
    if (lo > next) out.emplace_back(next, lo - 1);
    next = hi + 1;
  }
  if (next <= kMax) out.emplace_back(next, kMax);
  return out;
}

bool In(const Ranges& r, uint32_t c) {
  for (auto [lo, hi] : r) {
    if (c >= lo && c <= hi) return true;
  }
  return false;
}

class Parser {
 public:
  Parser(const std::u32string& p, std::vector<OracleRegex::Node>& nodes) : p_(p), nodes_(nodes) {}

  absl::StatusOr<int> Run() {
    auto r = Alt();
    if (!r.ok()) return r;
    if (i_ != p_.size()) return Err("trailing input");
    return r;
  }

 private:
  using Node = OracleRegex::Node;
  absl::Status Err(const std::string& what) const {
    return absl::InvalidArgumentError(absl::StrCat("oracle regex: ", what, " at ", i_));
  }
  int Add(Node n) {
    nodes_.push_back(std::move(n));
    return static_cast<int>(nodes_.size() - 1);
  }
  bool Peek(char32_t c) const { return i_ < p_.size() && p_[i_] == c; }

  absl::StatusOr<int> Alt() {
    Node alt;
    alt.kind = Node::kAlt;
    while (true) {
      auto c = Concat();
      if (!c.ok()) return c;
      alt.kids.push_back(*c);
      if (!Peek('|')) break;
      ++i_;
    }
    if (alt.kids.size() == 1) return alt.kids[0];
    return Add(alt);
  }

  absl::StatusOr<int> Concat() {
    Node seq;
    seq.kind = Node::kConcat;
    while (i_ < p_.size() && p_[i_] != '|' && p_[i_] != ')') {
      if (p_[i_] == '^' || p_[i_] == '$') {  // anchors at the ends: whole-lexeme matching anyway
        ++i_;
        continue;
      }
      auto a = Atom();
      if (!a.ok()) return a;
      int cur = *a;
      while (i_ < p_.size()) {
        int64_t lo = 0, hi = -1;
        if (p_[i_] == '*') {
          ++i_;
        } else if (p_[i_] == '+') {
          lo = 1;
          ++i_;
        } else if (p_[i_] == '?') {
          hi = 1;
          ++i_;
        } else if (p_[i_] == '{') {
          size_t j = i_ + 1;
          auto num = [&](int64_t& v) {
            size_t s = j;
            v = 0;
            while (j < p_.size() && p_[j] >= '0' && p_[j] <= '9') v = v * 10 + (p_[j++] - '0');
            return j > s;
          };
          bool has_lo = num(lo);
          if (!has_lo) lo = 0;
          hi = lo;
          if (j < p_.size() && p_[j] == ',') {
            ++j;
            if (!num(hi)) hi = -1;
          } else if (!has_lo) {
            break;
          }
          if (j >= p_.size() || p_[j] != '}') break;
          i_ = j + 1;
        } else {
          break;
        }
        if (Peek('?')) ++i_;
        Node rep;
        rep.kind = Node::kRepeat;
        rep.kids = {cur};
        rep.min = lo;
        rep.max = hi;
        cur = Add(rep);
      }
      seq.kids.push_back(cur);
    }
    if (seq.kids.size() == 1) return seq.kids[0];
    if (seq.kids.empty()) return Add(Node{});
    return Add(seq);
  }

  absl::StatusOr<uint32_t> Hex(size_t n) {
    if (i_ + n > p_.size()) return Err("short hex");
    uint32_t v = 0;
    for (size_t k = 0; k < n; ++k) {
      const char32_t c = p_[i_++];
      v *= 16;
      if (c >= '0' && c <= '9') {
        v += c - '0';
      } else if (c >= 'a' && c <= 'f') {
        v += c - 'a' + 10;
      } else if (c >= 'A' && c <= 'F') {
        v += c - 'A' + 10;
      } else {
        return Err("bad hex");
      }
    }
    return v;
  }

  // After '\\': the set (single == true when one code point).
  absl::StatusOr<Ranges> Escape(bool in_class, bool* single) {
    *single = true;
    if (i_ >= p_.size()) return Err("trailing backslash");
    const char32_t c = p_[i_++];
    auto one = [](uint32_t v) { return Ranges{{v, v}}; };
    const Ranges digits = {{'0', '9'}};
    const Ranges word = Norm({{'0', '9'}, {'A', 'Z'}, {'a', 'z'}, {'_', '_'}});
    const Ranges space = Norm({{9, 13}, {32, 32}, {0xA0, 0xA0}, {0x1680, 0x1680}, {0x2000, 0x200A}, {0x2028, 0x2029},
                               {0x202F, 0x202F}, {0x205F, 0x205F}, {0x3000, 0x3000}, {0xFEFF, 0xFEFF}});
    switch (c) {
      case 'd': *single = false; return digits;
      case 'D': *single = false; return Negate(digits);
      case 'w': *single = false; return word;
      case 'W': *single = false; return Negate(word);
      case 's': *single = false; return space;
      case 'S': *single = false; return Negate(space);
      case 'n': return one('\n');
      case 't': return one('\t');
      case 'r': return one('\r');
      case 'f': return one('\f');
      case 'v': return one('\v');
      case '0': return one(0);
      case 'b':
        if (in_class) return one(8);
        return Err("\\b");
      case 'x': {
        auto v = Hex(2);
        if (!v.ok()) return v.status();
        return one(*v);
      }
      case 'u': {
        if (Peek('{')) {
          ++i_;
          size_t close = p_.find('}', i_);
          if (close == std::u32string::npos) return Err("bad \\u{");
          auto v = Hex(close - i_);
          if (!v.ok()) return v.status();
          ++i_;
          return one(*v);
        }
        auto v = Hex(4);
        if (!v.ok()) return v.status();
        return one(*v);
      }
      default:
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) return Err("unknown escape");
        return one(c);
    }
  }

  absl::StatusOr<int> Atom() {
    const char32_t c = p_[i_];
    Node n;
    n.kind = Node::kSet;
    if (c == '(') {
      ++i_;
      if (Peek('?')) {
        if (i_ + 1 < p_.size() && p_[i_ + 1] == ':') {
          i_ += 2;
        } else {
          return Err("group kind");
        }
      }
      auto inner = Alt();
      if (!inner.ok()) return inner;
      if (!Peek(')')) return Err("missing )");
      ++i_;
      return inner;
    }
    if (c == '[') {
      ++i_;
      bool neg = false;
      if (Peek('^')) {
        neg = true;
        ++i_;
      }
      Ranges set;
      bool first = true;
      while (true) {
        if (i_ >= p_.size()) return Err("open class");
        if (p_[i_] == ']' && !first) {
          ++i_;
          break;
        }
        first = false;
        bool single = true;
        Ranges lo;
        if (p_[i_] == '\\') {
          ++i_;
          auto e = Escape(true, &single);
          if (!e.ok()) return e.status();
          lo = *e;
        } else {
          lo = {{p_[i_], p_[i_]}};
          ++i_;
        }
        if (single && i_ + 1 < p_.size() && p_[i_] == '-' && p_[i_ + 1] != ']') {
          ++i_;
          uint32_t hi;
          if (p_[i_] == '\\') {
            ++i_;
            bool s2 = true;
            auto e = Escape(true, &s2);
            if (!e.ok()) return e.status();
            hi = (*e)[0].first;
          } else {
            hi = p_[i_++];
          }
          set.emplace_back(lo[0].first, hi);
        } else {
          set.insert(set.end(), lo.begin(), lo.end());
        }
      }
      set = Norm(set);
      n.set = neg ? Negate(set) : Negate(Negate(set));
      return Add(n);
    }
    if (c == '.') {
      ++i_;
      n.set = Negate({{'\n', '\n'}});
      return Add(n);
    }
    if (c == '\\') {
      ++i_;
      bool single;
      auto e = Escape(false, &single);
      if (!e.ok()) return e.status();
      n.set = *e;
      return Add(n);
    }
    if (c == '*' || c == '+' || c == '?') return Err("nothing to repeat");
    ++i_;
    n.set = {{c, c}};
    return Add(n);
  }

  const std::u32string& p_;
  size_t i_ = 0;
  std::vector<OracleRegex::Node>& nodes_;
};

using Pos = std::vector<char>;

Pos StepNodes(const std::vector<OracleRegex::Node>& nodes, int id, const Pos& from, const std::u32string& t) {
  const auto& n = nodes[static_cast<size_t>(id)];
  const size_t len = t.size();
  switch (n.kind) {
    case OracleRegex::Node::kEmpty:
      return from;
    case OracleRegex::Node::kSet: {
      Pos out(len + 1, 0);
      for (size_t i = 0; i < len; ++i) {
        if (from[i] && In(n.set, t[i])) out[i + 1] = 1;
      }
      return out;
    }
    case OracleRegex::Node::kConcat: {
      Pos cur = from;
      for (int k : n.kids) cur = StepNodes(nodes, k, cur, t);
      return cur;
    }
    case OracleRegex::Node::kAlt: {
      Pos out(len + 1, 0);
      for (int k : n.kids) {
        Pos p = StepNodes(nodes, k, from, t);
        for (size_t i = 0; i <= len; ++i) out[i] |= p[i];
      }
      return out;
    }
    case OracleRegex::Node::kRepeat: {
      Pos cur = from;
      for (int64_t r = 0; r < n.min; ++r) {
        Pos next = StepNodes(nodes, n.kids[0], cur, t);
        if (next == cur) break;
        cur = std::move(next);
        if (std::none_of(cur.begin(), cur.end(), [](char c) { return c != 0; })) return cur;
      }
      Pos result = cur, frontier = cur;
      for (int64_t r = n.min; n.max < 0 || r < n.max; ++r) {
        Pos next = StepNodes(nodes, n.kids[0], frontier, t);
        bool grew = false;
        for (size_t i = 0; i <= len; ++i) {
          if (next[i] && !result[i]) {
            result[i] = 1;
            grew = true;
          }
        }
        if (!grew) break;
        frontier = std::move(next);
      }
      return result;
    }
  }
  return Pos(len + 1, 0);
}

void AppendUtf8(uint32_t cp, std::string& out) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

bool SampleNode(const std::vector<OracleRegex::Node>& nodes, int id, std::mt19937_64& rng, std::string& out) {
  const auto& n = nodes[static_cast<size_t>(id)];
  switch (n.kind) {
    case OracleRegex::Node::kEmpty:
      return true;
    case OracleRegex::Node::kSet: {
      if (n.set.empty()) return false;
      // Mostly printable ASCII when the set has some, sometimes anything.
      Ranges pick = n.set;
      Ranges ascii;
      for (auto [lo, hi] : n.set) {
        const uint32_t a = std::max<uint32_t>(lo, 0x20), b = std::min<uint32_t>(hi, 0x7E);
        if (a <= b) ascii.emplace_back(a, b);
      }
      if (!ascii.empty() && rng() % 8 != 0) pick = ascii;
      uint64_t total = 0;
      for (auto [lo, hi] : pick) total += hi - lo + 1;
      uint64_t k = rng() % total;
      for (auto [lo, hi] : pick) {
        if (k < hi - lo + 1) {
          AppendUtf8(static_cast<uint32_t>(lo + k), out);
          return true;
        }
        k -= hi - lo + 1;
      }
      return false;
    }
    case OracleRegex::Node::kConcat:
      for (int k : n.kids) {
        if (!SampleNode(nodes, k, rng, out)) return false;
      }
      return true;
    case OracleRegex::Node::kAlt: {
      std::vector<int> order = n.kids;
      std::shuffle(order.begin(), order.end(), rng);
      for (int k : order) {
        std::string attempt;
        if (SampleNode(nodes, k, rng, attempt)) {
          out += attempt;
          return true;
        }
      }
      return false;
    }
    case OracleRegex::Node::kRepeat: {
      int64_t count = n.min;
      const int64_t room = n.max < 0 ? 4 : std::min<int64_t>(n.max - n.min, 4);
      if (room > 0) count += static_cast<int64_t>(rng() % static_cast<uint64_t>(room + 1));
      for (int64_t r = 0; r < count; ++r) {
        if (!SampleNode(nodes, n.kids[0], rng, out)) return r >= n.min;
      }
      return true;
    }
  }
  return false;
}

}  // namespace

std::optional<std::u32string> DecodeUtf8Text(const std::string& s) {
  std::u32string out;
  for (size_t i = 0; i < s.size();) {
    const auto b = static_cast<unsigned char>(s[i]);
    int n = 0;
    uint32_t cp = 0;
    if (b < 0x80) {
      n = 1;
      cp = b;
    } else if ((b & 0xE0) == 0xC0) {
      n = 2;
      cp = b & 0x1F;
    } else if ((b & 0xF0) == 0xE0) {
      n = 3;
      cp = b & 0x0F;
    } else if ((b & 0xF8) == 0xF0) {
      n = 4;
      cp = b & 0x07;
    } else {
      return std::nullopt;
    }
    if (i + static_cast<size_t>(n) > s.size()) return std::nullopt;
    for (int k = 1; k < n; ++k) {
      const auto c = static_cast<unsigned char>(s[i + static_cast<size_t>(k)]);
      if ((c & 0xC0) != 0x80) return std::nullopt;
      cp = (cp << 6) | (c & 0x3F);
    }
    const uint32_t min[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < min[n] || cp > kMax || (cp >= 0xD800 && cp <= 0xDFFF)) return std::nullopt;
    out.push_back(cp);
    i += static_cast<size_t>(n);
  }
  return out;
}

absl::StatusOr<OracleRegex> OracleRegex::Parse(const std::string& regex) {
  auto text = DecodeUtf8Text(regex);
  if (!text) return absl::InvalidArgumentError("oracle regex: not UTF-8");
  auto nodes = std::make_shared<std::vector<Node>>();
  Parser parser(*text, *nodes);
  auto root = parser.Run();
  if (!root.ok()) return root.status();
  OracleRegex r;
  r.nodes_ = std::move(nodes);
  r.root_ = *root;
  return r;
}

std::vector<size_t> OracleRegex::Ends(const std::u32string& text, size_t from) const {
  Pos start(text.size() + 1, 0);
  start[from] = 1;
  const Pos p = StepNodes(*nodes_, root_, start, text);
  std::vector<size_t> out;
  for (size_t j = from; j <= text.size(); ++j) {
    if (p[j]) out.push_back(j);
  }
  return out;
}

bool OracleRegex::FullMatch(const std::u32string& text) const {
  const auto ends = Ends(text, 0);
  return !ends.empty() && ends.back() == text.size();
}

bool OracleRegex::MatchesEmpty() const { return FullMatch(std::u32string()); }

std::optional<std::string> OracleRegex::Sample(std::mt19937_64& rng) const {
  for (int attempt = 0; attempt < 20; ++attempt) {
    std::string out;
    if (SampleNode(*nodes_, root_, rng, out)) return out;
  }
  return std::nullopt;
}

absl::StatusOr<Recognizer> Recognizer::Create(const Grammar& grammar) {
  Recognizer r;
  r.grammar_ = &grammar;
  for (const auto& t : grammar.terminals) {
    auto re = OracleRegex::Parse(t.regex);
    if (!re.ok()) return absl::InvalidArgumentError(absl::StrCat(re.status().message(), " in /", t.regex, "/"));
    r.terminals_.push_back(*std::move(re));
  }
  std::vector<bool> term_nullable;
  for (const auto& t : r.terminals_) term_nullable.push_back(t.MatchesEmpty());
  r.nullable_.assign(grammar.rules.size(), false);
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t i = 0; i < grammar.rules.size(); ++i) {
      if (r.nullable_[i]) continue;
      for (const auto& alt : grammar.rules[i].alternatives) {
        bool all = true;
        for (const Symbol& s : alt) {
          all = all && (s.kind == Symbol::Kind::kRule ? r.nullable_[static_cast<size_t>(s.id)]
                                                      : term_nullable[static_cast<size_t>(s.id)]);
        }
        if (all) {
          r.nullable_[i] = true;
          changed = true;
          break;
        }
      }
    }
  }
  return r;
}

bool Recognizer::Accepts(const std::string& utf8) const {
  auto text = DecodeUtf8Text(utf8);
  if (!text) return false;
  const size_t n = text->size();
  struct Item {
    int32_t rule, alt, dot;
    size_t origin;
    bool operator<(const Item& o) const {
      return std::tie(rule, alt, dot, origin) < std::tie(o.rule, o.alt, o.dot, o.origin);
    }
  };
  std::vector<std::set<Item>> sets(n + 1);
  std::vector<std::vector<Item>> work(n + 1);
  std::map<std::pair<int32_t, size_t>, std::vector<size_t>> ends;  // (terminal, from) -> ends
  auto add = [&](size_t at, Item it) {
    if (sets[at].insert(it).second) work[at].push_back(it);
  };
  const Grammar& g = *grammar_;
  for (int32_t a = 0; a < static_cast<int32_t>(g.rules[static_cast<size_t>(g.start)].alternatives.size()); ++a) {
    add(0, {g.start, a, 0, 0});
  }
  for (size_t i = 0; i <= n; ++i) {
    for (size_t w = 0; w < work[i].size(); ++w) {
      const Item it = work[i][w];
      const auto& alt = g.rules[static_cast<size_t>(it.rule)].alternatives[static_cast<size_t>(it.alt)];
      if (static_cast<size_t>(it.dot) == alt.size()) {
        // Complete: advance every item in the origin set waiting for this rule.
        const std::vector<Item> waiting(work[it.origin].begin(), work[it.origin].end());
        for (const Item& p : waiting) {
          const auto& palt = g.rules[static_cast<size_t>(p.rule)].alternatives[static_cast<size_t>(p.alt)];
          if (static_cast<size_t>(p.dot) < palt.size() && palt[static_cast<size_t>(p.dot)].kind == Symbol::Kind::kRule &&
              palt[static_cast<size_t>(p.dot)].id == it.rule) {
            add(i, {p.rule, p.alt, p.dot + 1, p.origin});
          }
        }
        continue;
      }
      const Symbol s = alt[static_cast<size_t>(it.dot)];
      if (s.kind == Symbol::Kind::kRule) {
        const auto& rule = g.rules[static_cast<size_t>(s.id)];
        for (int32_t a = 0; a < static_cast<int32_t>(rule.alternatives.size()); ++a) add(i, {s.id, a, 0, i});
        if (nullable_[static_cast<size_t>(s.id)]) add(i, {it.rule, it.alt, it.dot + 1, it.origin});
        continue;
      }
      auto key = std::make_pair(s.id, i);
      auto found = ends.find(key);
      if (found == ends.end()) found = ends.emplace(key, terminals_[static_cast<size_t>(s.id)].Ends(*text, i)).first;
      for (size_t j : found->second) add(j, {it.rule, it.alt, it.dot + 1, it.origin});
    }
  }
  for (const Item& it : sets[n]) {
    const auto& alt = g.rules[static_cast<size_t>(it.rule)].alternatives[static_cast<size_t>(it.alt)];
    if (it.rule == g.start && it.origin == 0 && static_cast<size_t>(it.dot) == alt.size()) return true;
  }
  return false;
}

absl::StatusOr<Walker> Walker::Create(const Grammar& grammar) {
  Walker w;
  w.grammar_ = &grammar;
  for (const auto& t : grammar.terminals) {
    auto re = OracleRegex::Parse(t.regex);
    if (!re.ok()) return re.status();
    w.terminals_.push_back(*std::move(re));
  }
  constexpr int64_t kInf = std::numeric_limits<int64_t>::max() / 4;
  w.cost_.assign(grammar.rules.size(), kInf);
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t i = 0; i < grammar.rules.size(); ++i) {
      for (const auto& alt : grammar.rules[i].alternatives) {
        int64_t c = 1;
        for (const Symbol& s : alt) c = std::min(kInf, c + (s.kind == Symbol::Kind::kRule ? w.cost_[static_cast<size_t>(s.id)] : 1));
        if (c < w.cost_[i]) {
          w.cost_[i] = c;
          changed = true;
        }
      }
    }
  }
  return w;
}

std::optional<std::string> Walker::Walk(std::mt19937_64& rng, int budget) const {
  constexpr int64_t kInf = std::numeric_limits<int64_t>::max() / 4;
  std::string out;
  // An explicit stack of symbols to expand, leftmost first.
  std::vector<Symbol> stack = {{Symbol::Kind::kRule, grammar_->start}};
  int steps = 0;
  while (!stack.empty()) {
    const Symbol s = stack.back();
    stack.pop_back();
    if (s.kind == Symbol::Kind::kTerminal) {
      auto text = terminals_[static_cast<size_t>(s.id)].Sample(rng);
      if (!text) return std::nullopt;
      out += *text;
      continue;
    }
    const auto& rule = grammar_->rules[static_cast<size_t>(s.id)];
    std::vector<size_t> finite;
    size_t cheapest = 0;
    int64_t best = kInf;
    for (size_t a = 0; a < rule.alternatives.size(); ++a) {
      int64_t c = 1;
      for (const Symbol& x : rule.alternatives[a]) {
        c = std::min(kInf, c + (x.kind == Symbol::Kind::kRule ? cost_[static_cast<size_t>(x.id)] : 1));
      }
      if (c < kInf) finite.push_back(a);
      if (c < best) {
        best = c;
        cheapest = a;
      }
    }
    if (finite.empty()) return std::nullopt;
    const size_t pick = ++steps < budget ? finite[rng() % finite.size()] : cheapest;
    const auto& alt = rule.alternatives[pick];
    for (size_t k = alt.size(); k-- > 0;) stack.push_back(alt[k]);
    if (out.size() > 1'000'000) return std::nullopt;
  }
  return out;
}

}  // namespace tpserve::grammar::testing
