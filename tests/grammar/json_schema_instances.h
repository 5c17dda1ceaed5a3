// How the JSON Schema tests write an instance for a grammar with a fixed
// layout (json_schema.h): compact JSON as nlohmann::ordered_json::dump()
// writes it (JSON.stringify's and json.dumps(separators=(',', ':'),
// ensure_ascii=False)'s spelling), except that a float of 2^53 or more is
// written as the digits of its exact value (the suite's "bignum" integers
// overflow to doubles when read). The grammar fixes the order of members and
// the instance's order is the author's, so an instance counts as accepted
// when some order of its objects' members is accepted (AnyOrderAccepted), and
// as rejected when no order is.
#pragma once

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/strings/str_format.h"

namespace tpserve::grammar::testing {

inline std::string WriteScalar(const nlohmann::ordered_json& v) {
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (std::isfinite(d) && std::fabs(d) >= 9007199254740992.0 && d == std::floor(d)) return absl::StrFormat("%.0f", d);
  }
  return v.dump();
}

// The compact spellings of `v` over orders of its objects' members, at most
// `cap` of them (the instance's own order first). `complete` is false when
// the cap cut the list short.
inline std::vector<std::string> Orderings(const nlohmann::ordered_json& v, size_t cap, bool* complete) {
  if (v.is_array()) {
    std::vector<std::string> out = {"["};
    for (size_t i = 0; i < v.size(); ++i) {
      const auto items = Orderings(v[i], cap, complete);
      std::vector<std::string> next;
      for (const auto& prefix : out) {
        for (const auto& item : items) {
          if (next.size() >= cap) {
            *complete = false;
            break;
          }
          next.push_back(prefix + (i ? "," : "") + item);
        }
      }
      out = std::move(next);
    }
    for (auto& s : out) s += "]";
    return out;
  }
  if (v.is_object()) {
    std::vector<std::string> keys;
    for (const auto& [k, unused] : v.items()) keys.push_back(k);
    std::vector<size_t> order(keys.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::vector<std::string> out;
    do {
      std::vector<std::string> partial = {"{"};
      for (size_t n = 0; n < order.size(); ++n) {
        const std::string& k = keys[order[n]];
        const auto values = Orderings(v[k], cap, complete);
        std::vector<std::string> next;
        for (const auto& prefix : partial) {
          for (const auto& value : values) {
            if (next.size() >= cap) {
              *complete = false;
              break;
            }
            next.push_back(prefix + (n ? "," : "") + nlohmann::json(k).dump() + ":" + value);
          }
        }
        partial = std::move(next);
      }
      for (auto& s : partial) {
        if (out.size() >= cap) {
          *complete = false;
          break;
        }
        out.push_back(s + "}");
      }
      if (out.size() >= cap) break;
    } while (std::next_permutation(order.begin(), order.end()));
    return out;
  }
  return {WriteScalar(v)};
}

// Whether `accepts` takes some member order of `v`; `complete` as above.
inline bool AnyOrderAccepted(const nlohmann::ordered_json& v, const std::function<bool(const std::string&)>& accepts,
                             bool* complete, size_t cap = 5040) {
  *complete = true;
  for (const std::string& s : Orderings(v, cap, complete)) {
    if (accepts(s)) return true;
  }
  return false;
}

}  // namespace tpserve::grammar::testing
