// Exact decimals and the regexes of numbers within bounds (json_schema_number.h).
#include "grammar/json_schema_number.h"

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace tpserve::grammar::json_internal {
namespace {

Dec Canonical(bool neg, std::string ip, std::string fp) {
  const size_t nz = ip.find_first_not_of('0');
  ip = nz == std::string::npos ? "0" : ip.substr(nz);
  while (!fp.empty() && fp.back() == '0') fp.pop_back();
  Dec d{neg, std::move(ip), std::move(fp)};
  if (d.IsZero()) d.neg = false;
  return d;
}

// Decimal digit string times a small factor.
void MulSmall(std::string& digits, int k) {
  int carry = 0;
  for (size_t i = digits.size(); i-- > 0;) {
    const int v = (digits[i] - '0') * k + carry;
    digits[i] = static_cast<char>('0' + v % 10);
    carry = v / 10;
  }
  while (carry > 0) {
    digits.insert(digits.begin(), static_cast<char>('0' + carry % 10));
    carry /= 10;
  }
}

int CompareMagnitude(const Dec& a, const Dec& b) {
  if (a.ip.size() != b.ip.size()) return a.ip.size() < b.ip.size() ? -1 : 1;
  if (int c = a.ip.compare(b.ip); c != 0) return c < 0 ? -1 : 1;
  const size_t n = std::max(a.fp.size(), b.fp.size());
  for (size_t i = 0; i < n; ++i) {
    const char x = i < a.fp.size() ? a.fp[i] : '0';
    const char y = i < b.fp.size() ? b.fp[i] : '0';
    if (x != y) return x < y ? -1 : 1;
  }
  return 0;
}

// Magnitude +1 / -1 of a nonnegative integer digit string (no leading zeros).
std::string Increment(std::string s) {
  size_t i = s.size();
  while (i > 0 && s[i - 1] == '9') s[--i] = '0';
  if (i == 0) return "1" + s;
  ++s[i - 1];
  return s;
}
std::string Decrement(std::string s) {  // s > 0
  size_t i = s.size();
  while (i > 0 && s[i - 1] == '0') s[--i] = '9';
  --s[i - 1];
  const size_t nz = s.find_first_not_of('0');
  return nz == std::string::npos ? "0" : s.substr(nz);
}

// ---- regex pieces ----

std::string Digits(size_t n) {
  if (n == 0) return "";
  if (n == 1) return "[0-9]";
  return absl::StrCat("[0-9]{", n, "}");
}
std::string DigitClass(char lo, char hi) {
  if (lo == hi) return std::string(1, lo);
  if (lo == '0' && hi == '9') return "[0-9]";
  return absl::StrCat("[", std::string(1, lo), "-", std::string(1, hi), "]");
}
bool All(absl::string_view s, char c) { return s.find_first_not_of(c) == absl::string_view::npos; }
std::string Alternatives(const std::vector<std::string>& parts) {
  if (parts.size() == 1) return parts[0];
  return absl::StrCat("(?:", absl::StrJoin(parts, "|"), ")");
}

// Digit strings of s.size() digits that are >= s / <= s.
std::string GreaterEqual(absl::string_view s) {
  if (All(s, '0')) return Digits(s.size());
  if (All(s.substr(1), '0')) return DigitClass(s[0], '9') + Digits(s.size() - 1);
  std::vector<std::string> parts = {std::string(1, s[0]) + GreaterEqual(s.substr(1))};
  if (s[0] < '9') parts.push_back(DigitClass(static_cast<char>(s[0] + 1), '9') + Digits(s.size() - 1));
  return Alternatives(parts);
}
std::string LessEqual(absl::string_view s) {
  if (All(s, '9')) return Digits(s.size());
  if (All(s.substr(1), '9')) return DigitClass('0', s[0]) + Digits(s.size() - 1);
  std::vector<std::string> parts = {std::string(1, s[0]) + LessEqual(s.substr(1))};
  if (s[0] > '0') parts.push_back(DigitClass('0', static_cast<char>(s[0] - 1)) + Digits(s.size() - 1));
  return Alternatives(parts);
}

// Digit strings of equal length between x and y (x <= y).
std::string SameLength(absl::string_view x, absl::string_view y) {
  size_t i = 0;
  while (i < x.size() && x[i] == y[i]) ++i;
  if (i == x.size()) return std::string(x);
  const std::string prefix(x.substr(0, i));
  const absl::string_view xr = x.substr(i + 1), yr = y.substr(i + 1);
  std::vector<std::string> parts;
  const char lo = All(xr, '0') ? x[i] : static_cast<char>(x[i] + 1);
  const char hi = All(yr, '9') ? y[i] : static_cast<char>(y[i] - 1);
  if (!All(xr, '0')) parts.push_back(std::string(1, x[i]) + GreaterEqual(xr));
  if (lo <= hi) parts.push_back(DigitClass(lo, hi) + Digits(xr.size()));
  if (!All(yr, '9')) parts.push_back(std::string(1, y[i]) + LessEqual(yr));
  return prefix + Alternatives(parts);
}

// Integers in [a, b] (nonnegative digit strings; b empty: unbounded), a <= b.
std::string NonNegative(const std::string& a, const std::string& b) {
  std::vector<std::string> parts;
  const size_t la = a.size(), lb = b.empty() ? la : b.size();
  for (size_t len = la; len <= lb; ++len) {
    const std::string x = len == la ? a : "1" + std::string(len - 1, '0');
    const std::string y = (!b.empty() && len == lb) ? b : std::string(len, '9');
    parts.push_back(SameLength(x, y));
  }
  if (b.empty()) parts.push_back(absl::StrCat("[1-9][0-9]{", la, ",}"));
  return Alternatives(parts);
}

// Nonempty fraction digit strings s with 0.s >= 0.g, <= 0.h, in [0.g, 0.h].
std::string FracGE(absl::string_view g);
std::string FracLE(absl::string_view h);
std::string FracGEOrEmpty(absl::string_view g) { return g.empty() ? "[0-9]*" : FracGE(g); }
std::string FracLEOrEmpty(absl::string_view h) {
  return h.empty() ? "0*" : absl::StrCat("(?:", FracLE(h), ")?");
}
// z zeros, as a regex.
std::string Zeros(size_t z) { return z == 1 ? "0" : absl::StrCat("0{", z, "}"); }
size_t LeadingZeros(absl::string_view s) {
  const size_t nz = s.find_first_not_of('0');
  return nz == absl::string_view::npos ? s.size() : nz;
}

// Runs of leading zeros are written as one counted repetition, so that tiny
// bounds (1e-300) nest no deeper than their significant digits.
std::string FracGE(absl::string_view g) {
  if (g.empty()) return "[0-9]+";
  if (const size_t z = LeadingZeros(g); z >= 2) {
    std::vector<std::string> parts = {Zeros(z) + FracGEOrEmpty(g.substr(z))};
    parts.push_back(absl::StrCat("0{0,", z - 1, "}[1-9][0-9]*"));
    return Alternatives(parts);
  }
  std::vector<std::string> parts = {std::string(1, g[0]) + FracGEOrEmpty(g.substr(1))};
  if (g[0] < '9') parts.push_back(DigitClass(static_cast<char>(g[0] + 1), '9') + "[0-9]*");
  return Alternatives(parts);
}
std::string FracLE(absl::string_view h) {
  if (h.empty()) return "0+";
  if (const size_t z = LeadingZeros(h); z >= 2 && z < h.size()) {
    return Alternatives({Zeros(z) + FracLEOrEmpty(h.substr(z)), absl::StrCat("0{1,", z - 1, "}")});
  }
  std::vector<std::string> parts = {std::string(1, h[0]) + FracLEOrEmpty(h.substr(1))};
  if (h[0] > '0') parts.push_back(DigitClass('0', static_cast<char>(h[0] - 1)) + "[0-9]*");
  return Alternatives(parts);
}
std::string FracBetween(absl::string_view g, absl::string_view h) {
  if (g.empty()) return FracLE(h);
  if (g[0] == h[0]) {
    const absl::string_view gr = g.substr(1), hr = h.substr(1);
    return std::string(1, g[0]) + (gr.empty() ? FracLEOrEmpty(hr) : FracBetween(gr, hr));
  }
  std::vector<std::string> parts = {std::string(1, g[0]) + FracGEOrEmpty(g.substr(1))};
  if (g[0] + 1 <= h[0] - 1) {
    parts.push_back(DigitClass(static_cast<char>(g[0] + 1), static_cast<char>(h[0] - 1)) + "[0-9]*");
  }
  parts.push_back(std::string(1, h[0]) + FracLEOrEmpty(h.substr(1)));
  return Alternatives(parts);
}

// Nonnegative decimals with a fraction in [a, b] (b nullopt: unbounded), a <= b.
std::string NonNegativeFractions(const Dec& a, const std::optional<Dec>& b) {
  if (b && a.ip == b->ip) return absl::StrCat(a.ip, "\\.", FracBetween(a.fp, b->fp));
  std::vector<std::string> parts = {absl::StrCat(a.ip, "\\.", FracGE(a.fp))};
  const std::string first = Increment(a.ip);
  if (!b) {
    parts.push_back(absl::StrCat(NonNegative(first, ""), "\\.[0-9]+"));
  } else {
    if (first != b->ip) parts.push_back(absl::StrCat(NonNegative(first, Decrement(b->ip)), "\\.[0-9]+"));
    parts.push_back(absl::StrCat(b->ip, "\\.", FracLE(b->fp)));
  }
  return Alternatives(parts);
}

// `d` rounded to `sig` significant digits, up (toward +infinity) or down: a
// bound moved inward, so that regexes stay small and shallow for bounds like
// 1e308's exact value or 5e-324. Only values past the 40th digit are lost.
Dec RoundSignificant(const Dec& d, size_t sig, bool up) {
  std::string digits = d.ip + d.fp;
  const size_t point = d.ip.size();
  const size_t first = digits.find_first_not_of('0');
  if (first == std::string::npos || digits.size() - first <= sig) return d;
  const size_t keep = first + sig;
  const bool dropped = digits.find_first_not_of('0', keep) != std::string::npos;
  std::fill(digits.begin() + static_cast<std::ptrdiff_t>(keep), digits.end(), '0');
  // Rounding up a positive value (or down a negative one) grows the magnitude.
  if (dropped && up != d.neg) {
    size_t i = keep;
    while (i > 0 && digits[i - 1] == '9') digits[--i] = '0';
    if (i == 0) {
      digits.insert(digits.begin(), '1');
      return Canonical(d.neg, digits.substr(0, point + 1), digits.substr(point + 1));
    }
    ++digits[i - 1];
  }
  return Canonical(d.neg, digits.substr(0, point), digits.substr(point));
}

constexpr size_t kBoundDigits = 40;

// Bounds past +-(10^20 - 1) move inward to it (when the range stays
// nonempty): minimum -1.7976931348623157e308 would otherwise cost a 20 KB
// regex and half a second of automaton building, for values no output needs.
void ClampMagnitude(std::optional<Dec>& lo, std::optional<Dec>& hi) {
  static const Dec big = *ParseDec("99999999999999999999");
  static const Dec minus_big = Negate(big);
  if (hi && Compare(*hi, big) > 0 && (!lo || Compare(*lo, big) <= 0)) hi = big;
  if (lo && Compare(*lo, minus_big) < 0 && (!hi || Compare(*hi, minus_big) >= 0)) lo = minus_big;
}

}  // namespace

std::string Dec::Text() const {
  std::string s = neg ? "-" : "";
  s += ip;
  if (!fp.empty()) absl::StrAppend(&s, ".", fp);
  return s;
}

std::optional<Dec> ParseDec(absl::string_view t) {
  size_t i = 0;
  bool neg = false;
  if (i < t.size() && (t[i] == '-' || t[i] == '+')) neg = t[i++] == '-';
  std::string ip, fp;
  while (i < t.size() && t[i] >= '0' && t[i] <= '9') ip += t[i++];
  if (i < t.size() && t[i] == '.') {
    ++i;
    while (i < t.size() && t[i] >= '0' && t[i] <= '9') fp += t[i++];
  }
  if (ip.empty() && fp.empty()) return std::nullopt;
  int64_t exp = 0;
  if (i < t.size() && (t[i] == 'e' || t[i] == 'E')) {
    ++i;
    bool eneg = false;
    if (i < t.size() && (t[i] == '-' || t[i] == '+')) eneg = t[i++] == '-';
    if (i >= t.size()) return std::nullopt;
    while (i < t.size() && t[i] >= '0' && t[i] <= '9') {
      exp = std::min<int64_t>(exp * 10 + (t[i++] - '0'), 100000);
    }
    if (eneg) exp = -exp;
  }
  if (i != t.size()) return std::nullopt;
  std::string digits = ip + fp;
  int64_t point = static_cast<int64_t>(ip.size()) + exp;  // digits before the point
  if (point < 0) {
    digits.insert(0, static_cast<size_t>(-point), '0');
    point = 0;
  }
  if (point > static_cast<int64_t>(digits.size())) digits.append(static_cast<size_t>(point) - digits.size(), '0');
  return Canonical(neg, digits.substr(0, static_cast<size_t>(point)), digits.substr(static_cast<size_t>(point)));
}

Dec DecFromInt(int64_t v) {
  if (v < 0) {
    Dec d = DecFromUint(static_cast<uint64_t>(-(v + 1)) + 1);
    d.neg = true;
    return d;
  }
  return DecFromUint(static_cast<uint64_t>(v));
}

Dec DecFromUint(uint64_t v) { return Canonical(false, std::to_string(v), ""); }

Dec ExactDec(double v) {
  const bool neg = std::signbit(v);
  v = std::fabs(v);
  if (v == 0) return Dec{};
  int exp = 0;
  const double m = std::frexp(v, &exp);  // v = m * 2^exp, m in [0.5, 1)
  auto mantissa = static_cast<uint64_t>(std::ldexp(m, 64 - 11));
  int e = exp - (64 - 11);
  while (mantissa % 2 == 0 && e < 0) {
    mantissa /= 2;
    ++e;
  }
  std::string digits = std::to_string(mantissa);
  if (e >= 0) {
    for (int k = 0; k < e; ++k) MulSmall(digits, 2);
    return Canonical(neg, digits, "");
  }
  for (int k = 0; k < -e; ++k) MulSmall(digits, 5);  // mantissa * 5^-e / 10^-e
  const size_t frac = static_cast<size_t>(-e);
  if (digits.size() <= frac) digits.insert(0, frac - digits.size() + 1, '0');
  return Canonical(neg, digits.substr(0, digits.size() - frac), digits.substr(digits.size() - frac));
}

Dec ShortestDec(double v) {
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), v);
  return *ParseDec(absl::string_view(buf, static_cast<size_t>(res.ptr - buf)));
}

