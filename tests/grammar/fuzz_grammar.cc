// libFuzzer target: the grammar engine on arbitrary grammars. The first byte
// picks the front end (modulo 3: GBNF text, a regex, a JSON Schema in the
// compact or, from 3 on, the indented layout); the text runs to the
// first NUL, the bytes after it steer a random walk of a Matcher over a small
// fixed vocabulary (every byte, some multi-byte tokens, tokens longer than the
// short trie's, a stop id and a special id). Built only with -DTPSERVE_FUZZ=ON
// by clang (scripts/fuzz.sh). Invariants:
//  * nothing crashes, and compile errors are INVALID_ARGUMENT, within tight limits;
//  * an allowed token is accepted; a refused one is not, and changes nothing;
//  * stop ids are allowed exactly when IsComplete(), special ids never;
//    IsTerminated() allows nothing but stop ids; ForcedToken() is the one
//    allowed token when there is exactly one;
//  * Rollback gives back the masks seen before, and a replay the same masks;
//  * a mask past max_mask_items gives up: INVALID_ARGUMENT, nothing allowed,
//    nothing accepted (the walk ends there).
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "grammar/matcher.h"
#include "tests/testing/fuzz_check.h"

namespace {

using tpserve::grammar::GrammarSpec;
using tpserve::grammar::Matcher;
using tpserve::grammar::MaskWords;

constexpr int32_t kStop = 256 + 12, kSpecial = kStop + 1;

std::shared_ptr<const tpserve::grammar::Vocabulary> MakeVocabulary() {
  std::vector<std::string> bytes;
  for (int b = 0; b < 256; ++b) bytes.emplace_back(1, static_cast<char>(b));
  for (const char* t : {"ab", "abc", "\"a", "\":", "{\"", "\"}", "12", "  ", "\xC3\xA9", "aaaaaaaaaaaaaaaaaaaa",
                        "abababababababababab", "\"aaaaaaaaaaaaaaaaa\","}) {
    bytes.emplace_back(t);
  }
  bytes.push_back("</s>");   // kStop
  bytes.push_back("<|x|>");  // kSpecial
  std::vector<bool> special(bytes.size(), false);
  special[kStop] = special[kSpecial] = true;
  return *tpserve::grammar::Vocabulary::Create(bytes, {kStop}, special);
}

bool Bit(const std::vector<uint32_t>& w, int32_t t) { return (w[static_cast<size_t>(t) / 32] >> (t % 32)) & 1; }

void CheckMask(Matcher& m, const std::vector<uint32_t>& mask, int32_t vocab) {
  TPSERVE_FUZZ_CHECK(Bit(mask, kStop) == m.IsComplete());
  TPSERVE_FUZZ_CHECK(!Bit(mask, kSpecial));
  int32_t others = 0, last = -1;
  for (int32_t t = 0; t < vocab; ++t) {
    if (t != kStop && Bit(mask, t)) ++others, last = t;
  }
  if (m.IsTerminated()) TPSERVE_FUZZ_CHECK(others == 0 && m.IsComplete());
  const std::optional<int32_t> forced = m.ForcedToken();
  TPSERVE_FUZZ_CHECK(forced.has_value() == (others == 1 && !m.IsComplete()));
  if (forced) TPSERVE_FUZZ_CHECK(*forced == last);
}

// Output bytes a walk stops at: an ambiguous grammar's masks cost more as the
// output grows (a lexeme may end at every byte: O(output) readings at once),
// and a run must stay within libFuzzer's timeout under ASan on a loaded
// machine; grammar_matcher_test walks longer outputs against its oracle.
constexpr size_t kMaxWalkBytes = 128;

void Walk(const std::shared_ptr<const tpserve::grammar::CompiledGrammar>& g,
          const tpserve::grammar::Vocabulary& vocabulary, const uint8_t* steer, size_t n) {
  const int32_t vocab = vocabulary.size();
  Matcher m(g);
  std::vector<std::vector<uint32_t>> masks;
  std::vector<int32_t> tokens;
  std::vector<uint32_t> mask(MaskWords(vocab));
  size_t bytes = 0;  // of output: an ambiguous grammar's masks cost more as it grows (kMaxWalkBytes)
  for (size_t i = 0; i < n && i < 48 && bytes < kMaxWalkBytes; ++i) {
    m.FillMask(mask);
    if (!m.status().ok()) {
      TPSERVE_FUZZ_CHECK(m.status().code() == absl::StatusCode::kInvalidArgument);
      TPSERVE_FUZZ_CHECK(mask == std::vector<uint32_t>(mask.size(), 0u));
      TPSERVE_FUZZ_CHECK(!m.IsComplete() && !m.Accept(static_cast<int32_t>(steer[i]) % vocab));
      return;
    }
    masks.push_back(mask);
    CheckMask(m, mask, vocab);
    std::vector<int32_t> allowed, refused;
    for (int32_t t = 0; t < vocab; ++t) (Bit(mask, t) ? allowed : refused).push_back(t);
    if (!refused.empty()) TPSERVE_FUZZ_CHECK(!m.Accept(refused[steer[i] % refused.size()]));
    if (allowed.empty()) break;
    const int32_t t = allowed[steer[i] % allowed.size()];
    TPSERVE_FUZZ_CHECK(m.Accept(t));
    tokens.push_back(t);
    bytes += vocabulary.bytes(t).size();
    if (t == kStop) break;
  }
  if (!tokens.empty()) {
    const size_t back = 1 + steer[0] % tokens.size();
    m.Rollback(back);
    m.FillMask(mask);
    TPSERVE_FUZZ_CHECK(mask == masks[tokens.size() - back]);
  }
  Matcher replay(g);
  for (size_t i = 0; i < tokens.size(); ++i) {
    replay.FillMask(mask);
    TPSERVE_FUZZ_CHECK(mask == masks[i]);
    TPSERVE_FUZZ_CHECK(replay.Accept(tokens[i]));
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const auto vocabulary = MakeVocabulary();
  if (size == 0) return 0;
  const std::string rest(reinterpret_cast<const char*>(data + 1), size - 1);
  const size_t nul = rest.find('\0');
  GrammarSpec spec;
  constexpr GrammarSpec::Kind kKinds[] = {GrammarSpec::Kind::kEbnf, GrammarSpec::Kind::kRegex,
                                          GrammarSpec::Kind::kJsonSchema};
  spec.kind = kKinds[data[0] % 3];
  spec.layout = data[0] >= 3 ? tpserve::grammar::JsonLayout::kIndented : tpserve::grammar::JsonLayout::kCompact;
  spec.text = rest.substr(0, nul);
  tpserve::grammar::CompileLimits limits;
  limits.max_time = absl::Milliseconds(200);
  limits.max_automaton_states = 5'000;
  limits.max_rules = 2'000;
  limits.max_nesting = 16;
  // An ambiguous grammar's mask costs up to this many parser items, then the
  // matcher gives up: within libFuzzer's timeout under ASan (a 2-line grammar
  // made 7 million on Qwen3's vocabulary; 25 s a walk here before the limit).
  limits.max_mask_items = 20'000;
  auto g = tpserve::grammar::Compile(spec, vocabulary, limits);
  if (!g.ok()) {
    TPSERVE_FUZZ_CHECK(g.status().code() == absl::StatusCode::kInvalidArgument);
    return 0;
  }
  const std::string steer = nul == std::string::npos ? std::string("\x01\x02\x03") : rest.substr(nul + 1);
  if (!steer.empty()) Walk(*g, *vocabulary, reinterpret_cast<const uint8_t*>(steer.data()), steer.size());
  return 0;
}
