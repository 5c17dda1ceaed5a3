// A test oracle for the grammar IR (grammar/grammar.h), independent of the
// engine and of the front ends: a matcher and sampler for terminal regexes
// (regex.h's dialect, read here by its own small parser), an Earley
// recognizer over whole outputs, and random walks that generate sentences.
// Simple and slow on purpose; for short test strings only.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "grammar/grammar.h"

namespace tpserve::grammar::testing {

// A regex of regex.h's dialect over code points.
class OracleRegex {
 public:
  static absl::StatusOr<OracleRegex> Parse(const std::string& regex);
  // End positions j (in code points) such that text[from, j) matches.
  std::vector<size_t> Ends(const std::u32string& text, size_t from) const;
  bool FullMatch(const std::u32string& text) const;
  bool MatchesEmpty() const;
  // A random string of the language (UTF-8); nullopt when the language is empty.
  std::optional<std::string> Sample(std::mt19937_64& rng) const;

  struct Node;

 private:
  std::shared_ptr<const std::vector<Node>> nodes_;
  int root_ = 0;
};

// Whether `text` (UTF-8) is a sentence of the grammar.
class Recognizer {
 public:
  static absl::StatusOr<Recognizer> Create(const Grammar& grammar);
  bool Accepts(const std::string& text) const;

 private:
  const Grammar* grammar_ = nullptr;
  std::vector<OracleRegex> terminals_;
  std::vector<bool> nullable_;  // [rules]
};

// Random sentences of the grammar: alternatives chosen at random while the
// budget lasts, then the cheapest ones.
class Walker {
 public:
  static absl::StatusOr<Walker> Create(const Grammar& grammar);
  std::optional<std::string> Walk(std::mt19937_64& rng, int budget) const;

 private:
  const Grammar* grammar_ = nullptr;
  std::vector<OracleRegex> terminals_;
  std::vector<int64_t> cost_;  // [rules]: the fewest symbols a derivation expands to
};

// Decodes UTF-8 into code points; nullopt when malformed.
std::optional<std::u32string> DecodeUtf8Text(const std::string& s);

}  // namespace tpserve::grammar::testing