double ToDouble(const Dec& d) { return std::strtod(d.Text().c_str(), nullptr); }

int Compare(const Dec& a, const Dec& b) {
  if (a.neg != b.neg) return a.neg ? -1 : 1;
  const int c = CompareMagnitude(a, b);
  return a.neg ? -c : c;
}

Dec Negate(Dec d) {
  if (!d.IsZero()) d.neg = !d.neg;
  return d;
}

Dec Floor(const Dec& d) {
  if (d.IsInteger()) return d;
  if (!d.neg) return Canonical(false, d.ip, "");
  return Canonical(true, Increment(d.ip), "");
}

Dec Ceil(const Dec& d) { return Negate(Floor(Negate(d))); }

Dec AddOne(const Dec& d) {
  if (!d.neg) return Canonical(false, Increment(d.ip), "");
  return Canonical(true, Decrement(d.ip), "");
}

Dec SubOne(const Dec& d) { return Negate(AddOne(Negate(d))); }

NumBound BoundFromInt(int64_t v, bool exclusive) { return {DecFromInt(v), static_cast<double>(v), exclusive}; }
NumBound BoundFromUint(uint64_t v, bool exclusive) { return {DecFromUint(v), static_cast<double>(v), exclusive}; }
NumBound BoundFromDouble(double v, bool exclusive) { return {ExactDec(v), v, exclusive}; }

