// libFuzzer target: the proposers on arbitrary token sequences. The first 8
// bytes choose the options (n-gram min/max/k/window; suffix depth, window, k,
// adaptive length, threshold; the cache's limits); every later byte is a step:
// below 0xF0 it appends token byte % alphabet to the sequence, otherwise the
// sequence ends (its output goes to the SuffixCache) and a new one starts.
// Built only with -DTPSERVE_FUZZ=ON by clang (scripts/fuzz.sh). Invariants:
//  * NgramProposer's proposal equals the brute-force search (oracle.h) over
//    its window, after every token;
//  * the suffix proposal's length is within num_speculative_tokens and the
//    adaptive length; the matched suffix followed by the proposal occurs in
//    the window (local) or in a cached output (cache);
//  * the local trie holds exactly the window's strings (checked every 31
//    tokens and at the end), within max_history * max_depth nodes; the
//    cache's nodes stay within max_cached_tokens * max_depth.
#include <cmath>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <vector>

#include "speculative/ngram_proposer.h"
#include "speculative/suffix_proposer.h"
#include "tests/speculative/oracle.h"
#include "tests/testing/fuzz_check.h"

namespace {

using namespace tpserve::speculative;

struct Run {
  NgramProposer ngram;
  SuffixProposer suffix;
  std::vector<int32_t> tokens;
};

bool LocalTrieIsTheWindow(const SuffixProposer& p, const std::vector<int32_t>& tokens) {
  std::map<std::vector<int32_t>, int64_t> got;
  p.local_trie().ForEachString([&](std::span<const int32_t> s, int64_t count) {
    got[std::vector<int32_t>(s.begin(), s.end())] = count;
  });
  return got == oracle::Substrings(tokens, p.window().begin(), p.options().max_depth);
}

void CheckStep(Run& r, SuffixCache& cache, const std::deque<std::vector<int32_t>>& cached) {
  const NgramOptions& no = r.ngram.options();
  std::vector<int32_t> out(64);
  out.resize(static_cast<size_t>(r.ngram.Propose(out)));
  TPSERVE_FUZZ_CHECK(out == oracle::NgramPropose(r.tokens, r.ngram.window().begin(), no.prompt_lookup_min,
                                                 no.prompt_lookup_max, no.num_speculative_tokens));
  const SuffixOptions& so = r.suffix.options();
  out.assign(64, -1);
  const SuffixProposer::Proposal p = r.suffix.Propose(out);
  TPSERVE_FUZZ_CHECK(p.num_tokens >= 0 && p.num_tokens <= so.num_speculative_tokens);
  if (p.num_tokens == 0) return;
  TPSERVE_FUZZ_CHECK(p.match_length >= 1 && p.match_length <= static_cast<int32_t>(r.tokens.size()));
  TPSERVE_FUZZ_CHECK(p.num_tokens <= std::floor(so.max_spec_factor * p.match_length + so.max_spec_offset));
  std::vector<int32_t> str(r.tokens.end() - p.match_length, r.tokens.end());
  str.insert(str.end(), out.begin(), out.begin() + p.num_tokens);
  if (p.from_cache) {
    bool found = false;
    for (const std::vector<int32_t>& c : cached) found = found || oracle::Occurs(c, str);
    TPSERVE_FUZZ_CHECK(found);
  } else {
    const std::span<const int32_t> window(r.tokens.data() + r.suffix.window().begin(),
                                          r.tokens.size() - static_cast<size_t>(r.suffix.window().begin()));
    TPSERVE_FUZZ_CHECK(oracle::Occurs(window, str));
  }
  TPSERVE_FUZZ_CHECK(r.suffix.local_trie().num_nodes() <= 1 + so.max_history * so.max_depth);
  TPSERVE_FUZZ_CHECK(cache.trie().num_nodes() <= 1 + cache.options().max_cached_tokens * cache.options().max_depth);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 8) return 0;
  const int32_t lo = 1 + data[0] % 4, hi = lo + (data[0] >> 4) % 4;
  const NgramOptions no{.prompt_lookup_min = lo, .prompt_lookup_max = hi,
                        .num_speculative_tokens = 1 + data[1] % 8, .max_history = hi + 1 + data[1] / 8 % 32};
  const int32_t depth = 2 + data[2] % 10;
  const SuffixOptions so{.max_depth = depth, .num_speculative_tokens = 1 + data[3] % 8,
                         .max_spec_factor = (data[3] >> 4) / 4.0, .max_spec_offset = (data[4] % 8) - 2.0,
                         .min_token_prob = (data[4] >> 4) / 15.0, .max_history = depth + 1 + data[5] % 48};
  const SuffixCacheOptions co{.max_depth = 2 + data[6] % 10, .max_cached_sequences = 1 + data[6] / 16 % 4,
                              .max_cached_tokens = 1 + data[7] % 96};
  const int alphabet = 2 + (data[7] >> 5);
  absl::StatusOr<SuffixCache> cache = SuffixCache::Create(co);
  TPSERVE_FUZZ_CHECK(cache.ok());
  std::deque<std::vector<int32_t>> cached;  // a superset of the cache's outputs: the last 4
  std::optional<Run> run;
  auto start = [&] {
    absl::StatusOr<NgramProposer> n = NgramProposer::Create(no);
    absl::StatusOr<SuffixProposer> s = SuffixProposer::Create(so, &*cache);
    TPSERVE_FUZZ_CHECK(n.ok() && s.ok());
    run.emplace(Run{*std::move(n), *std::move(s), {}});
  };
  start();
  for (size_t i = 8; i < size; ++i) {
    if (data[i] >= 0xF0) {
      cache->AddOutput(run->tokens);
      if (!run->tokens.empty()) cached.push_back(run->tokens);  // the cache ignores an empty one
      if (cached.size() > 4) cached.pop_front();
      start();
      continue;
    }
    run->tokens.push_back(data[i] % alphabet);
    run->ngram.Append(run->tokens.back());
    run->suffix.Append(run->tokens.back());
    CheckStep(*run, *cache, cached);
    if (i % 31 == 0) TPSERVE_FUZZ_CHECK(LocalTrieIsTheWindow(run->suffix, run->tokens));
  }
  TPSERVE_FUZZ_CHECK(LocalTrieIsTheWindow(run->suffix, run->tokens));
  return 0;
}
