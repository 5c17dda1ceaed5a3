// Pass 3 of the JSON Schema compiler (json_schema.cc describes the passes):
// the conjs reachable from the root, enum values held against their
// siblings, which conjs can hold a value (a least fixpoint), the string and
// number regexes of each alternative, and the proof that oneOf branches
// cannot overlap.
#include <algorithm>
#include <deque>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "grammar/json_schema_compiler.h"

namespace tpserve::grammar::json_internal {

// ---- pass 3 ----

absl::Status Compiler::Discover(int root) {
  std::deque<int> queue = {root};
  absl::flat_hash_set<int> seen = {root};
  while (!queue.empty()) {
    const int c = queue.front();
    queue.pop_front();
    discovered_.push_back(c);
    if (discovered_.size() > limits_.max_rules) {
      return absl::InvalidArgumentError(absl::StrCat("the schema needs more than ", limits_.max_rules,
                                                     " rules (CompileLimits::max_rules)"));
    }
    auto alts = Flatten(c);
    if (!alts.ok()) return alts.status();
    std::vector<int> children;
    for (const Local& alt : **alts) {
      if (alt.has_enum) continue;
      if ((alt.types & kArr) != 0) {
        children.insert(children.end(), alt.prefix.begin(), alt.prefix.end());
        children.push_back(alt.items);
      }
      if ((alt.types & kObj) != 0) {
        for (const auto& [name, pc] : alt.props) children.push_back(pc);
        children.push_back(alt.additional);
      }
    }
    for (int child : children) {
      if (seen.insert(child).second) queue.push_back(child);
    }
  }
  return absl::OkStatus();
}

int Compiler::MemberConj(const Local& alt, const std::string& name) const {
  for (const auto& [n, c] : alt.props) {
    if (n == name) return c;
  }
  return alt.additional;
}

int Compiler::ItemConj(const Local& alt, int64_t i) const {
  return i < static_cast<int64_t>(alt.prefix.size()) ? alt.prefix[static_cast<size_t>(i)] : alt.items;
}

absl::StatusOr<bool> Compiler::Validate(const json& v, int conj, int depth) {
  if (conj == kTrue) return true;
  if (depth > limits_.max_nesting * 2 + 8) return false;
  auto alts = Flatten(conj);
  if (!alts.ok()) return alts.status();
  for (const Local& alt : **alts) {
    auto ok = ValidateLocal(v, alt, depth);
    if (!ok.ok() || *ok) return ok;
  }
  return false;
}

absl::StatusOr<bool> Compiler::ValidateLocal(const json& v, const Local& alt, int depth, bool in_enum) {
  if (alt.has_enum && !in_enum && !alt.enum_keys->contains(EqualityKey(v))) return false;
  if (v.is_null()) return (alt.types & kNull) != 0;
  if (v.is_boolean()) return (alt.types & kBool) != 0;
  if (v.is_number()) {
    const Dec d = NumberDec(v);
    const bool integral = v.is_number_integer() || d.IsInteger();
    if (!((integral && (alt.types & kInt) != 0) || (v.is_number_float() && (alt.types & kFrac) != 0))) return false;
    const double as_double = v.get<double>();
    if (alt.lower) {
      const int c = Compare(d, alt.lower->exact);
      if (alt.lower->exclusive ? (c <= 0 || as_double <= alt.lower->as_double)
                               : (c < 0 || as_double < alt.lower->as_double)) {
        return false;
      }
    }
    if (alt.upper) {
      const int c = Compare(d, alt.upper->exact);
      if (alt.upper->exclusive ? (c >= 0 || as_double >= alt.upper->as_double)
                               : (c > 0 || as_double > alt.upper->as_double)) {
        return false;
      }
    }
    if (alt.multiple_of != 0) {
      if (!d.IsInteger() || d.ip.size() > 18) return false;
      if (std::stoll(d.ip) % alt.multiple_of != 0) return false;
    }
    return true;
  }
  if (v.is_string()) {
    if ((alt.types & kStr) == 0) return false;
    const std::u32string s = DecodeUtf8(v.get_ref<const std::string&>());
    const auto len = static_cast<int64_t>(s.size());
    if (len < alt.min_len || (alt.max_len >= 0 && len > alt.max_len)) return false;
    for (const Pattern& p : alt.patterns) {
      if (!Matches(p.re, s)) return false;
    }
    return true;
  }
  if (v.is_array()) {
    if ((alt.types & kArr) == 0) return false;
    const auto n = static_cast<int64_t>(v.size());
    if (n < alt.min_items || (alt.max_items >= 0 && n > alt.max_items)) return false;
    for (int64_t i = 0; i < n; ++i) {
      auto ok = Validate(v[static_cast<size_t>(i)], ItemConj(alt, i), depth + 1);
      if (!ok.ok() || !*ok) return ok;
    }
    return true;
  }
  if ((alt.types & kObj) == 0) return false;
  const auto members = static_cast<int64_t>(v.size());
  if (members < alt.min_props || (alt.max_props >= 0 && members > alt.max_props)) return false;
  for (const std::string& r : alt.required) {
    if (!v.contains(r)) return false;
  }
  for (const auto& [k, member] : v.items()) {
    auto ok = Validate(member, MemberConj(alt, k), depth + 1);
    if (!ok.ok() || !*ok) return ok;
  }
  return true;
}

absl::StatusOr<AltInfo> Compiler::AnalyzeAlt(const Local& alt) {
  AltInfo info;
  if (alt.has_enum) {
    for (const json* v : alt.enum_values) {
      if (auto s = Tick(); !s.ok()) return s;
      auto ok = ValidateLocal(*v, alt, 0, /*in_enum=*/true);
      if (!ok.ok()) return ok.status();
      if (*ok) info.enum_ok.push_back(v);
    }
    return info;
  }
  info.types = alt.types & (kNull | kBool | kArr | kObj);
  if ((alt.types & (kInt | kFrac)) != 0) {
    info.ints = IntegersWithin(alt.lower, alt.upper);
    if (alt.multiple_of != 0) {
      // A few multiples between the bounds are listed; otherwise a divisor of
      // a power of ten is a digit pattern (MultiplesRegex); others are refused.
      const int64_t k = alt.multiple_of;
      bool listed = false;
      if (info.ints.lo && info.ints.hi && info.ints.lo->ip.size() <= 15 && info.ints.hi->ip.size() <= 15) {
        const int64_t lo = std::stoll(info.ints.lo->Text());
        const int64_t hi = std::stoll(info.ints.hi->Text());
        int64_t q = lo / k;  // rounds toward zero: up for negatives
        if (lo % k != 0 && lo > 0) ++q;
        const int64_t start = q * k;
        if (start > hi || (hi - start) / k + 1 <= kMaxMultiples) {
          for (int64_t x = start; x <= hi; x += k) info.multiples.push_back(RegexLiteral(DecFromInt(x).Text()));
          listed = true;
        }
      }
      if (!listed && !info.ints.Empty()) {
        auto re = MultiplesRegex(info.ints, k);
        if (!re) {
          return Refuse(alt.where, absl::StrCat("multipleOf: ", k, " is supported only with a minimum and a maximum "
                                                "at most ", kMaxMultiples, " multiples apart (or as a divisor of a "
                                                "power of ten, 2^a 5^b)"));
        }
        if (!re->empty()) info.multiples.push_back(*std::move(re));
      }
      if (!info.multiples.empty()) info.types |= kInt;
    } else {
      if (!info.ints.Empty() && (alt.types & kInt) != 0) info.types |= kInt;
      if ((alt.types & kFrac) != 0) {
        info.fracs = FractionsWithin(alt.lower, alt.upper);
        if (!info.fracs.empty) info.types |= kFrac;
      }
    }
  }
  if ((alt.types & kObj) != 0 && (alt.min_props > 0 || alt.max_props >= 0)) {
    const int64_t cap = alt.max_props >= 0 ? alt.max_props : alt.min_props;
    const auto members = static_cast<int64_t>(alt.props.size() + alt.required.size());
    if ((members + 1) * (cap + 1) > kMaxCountStates) {
      return Refuse(alt.where, absl::StrCat("minProperties / maxProperties: counting ", cap, " members over ", members,
                                            " properties needs more than ", kMaxCountStates, " rules"));
    }
  }
  if ((alt.types & kStr) != 0) {
    if (alt.patterns.size() > 1) {
      return Refuse(alt.patterns[1].where, absl::StrCat(alt.patterns[1].source, " together with ",
                                                        alt.patterns[0].source, " (at ", alt.patterns[0].where,
                                                        ") cannot be enforced exactly"));
    }
    std::optional<Re> re;
    if (alt.patterns.empty()) {
      re = Re::Repeat(Re::Any(), alt.min_len, alt.max_len);
      if (alt.max_len >= 0 && alt.min_len > alt.max_len) re = Re::Set({});
    } else {
      re = WithLength(alt.patterns[0].re, alt.min_len, alt.max_len);
      if (!re) {
        return Refuse(alt.patterns[0].where, absl::StrCat(alt.patterns[0].source,
                                                          " with minLength / maxLength cannot be enforced exactly"));
      }
    }
    if (!IsEmptyLanguage(*re)) {
      info.types |= kStr;
      info.string_re = *std::move(re);
    }
  }
  return info;
}

absl::Status Compiler::Analyze(int conj) {
  if (infos_.contains(conj)) return absl::OkStatus();
  auto alts = Flatten(conj);
  if (!alts.ok()) return alts.status();
  std::vector<AltInfo> infos;
  for (const Local& alt : **alts) {
    auto info = AnalyzeAlt(alt);
    if (!info.ok()) return info.status();
    infos.push_back(*std::move(info));
  }
  infos_.emplace(conj, std::move(infos));
  return absl::OkStatus();
}

// The array / object part of an alternative can be met when the items and
// members it requires can (`holds` says which conjs can).
bool ArrayFeasible(const Local& alt, const std::function<bool(int)>& holds) {
  if (alt.max_items >= 0 && alt.min_items > alt.max_items) return false;
  const int64_t need = std::min<int64_t>(alt.min_items, static_cast<int64_t>(alt.prefix.size()) + 1);
  for (int64_t i = 0; i < need; ++i) {
    if (!holds(i < static_cast<int64_t>(alt.prefix.size()) ? alt.prefix[static_cast<size_t>(i)] : alt.items)) {
      return false;
    }
  }
  return true;
}

bool ObjectFeasible(const Local& alt, const std::function<bool(int)>& holds) {
  for (const std::string& r : alt.required) {
    int c = alt.additional;
    for (const auto& [n, pc] : alt.props) {
      if (n == r) c = pc;
    }
    if (!holds(c)) return false;
  }
  if (alt.max_props >= 0 && static_cast<int64_t>(alt.required.size()) > alt.max_props) return false;
  if (alt.max_props >= 0 && alt.min_props > alt.max_props) return false;
  if (alt.min_props > 0 && !holds(alt.additional)) {
    int64_t possible = 0;
    for (const auto& [n, pc] : alt.props) possible += holds(pc) ? 1 : 0;
    for (const std::string& r : alt.required) {
      possible += std::none_of(alt.props.begin(), alt.props.end(), [&](const auto& p) { return p.first == r; });
    }
    if (possible < alt.min_props) return false;
  }
  return true;
}

bool Compiler::AltNonempty(const Local& alt, const AltInfo& info) const {
  if (alt.has_enum) return !info.enum_ok.empty();
  if ((info.types & (kNull | kBool | kInt | kFrac | kStr)) != 0) return true;
  auto holds = [&](int c) {
    auto it = nonempty_.find(c);
    return c == kTrue || (it != nonempty_.end() && it->second);
  };
  return ((info.types & kArr) != 0 && ArrayFeasible(alt, holds)) ||
         ((info.types & kObj) != 0 && ObjectFeasible(alt, holds));
}

absl::StatusOr<bool> Compiler::ConjDisjoint(int a, int b, int depth) {
  if (a == kTrue || b == kTrue) return false;
  auto fa = Flatten(a);
  if (!fa.ok()) return fa.status();
  auto fb = Flatten(b);
  if (!fb.ok()) return fb.status();
  for (const Local& x : **fa) {
    for (const Local& y : **fb) {
      auto d = Disjoint(x, y, depth + 1);
      if (!d.ok() || !*d) return d;
    }
  }
  return true;
}

// True only when no value can satisfy both alternatives (false: unknown).
absl::StatusOr<bool> Compiler::Disjoint(const Local& a, const Local& b, int depth) {
  if (depth > 12) return false;
  for (const auto* p : {&a, &b}) {
    if (!p->has_enum) continue;
    const Local& other = p == &a ? b : a;
    for (const json* v : p->enum_values) {
      if (auto s = Tick(); !s.ok()) return s;
      auto in_self = ValidateLocal(*v, *p, 0, /*in_enum=*/true);
      if (!in_self.ok()) return in_self.status();
      if (!*in_self) continue;
      auto in_other = ValidateLocal(*v, other, 0);
      if (!in_other.ok()) return in_other.status();
      if (*in_other) return false;
    }
    return true;
  }
  const uint8_t common = a.types & b.types;
  if ((common & (kNull | kBool)) != 0) return false;
  const bool a_num = (a.types & (kInt | kFrac)) != 0, b_num = (b.types & (kInt | kFrac)) != 0;
  if (a_num && b_num) {
    // Disjoint when one range ends below where the other starts.
    auto below = [](const Local& x, const Local& y) {
      if (!x.upper || !y.lower) return false;
      const int c = Compare(x.upper->exact, y.lower->exact);
      return c < 0 || (c == 0 && (x.upper->exclusive || y.lower->exclusive));
    };
    if (!below(a, b) && !below(b, a)) return false;
  }
  if ((common & kStr) != 0) {
    const bool apart = (a.max_len >= 0 && a.max_len < b.min_len) || (b.max_len >= 0 && b.max_len < a.min_len);
    if (!apart) return false;
  }
  if ((common & kArr) != 0) {
    bool apart = (a.max_items >= 0 && a.max_items < b.min_items) || (b.max_items >= 0 && b.max_items < a.min_items);
    const int64_t both = std::min<int64_t>({a.min_items, b.min_items, 8});
    for (int64_t i = 0; i < both && !apart; ++i) {
      auto d = ConjDisjoint(ItemConj(a, i), ItemConj(b, i), depth);
      if (!d.ok()) return d.status();
      apart = *d;
    }
    if (!apart) return false;
  }
  if ((common & kObj) != 0) {
    bool apart = (a.max_props >= 0 && a.max_props < b.min_props) || (b.max_props >= 0 && b.max_props < a.min_props);
    for (const auto* p : {&a, &b}) {
      const Local& other = p == &a ? b : a;
      for (const std::string& name : p->required) {
        if (apart) break;
        const int mine = MemberConj(*p, name), theirs = MemberConj(other, name);
        if (theirs != kTrue && nonempty_.contains(theirs) && !nonempty_[theirs]) {
          apart = true;  // required here, impossible there
        } else if (std::find(other.required.begin(), other.required.end(), name) != other.required.end()) {
          auto d = ConjDisjoint(mine, theirs, depth);
          if (!d.ok()) return d.status();
          apart = *d;
        }
      }
    }
    if (!apart) return false;
  }
  return true;
}

absl::Status Compiler::CheckOneOfs() {
  for (const OneOfCheck& check : one_ofs_) {
    for (size_t i = 0; i < check.branches.size(); ++i) {
      for (size_t k = i + 1; k < check.branches.size(); ++k) {
        for (const Local& x : check.branches[i]) {
          for (const Local& y : check.branches[k]) {
            auto d = Disjoint(x, y, 0);
            if (!d.ok()) return d.status();
            if (!*d) {
              return Refuse(check.where, absl::StrCat("branches ", i, " and ", k,
                                                      " may both match one value; oneOf is supported only when "
                                                      "no value can match two branches (use anyOf)"));
            }
          }
        }
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace tpserve::grammar::json_internal