int CompareLower(const NumBound& a, const NumBound& b) {
  const int c = Compare(a.exact, b.exact);
  if (c != 0) return c > 0 ? -1 : 1;
  if (a.as_double != b.as_double) return a.as_double > b.as_double ? -1 : 1;
  if (a.exclusive != b.exclusive) return a.exclusive ? -1 : 1;
  return 0;
}

int CompareUpper(const NumBound& a, const NumBound& b) {
  const int c = Compare(a.exact, b.exact);
  if (c != 0) return c < 0 ? -1 : 1;
  if (a.as_double != b.as_double) return a.as_double < b.as_double ? -1 : 1;
  if (a.exclusive != b.exclusive) return a.exclusive ? -1 : 1;
  return 0;
}

bool IntRange::Empty() const { return lo && hi && Compare(*lo, *hi) > 0; }

bool IntRange::Contains(const Dec& v) const {
  return v.IsInteger() && (!lo || Compare(v, *lo) >= 0) && (!hi || Compare(v, *hi) <= 0);
}

IntRange IntegersWithin(const std::optional<NumBound>& lower, const std::optional<NumBound>& upper) {
  IntRange r;
  if (lower) {
    Dec i = lower->exclusive ? AddOne(Floor(lower->exact)) : Ceil(lower->exact);
    // JavaScript rounds the instance to a double: it must still satisfy the bound.
    const double di = ToDouble(i);
    if (lower->exclusive ? !(di > lower->as_double) : !(di >= lower->as_double)) {
      const Dec past = Ceil(ExactDec(std::nextafter(lower->as_double, HUGE_VAL)));
      if (Compare(past, i) > 0) i = past;
    }
    r.lo = RoundSignificant(i, kBoundDigits, /*up=*/true);
  }
  if (upper) {
    Dec i = upper->exclusive ? SubOne(Ceil(upper->exact)) : Floor(upper->exact);
    const double di = ToDouble(i);
    if (upper->exclusive ? !(di < upper->as_double) : !(di <= upper->as_double)) {
      const Dec past = Floor(ExactDec(std::nextafter(upper->as_double, -HUGE_VAL)));
      if (Compare(past, i) < 0) i = past;
    }
    r.hi = RoundSignificant(i, kBoundDigits, /*up=*/false);
  }
  ClampMagnitude(r.lo, r.hi);
  return r;
}

