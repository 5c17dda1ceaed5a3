// ProposerSet: every sequence's proposals equal those of a proposer of its own
// fed the same tokens (the set fed in runs of any size, empty ones too), with
// suffix decoding's SuffixCache holding the outputs of the sequences that
// ended; Add starts a sequence over (a recompute), Remove without output
// leaves the cache alone; a factory replaces the method's proposers; the
// options' errors name the flag.
#include "speculative/proposer_set.h"

#include <algorithm>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "tests/testing/seed.h"

namespace tpserve::speculative {
namespace {

constexpr int32_t kK = 5;

// A stream over a small vocabulary that repeats its own stretches, so both
// methods find matches often and miss sometimes.
std::vector<int32_t> RepetitiveTokens(std::mt19937& rng, int n) {
  std::vector<int32_t> t;
  while (std::ssize(t) < n) {
    if (t.size() > 8 && rng() % 3 != 0) {
      const size_t from = rng() % (t.size() - 4), len = 2 + rng() % 6;
      for (size_t i = 0; i < len && std::ssize(t) < n; ++i) t.push_back(t[from + i]);
    } else {
      t.push_back(static_cast<int32_t>(rng() % 7));
    }
  }
  return t;
}

ProposerConfig Config(const std::string& method) {
  return {.method = method, .num_speculative_tokens = kK, .prompt_lookup_min = 2, .prompt_lookup_max = 3};
}

// The proposer one sequence would have on its own (with `cache` for suffix).
std::unique_ptr<Proposer> Alone(const ProposerConfig& c, SuffixCache* cache) {
  if (c.method == "suffix") {
    SuffixOptions o;
    o.num_speculative_tokens = c.num_speculative_tokens;
    absl::StatusOr<SuffixProposer> p = SuffixProposer::Create(o, cache);
    EXPECT_TRUE(p.ok()) << p.status();
    return MakeProposer(*std::move(p));
  }
  absl::StatusOr<NgramProposer> p = NgramProposer::Create({.prompt_lookup_min = c.prompt_lookup_min,
                                                           .prompt_lookup_max = c.prompt_lookup_max,
                                                           .num_speculative_tokens = c.num_speculative_tokens});
  EXPECT_TRUE(p.ok()) << p.status();
  return MakeProposer(*std::move(p));
}

std::vector<int32_t> Proposal(int32_t n, const std::vector<int32_t>& out) {
  return std::vector<int32_t>(out.begin(), out.begin() + n);
}

class ProposerSetTest : public ::testing::TestWithParam<std::string> {};

// Three sequences fed in turn, each in runs of 1..7 tokens (sometimes the
// same list twice), and a fourth that starts after the first ended: at every
// turn each proposes what its own proposer fed the same tokens proposes, for
// room from 0 to k + 2.
TEST_P(ProposerSetTest, ProposesWhatItsOwnProposerFedTheSameTokensProposes) {
  const uint64_t seed = testing_util::TestSeed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  std::mt19937 rng(static_cast<uint32_t>(seed));
  const ProposerConfig config = Config(GetParam());
  absl::StatusOr<ProposerSet> set = ProposerSet::Create(config);
  ASSERT_TRUE(set.ok()) << set.status();
  absl::StatusOr<SuffixCache> cache = SuffixCache::Create({});  // the reference's own
  ASSERT_TRUE(cache.ok());

  struct Seq {
    uint64_t id;
    std::vector<int32_t> tokens;
    std::unique_ptr<Proposer> alone;
    size_t fed = 0;
  };
  std::vector<Seq> seqs;
  for (uint64_t id : {11u, 12u, 13u}) {
    seqs.push_back({id, RepetitiveTokens(rng, 400), Alone(config, &*cache)});
    set->Add(id);
  }
  int proposed = 0, turns = 0;
  bool fourth = false;
  while (!seqs.empty() && turns < 2000) {
    Seq& s = seqs[rng() % seqs.size()];
    ++turns;
    const size_t to = std::min(s.tokens.size(), s.fed + 1 + rng() % 7);
    const std::span<const int32_t> run(s.tokens.data() + s.fed, to - s.fed);
    set->Append(s.id, run);
    if (rng() % 4 == 0) set->Append(s.id, {});  // nothing new
    s.alone->Append(run);
    s.fed = to;
    ASSERT_EQ(set->fed(s.id), static_cast<int64_t>(to));
    const auto room = static_cast<size_t>(rng() % (kK + 3));
    std::vector<int32_t> got(room, -1), want(room, -1);
    const int32_t n = set->Propose(s.id, got);
    const int32_t m = room == 0 ? 0 : s.alone->Propose(std::span<int32_t>(want).first(std::min<size_t>(room, kK)));
    ASSERT_EQ(Proposal(n, got), Proposal(m, want)) << "sequence " << s.id << " after " << to << " tokens, room " << room;
    proposed += n;
    if (s.fed == s.tokens.size()) {  // it ends: its output (the second half) joins both caches
      const size_t half = s.tokens.size() / 2;
      const std::span<const int32_t> output(s.tokens.data() + half, s.tokens.size() - half);
      set->Remove(s.id, output);
      cache->AddOutput(output);
      EXPECT_FALSE(set->contains(s.id));
      const std::vector<int32_t> ended = s.tokens;
      std::swap(s, seqs.back());
      seqs.pop_back();
      if (!fourth) {  // starts with the end of what ended: the cache has the rest
        fourth = true;
        std::vector<int32_t> t(ended.begin() + 300, ended.begin() + 330);
        const std::vector<int32_t> more = RepetitiveTokens(rng, 100);
        t.insert(t.end(), more.begin(), more.end());
        seqs.push_back({14, std::move(t), Alone(config, &*cache)});
        set->Add(14);
      }
    }
  }
  EXPECT_TRUE(seqs.empty());
  EXPECT_EQ(set->num_sequences(), 0);
  EXPECT_GT(proposed, 200) << "the streams repeat: most turns propose something";
  if (GetParam() == "suffix") {
    ASSERT_NE(set->suffix_cache(), nullptr);
    EXPECT_EQ(set->suffix_cache()->num_sequences(), 4);
  } else {
    EXPECT_EQ(set->suffix_cache(), nullptr);
  }
}

// Add of a held id starts it over (a recompute after a preemption feeds it
// from its first token); unknown ids propose nothing and are ignored.
TEST_P(ProposerSetTest, AddStartsOverAndUnknownIdsAreIgnored) {
  const ProposerConfig config = Config(GetParam());
  absl::StatusOr<ProposerSet> set = ProposerSet::Create(config);
  ASSERT_TRUE(set.ok()) << set.status();
  absl::StatusOr<SuffixCache> cache = SuffixCache::Create({});  // the references' own, empty like the set's
  ASSERT_TRUE(cache.ok());
  const std::vector<int32_t> a = {1, 2, 3, 4, 5, 6, 1, 2, 3, 4, 5, 6, 1, 2};
  const std::vector<int32_t> b = {6, 5, 4, 3, 2, 1, 6, 5, 4, 3, 2, 1, 6, 5};
  // What a proposer of its own fed `tokens` proposes.
  auto alone = [&](const std::vector<int32_t>& tokens) {
    std::unique_ptr<Proposer> p = Alone(config, &*cache);
    p->Append(tokens);
    std::vector<int32_t> out(kK, -1);
    return Proposal(p->Propose(out), out);
  };
  std::vector<int32_t> out(kK, -1);
  set->Add(7);
  set->Append(7, a);
  EXPECT_EQ(Proposal(set->Propose(7, out), out), alone(a));
  EXPECT_FALSE(alone(a).empty()) << "a repeats: a match";
  set->Add(7);  // starts over: fed from its first token again
  EXPECT_EQ(set->fed(7), 0);
  set->Append(7, b);
  EXPECT_EQ(set->fed(7), std::ssize(b));
  EXPECT_EQ(Proposal(set->Propose(7, out), out), alone(b));

  EXPECT_EQ(set->Propose(8, out), 0);
  set->Append(8, a);
  EXPECT_EQ(set->fed(8), 0);
  set->Remove(8, a);  // unknown: nothing joins the cache
  EXPECT_FALSE(set->contains(8));
  set->Remove(7);  // no output: the cache learns nothing
  if (set->suffix_cache() != nullptr) {
    EXPECT_EQ(set->suffix_cache()->num_sequences(), 0);
  }
  EXPECT_EQ(set->num_sequences(), 0);
}

INSTANTIATE_TEST_SUITE_P(Methods, ProposerSetTest, ::testing::Values("ngram", "suffix"));

// A factory's proposers replace the method's (tests of the verification
// choose their proposals): each sequence gets its own, fed like any other.
TEST(ProposerSetCreateTest, AFactoryMakesTheProposers) {
  std::vector<uint64_t> made;
  absl::StatusOr<ProposerSet> set = ProposerSet::Create(Config("suffix"), [&](uint64_t id) {
    made.push_back(id);
    return Alone(Config("ngram"), nullptr);
  });
  ASSERT_TRUE(set.ok()) << set.status();
  EXPECT_EQ(set->suffix_cache(), nullptr) << "the factory's proposers use no suffix cache";
  set->Add(4);
  set->Add(5);
  EXPECT_EQ(made, (std::vector<uint64_t>{4, 5}));
  const std::vector<int32_t> a = {1, 2, 3, 1, 2, 3, 1, 2};
  set->Append(4, a);
  std::vector<int32_t> out(kK, -1);
  std::unique_ptr<Proposer> ngram = Alone(Config("ngram"), nullptr);
  ngram->Append(a);
  std::vector<int32_t> want(kK, -1);
  const int32_t m = ngram->Propose(want);
  EXPECT_EQ(Proposal(set->Propose(4, out), out), Proposal(m, want));
  EXPECT_GT(m, 0);
}

TEST(ProposerSetCreateTest, ErrorsNameTheFlag) {
  absl::StatusOr<ProposerSet> off = ProposerSet::Create(Config("off"));
  ASSERT_FALSE(off.ok());
  EXPECT_EQ(off.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(ValidateProposerConfig(Config("off")).ok());  // valid as a flag value

  absl::Status method = ValidateProposerConfig(Config("eagle"));
  EXPECT_NE(method.message().find("--speculative-method"), absl::string_view::npos) << method;
  ProposerConfig k = Config("suffix");
  k.num_speculative_tokens = 17;
  absl::Status k_error = ValidateProposerConfig(k);
  EXPECT_NE(k_error.message().find("--num-speculative-tokens"), absl::string_view::npos) << k_error;
  ProposerConfig lookup = Config("ngram");
  lookup.prompt_lookup_max = 1;
  absl::Status lookup_error = ValidateProposerConfig(lookup);
  EXPECT_NE(lookup_error.message().find("prompt_lookup_max"), absl::string_view::npos) << lookup_error;
  EXPECT_TRUE(ProposerSet::Create(lookup).status().code() == absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tpserve::speculative