bool FracRange::Contains(const Dec& v) const {
  return !empty && (!lo || Compare(v, *lo) >= 0) && (!hi || Compare(v, *hi) <= 0);
}

FracRange FractionsWithin(const std::optional<NumBound>& lower, const std::optional<NumBound>& upper) {
  FracRange r;
  // The least double d that satisfies the bound read exactly and read as a
  // double; every decimal >= d's shortest spelling reads as a double >= d.
  auto tighten = [&](const NumBound& b, double toward) -> std::optional<Dec> {
    double d = b.as_double;
    for (int step = 0; step < 8 && std::isfinite(d); ++step) {
      const int c = Compare(ExactDec(d), b.exact);
      const bool up = toward > 0;
      const bool exact_ok = b.exclusive ? (up ? c > 0 : c < 0) : (up ? c >= 0 : c <= 0);
      const bool double_ok = b.exclusive ? (up ? d > b.as_double : d < b.as_double)
                                         : (up ? d >= b.as_double : d <= b.as_double);
      if (exact_ok && double_ok) return ShortestDec(d);
      d = std::nextafter(d, toward);
    }
    return std::nullopt;
  };
  if (lower) {
    r.lo = tighten(*lower, HUGE_VAL);
    if (!r.lo) r.empty = true;
  }
  if (upper) {
    r.hi = tighten(*upper, -HUGE_VAL);
    if (!r.hi) r.empty = true;
  }
  // Magnitudes below 1e-30 are not worth their regex: such a bound moves to
  // +-1e-30 or 0, inward.
  const Dec tiny = *ParseDec("1e-30");
  if (r.lo && !r.lo->IsZero() && Compare(Negate(tiny), *r.lo) < 0 && Compare(*r.lo, tiny) < 0) {
    r.lo = r.lo->neg ? Dec{} : tiny;
  }
  if (r.hi && !r.hi->IsZero() && Compare(Negate(tiny), *r.hi) < 0 && Compare(*r.hi, tiny) < 0) {
    r.hi = r.hi->neg ? Negate(tiny) : Dec{};
  }
  if (!r.empty) ClampMagnitude(r.lo, r.hi);
  if (r.lo && r.hi && Compare(*r.lo, *r.hi) > 0) r.empty = true;
  return r;
}

std::string IntRangeRegex(const IntRange& r) {
  std::vector<std::string> parts;
  const Dec minus_one = DecFromInt(-1);
  // Negative integers in [lo, min(hi, -1)], as "-" and a magnitude.
  if (!r.lo || r.lo->neg) {
    const Dec top = (r.hi && Compare(*r.hi, minus_one) < 0) ? *r.hi : minus_one;
    if (!r.lo || Compare(*r.lo, top) <= 0) {
      parts.push_back(absl::StrCat("-", NonNegative(top.ip, r.lo ? r.lo->ip : "")));
    }
  }
  // Nonnegative integers in [max(lo, 0), hi].
  if (!r.hi || !r.hi->neg) {
    const std::string low = (r.lo && !r.lo->neg) ? r.lo->ip : "0";
    if (!r.hi || Compare(*ParseDec(low), *r.hi) <= 0) parts.push_back(NonNegative(low, r.hi ? r.hi->ip : ""));
  }
  return absl::StrCat("(?:", absl::StrJoin(parts, "|"), ")");
}

namespace {

// Multiples of k with magnitudes in [a, b] (b nullopt: unbounded), a >= 10^m:
// the digits before the last m (p) and the last m (an ending in `endings`).
void LargeMultiples(const Dec& a, const std::optional<Dec>& b, size_t m, const std::vector<std::string>& endings,
                    std::vector<std::string>& parts) {
  auto split = [&](const Dec& d) {
    return std::make_pair(Canonical(false, d.ip.substr(0, d.ip.size() - m), ""), d.ip.substr(d.ip.size() - m));
  };
  auto ends = [&](const std::string& from, const std::string& to) {  // endings in [from, to]
    std::vector<std::string> out;
    for (const std::string& e : endings) {
      if (e >= from && e <= to) out.push_back(e);
    }
    return out;
  };
  auto add = [&](const std::string& prefix, const std::vector<std::string>& list) {
    if (!list.empty()) parts.push_back(prefix + Alternatives(list));
  };
  const std::string low(m, '0'), high(m, '9');
  const auto [pa, ra] = split(a);
  if (b) {
    const auto [pb, rb] = split(*b);
    if (Compare(pa, pb) == 0) {
      add(pa.ip, ends(ra, rb));
      return;
    }
    add(pa.ip, ends(ra, high));
    if (const Dec first = AddOne(pa), last = SubOne(pb); Compare(first, last) <= 0) {
      add(IntRangeRegex({first, last}), endings);
    }
    add(pb.ip, ends(low, rb));
    return;
  }
  add(pa.ip, ends(ra, high));
  add(IntRangeRegex({AddOne(pa), std::nullopt}), endings);
}

}  // namespace

std::optional<std::string> MultiplesRegex(const IntRange& r, int64_t k) {
  if (k < 1) return std::nullopt;
  int64_t rest = k;
  int twos = 0, fives = 0;
  while (rest % 2 == 0) rest /= 2, ++twos;
  while (rest % 5 == 0) rest /= 5, ++fives;
  const size_t m = static_cast<size_t>(std::max(twos, fives));
  if (rest != 1 || m > 17) return std::nullopt;
  int64_t modulus = 1;
  for (size_t i = 0; i < m; ++i) modulus *= 10;
  if (modulus / k > kMaxResidues) return std::nullopt;
  std::vector<std::string> endings;
  for (int64_t v = 0; v < modulus; v += k) {
    std::string digits = std::to_string(v);
    endings.push_back(std::string(m - digits.size(), '0') + digits);
  }
  std::vector<std::string> parts;
  // Magnitudes below 10^m: the multiples themselves.
  const Dec top = DecFromInt(modulus - 1), bottom = DecFromInt(-(modulus - 1));
  const Dec lo = r.lo && Compare(*r.lo, bottom) > 0 ? *r.lo : bottom;
  const Dec hi = r.hi && Compare(*r.hi, top) < 0 ? *r.hi : top;
  if (Compare(lo, hi) <= 0) {
    const int64_t a = std::stoll(lo.Text()), b = std::stoll(hi.Text());
    int64_t q = a / k;
    if (a % k != 0 && a > 0) ++q;
    for (int64_t v = q * k; v <= b; v += k) parts.push_back(std::to_string(v));
  }
  // Magnitudes from 10^m: positive ones in [max(lo, 10^m), hi], negative ones by magnitude.
  const Dec power = AddOne(top);
  if (!r.hi || Compare(*r.hi, power) >= 0) {
    const Dec a = r.lo && Compare(*r.lo, power) > 0 ? *r.lo : power;
    if (!r.hi || Compare(a, *r.hi) <= 0) LargeMultiples(a, r.hi, m, endings, parts);
  }
  if (!r.lo || Compare(*r.lo, Negate(power)) <= 0) {
    const Dec a = r.hi && Compare(*r.hi, Negate(power)) < 0 ? Negate(*r.hi) : power;
    std::optional<Dec> b;
    if (r.lo) b = Negate(*r.lo);
    if (!b || Compare(a, *b) <= 0) {
      std::vector<std::string> negative;
      LargeMultiples(a, b, m, endings, negative);
      for (std::string& n : negative) parts.push_back("-" + n);
    }
  }
  if (parts.empty()) return std::string();
  return absl::StrCat("(?:", absl::StrJoin(parts, "|"), ")");
}

std::string FracRangeRegex(const FracRange& r) {
  std::vector<std::string> parts;
  const Dec zero;
  // Negative (and -0.0): magnitudes in [max(0, -hi), -lo].
  if (!r.lo || r.lo->neg) {
    const Dec low = (r.hi && r.hi->neg) ? Negate(*r.hi) : zero;
    std::optional<Dec> high;
    if (r.lo) high = Negate(*r.lo);
    parts.push_back(absl::StrCat("-", NonNegativeFractions(low, high)));
  }
  if (!r.hi || !r.hi->neg) {
    const Dec low = (r.lo && !r.lo->neg) ? *r.lo : zero;
    parts.push_back(NonNegativeFractions(low, r.hi));
  }
  return absl::StrCat("(?:", absl::StrJoin(parts, "|"), ")");
}

}  // namespace tpserve::grammar::json_internal
