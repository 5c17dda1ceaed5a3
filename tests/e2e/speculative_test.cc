// End to end, real processes: speculative decoding (--speculative-method)
// changes no output.
//
// * ~60 random requests with repetitive prompts (so proposals get accepted),
//   each sent twice at once to the same server: speculated, and with
//   disable_speculation (the path without speculation). Greedy and seeded
//   sampling (temperature, top-k/p, penalties), log-probs, stop ids, stop
//   strings, EOS, min_tokens and max_tokens; chunked prefill (a 32-token
//   budget), the prefix cache, and a KV pool small enough to preempt. Both
//   twins stream the same chunks (token ids, text, log-probs bit for bit:
//   the CPU backend is batch-invariant and a verification row has the bits
//   of the one-token step, docs/architecture.md) and end the same way; every
//   block is free at the end; proposals were accepted (the comparison is not
//   vacuous); with overlap, drafts were verified by steps sent one step ahead
//   (tpserve:spec_decode_num_pipelined_drafts), without it none. Each
//   proposer, overlap on and off, tp 1 and 2.
// * A stop inside an accepted run: the greedy output of one request, then
//   the same request ended by a stop id at a token of it, and by max_tokens:
//   each ends exactly there, nothing after it streamed.
// * tpserve-bench's speculative-decoding figures are the server's counters'.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <iterator>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "tests/e2e/harness.h"
#include "tests/testing/seed.h"

namespace tpserve::e2e {
namespace {

namespace v1 = tpserve::v1;

struct Observed {
  v1::Chunk all;  // every chunk, merged in order
  v1::Complete complete;
  int completes = 0;
  grpc::Status status;
};

Observed Stream(v1::Generation::Stub& stub, const v1::GenerateRequest& request) {
  Observed o;
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(200)));
  auto reader = stub.Generate(&context, request);
  v1::GenerateResponse r;
  while (reader->Read(&r)) {
    if (r.has_chunk()) {
      o.all.mutable_token_ids()->MergeFrom(r.chunk().token_ids());
      o.all.mutable_text()->append(r.chunk().text());
      o.all.mutable_logprobs()->MergeFrom(r.chunk().logprobs());
    } else if (r.has_complete()) {
      ++o.completes;
      o.complete = r.complete();
    }
  }
  o.status = reader->Finish();
  return o;
}

// A prompt that repeats a phrase (with noise between), so its output, and the
// loops a small random model falls into, give the proposers something to match.
std::vector<uint32_t> RepetitivePrompt(std::mt19937_64& rng, std::vector<uint32_t>& phrase) {
  auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  phrase.clear();
  for (int k = uniform(3, 8); k > 0; --k) phrase.push_back(static_cast<uint32_t>(uniform(3, 399)));
  std::vector<uint32_t> prompt;
  for (int r = uniform(2, 5); r > 0; --r) {
    prompt.insert(prompt.end(), phrase.begin(), phrase.end());
    for (int k = uniform(0, 3); k > 0; --k) prompt.push_back(static_cast<uint32_t>(uniform(3, 399)));
  }
  return prompt;
}

v1::GenerateRequest RandomRequest(std::mt19937_64& rng, int i) {
  auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  auto chance = [&](double p) { return std::bernoulli_distribution(p)(rng); };
  auto real = [&](float lo, float hi) { return std::uniform_real_distribution<float>(lo, hi)(rng); };
  v1::GenerateRequest r;
  r.set_request_id(absl::StrCat("r", i));
  std::vector<uint32_t> phrase;
  for (uint32_t t : RepetitivePrompt(rng, phrase)) r.mutable_prompt_token_ids()->add_ids(t);
  v1::SamplingParams& sp = *r.mutable_sampling();
  if (chance(0.6)) {
    sp.set_temperature(0);
  } else {  // seeded: a speculated request must draw the same tokens
    sp.set_temperature(real(0.3f, 1.2f));
    sp.set_seed(rng());
    if (chance(0.5)) sp.set_top_k(uniform(1, 40));
    if (chance(0.5)) sp.set_top_p(real(0.5f, 1.0f));
  }
  if (chance(0.2)) sp.set_repetition_penalty(real(0.8f, 1.5f));
  if (chance(0.2)) sp.set_frequency_penalty(real(-0.5f, 1.0f));
  v1::StoppingParams& st = *r.mutable_stopping();
  const int max_tokens = uniform(4, 40);
  st.set_max_tokens(static_cast<uint32_t>(max_tokens));
  st.set_ignore_eos(chance(0.5));
  if (chance(0.3)) st.add_stop_token_ids(phrase[static_cast<size_t>(uniform(0, static_cast<int>(phrase.size()) - 1))]);
  if (chance(0.2)) st.add_stop(chance(0.5) ? "e" : "th");
  if (chance(0.15)) st.set_min_tokens(static_cast<uint32_t>(uniform(1, std::min(5, max_tokens))));
  if (chance(0.3)) r.set_logprobs(static_cast<uint32_t>(uniform(0, 3)));
  return r;
}

// Every request at once, one client thread each.
std::vector<Observed> RunAll(v1::Generation::Stub& stub, const std::vector<v1::GenerateRequest>& requests) {
  std::vector<Observed> out(requests.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < requests.size(); ++i) threads.emplace_back([&, i] { out[i] = Stream(stub, requests[i]); });
  for (std::thread& t : threads) t.join();
  return out;
}

// "" when both streams are the same, chunk bytes (ids, text, log-probs) and end.
std::string Difference(const Observed& spec, const Observed& plain) {
  if (!spec.status.ok() || !plain.status.ok()) {
    return absl::StrCat("status: ", spec.status.error_message(), " | ", plain.status.error_message());
  }
  if (spec.completes != 1 || plain.completes != 1) return absl::StrCat(spec.completes, " and ", plain.completes, " Completes");
  if (spec.all.SerializeAsString() != plain.all.SerializeAsString()) {
    return absl::StrCat("speculated {", spec.all.ShortDebugString(), "}\nplain {", plain.all.ShortDebugString(), "}");
  }
  if (spec.complete.finish_reason() != plain.complete.finish_reason() ||
      spec.complete.usage().completion_tokens() != plain.complete.usage().completion_tokens()) {
    return absl::StrCat("ends: {", spec.complete.ShortDebugString(), "} vs {", plain.complete.ShortDebugString(), "}");
  }
  return "";
}

// GetServerInfo's per-position counts: one per position of the longest draft
// (at most `k`), none growing with the position (a token is kept only after
// the ones before it), summing to the accepted tokens.
void ExpectPerPositionAddsUp(const v1::ServerInfo& info, int k) {
  const auto& per_pos = info.spec_decode_num_accepted_tokens_per_pos();
  EXPECT_GE(per_pos.size(), 1) << info.ShortDebugString();
  EXPECT_LE(per_pos.size(), k) << info.ShortDebugString();
  uint64_t sum = 0;
  for (int i = 0; i < per_pos.size(); ++i) {
    sum += per_pos[i];
    if (i > 0) {
      EXPECT_LE(per_pos[i], per_pos[i - 1]) << "position " << i;
    }
  }
  EXPECT_EQ(sum, info.spec_decode_num_accepted_tokens());
}

struct Mode {
  int tp;
  bool overlap;
  const char* method;
};

class SpeculativeTest : public ::testing::TestWithParam<Mode> {
 protected:
  TempDir dir_;
};

TEST_P(SpeculativeTest, SpeculatedRequestsStreamWhatUnspeculatedOnesDo) {
  const Mode m = GetParam();
  const std::string model = MakeModel(dir_.path(), "llama", {"--seed", "19"});
  std::vector<std::string> flags = {"--speculative-method", m.method, "--num-speculative-tokens", "4",
                                    "--speculative-policy=false", "--block-size", "8",
                                    "--max-num-batched-tokens", "32", "--max-num-seqs", "16",
                                    "--num-gpu-blocks-override", "48"};
  if (!m.overlap) flags.push_back("--no-overlap");
  Coordinator c = StartCoordinator(model, m.tp, dir_.path() + "/coordinator.log", flags);
  ASSERT_TRUE(c.stub) << "no coordinator";

  const uint64_t seed = testing_util::TestSeed();
  std::mt19937_64 rng(seed);
  std::vector<v1::GenerateRequest> requests;
  constexpr int kRequests = 60;
  for (int i = 0; i < kRequests; ++i) {
    v1::GenerateRequest r = RandomRequest(rng, i);
    v1::GenerateRequest plain = r;
    plain.set_request_id(absl::StrCat("plain", i));
    plain.set_disable_speculation(true);
    requests.push_back(std::move(r));
    requests.push_back(std::move(plain));
  }
  const std::vector<Observed> got = RunAll(*c.stub, requests);
  int stopped = 0;
  for (int i = 0; i < kRequests; ++i) {
    const Observed& spec = got[static_cast<size_t>(2 * i)];
    EXPECT_EQ(Difference(spec, got[static_cast<size_t>(2 * i + 1)]), "")
        << "request " << i << " {" << requests[static_cast<size_t>(2 * i)].ShortDebugString() << "}, seed " << seed;
    if (spec.complete.finish_reason() != v1::LENGTH) ++stopped;
  }
  const v1::ServerInfo info = ServerInfo(*c.stub);
  EXPECT_GT(info.spec_decode_num_drafts(), 0u);
  EXPECT_GT(info.spec_decode_num_accepted_tokens(), 0u) << "nothing accepted: the comparison proves nothing";
  EXPECT_LT(info.spec_decode_num_accepted_tokens(), info.spec_decode_num_draft_tokens());
  ExpectPerPositionAddsUp(info, 4);
  // With overlap a speculating sequence is pipelined like any other: drafts
  // verified by steps sent while the sequence's step before was in flight.
  if (m.overlap) {
    EXPECT_GT(info.spec_decode_num_pipelined_drafts(), 0u) << "no speculating step was sent one step ahead";
  } else {
    EXPECT_EQ(info.spec_decode_num_pipelined_drafts(), 0u);
  }
  EXPECT_GT(info.num_preemptions_total(), 0u) << "the small pool preempted nothing";
  EXPECT_GT(stopped, 0) << "no request ended by a stop";
  EXPECT_EQ(info.free_blocks(), info.num_blocks()) << "blocks still held after every request ended";
  std::cout << "accepted " << info.spec_decode_num_accepted_tokens() << " of "
            << info.spec_decode_num_draft_tokens() << " proposed tokens in " << info.spec_decode_num_drafts()
            << " drafts (" << info.spec_decode_num_pipelined_drafts() << " one step ahead); "
            << info.num_preemptions_total() << " preemptions\n";
}

INSTANTIATE_TEST_SUITE_P(Modes, SpeculativeTest,
                         ::testing::Values(Mode{1, true, "ngram"}, Mode{1, false, "suffix"}, Mode{2, true, "ngram"},
                                           Mode{2, false, "suffix"}),
                         [](const auto& info) {
                           return absl::StrCat("Tp", info.param.tp, info.param.overlap ? "Overlap" : "LockStep",
                                               info.param.method);
                         });

class SpeculativeStopTest : public ::testing::Test {
 protected:
  TempDir dir_;
};

// Stops inside an accepted run end at the right token, nothing after it streamed.
TEST_F(SpeculativeStopTest, AStopInsideAnAcceptedRunEndsThere) {
  const std::string model = MakeModel(dir_.path(), "llama", {"--seed", "19"});
  Coordinator c = StartCoordinator(model, 1, dir_.path() + "/coordinator.log",
                                   {"--speculative-method", "ngram", "--speculative-policy=false"});
  ASSERT_TRUE(c.stub) << "no coordinator";
  std::mt19937_64 rng(testing_util::TestSeed());
  // A request whose speculated output accepted proposals: its greedy tokens.
  v1::GenerateRequest r;
  std::vector<int32_t> want;
  for (int attempt = 0; attempt < 20 && want.empty(); ++attempt) {
    r = Greedy(40);
    std::vector<uint32_t> phrase;
    r.mutable_prompt_token_ids()->Clear();
    for (uint32_t t : RepetitivePrompt(rng, phrase)) r.mutable_prompt_token_ids()->add_ids(t);
    const uint64_t before = ServerInfo(*c.stub).spec_decode_num_accepted_tokens();
    const GenerateOutcome o = Generate(*c.stub, r);
    ASSERT_TRUE(o.status.ok()) << o.status.error_message();
    if (ServerInfo(*c.stub).spec_decode_num_accepted_tokens() >= before + 4) want = o.tokens;
  }
  ASSERT_EQ(want.size(), 40u) << "no prompt of 20 had proposals accepted";
  // Stop ids at tokens whose first appearance is past the first few.
  int tried = 0;
  for (size_t j = 3; j < want.size(); ++j) {
    if (std::find(want.begin(), want.begin() + static_cast<std::ptrdiff_t>(j), want[j]) != want.begin() + static_cast<std::ptrdiff_t>(j)) continue;
    v1::GenerateRequest stop = r;
    stop.mutable_stopping()->add_stop_token_ids(static_cast<uint32_t>(want[j]));
    const GenerateOutcome o = Generate(*c.stub, stop);
    ASSERT_TRUE(o.status.ok()) << o.status.error_message();
    EXPECT_EQ(o.tokens, std::vector<int32_t>(want.begin(), want.begin() + static_cast<std::ptrdiff_t>(j) + 1))
        << "stop id " << want[j] << " at token " << j;
    EXPECT_EQ(o.complete.finish_reason(), v1::STOP_SEQUENCE);
    ++tried;
  }
  EXPECT_GT(tried, 0) << "every token of the output repeats an earlier one";
  for (uint32_t n : {1u, 2u, 5u, 17u, 39u}) {
    v1::GenerateRequest shorter = r;
    shorter.mutable_stopping()->set_max_tokens(n);
    const GenerateOutcome o = Generate(*c.stub, shorter);
    ASSERT_TRUE(o.status.ok()) << o.status.error_message();
    EXPECT_EQ(o.tokens, std::vector<int32_t>(want.begin(), want.begin() + n)) << "max_tokens " << n;
    EXPECT_EQ(o.complete.finish_reason(), v1::LENGTH);
  }
  const v1::ServerInfo info = ServerInfo(*c.stub);
  EXPECT_EQ(info.free_blocks(), info.num_blocks());
}

// tpserve-bench against a speculating server reports vLLM's figures of the
// drafts verified during its run: on a fresh server, the server's totals.
class SpeculativeBenchTest : public SpeculativeStopTest {};

TEST_F(SpeculativeBenchTest, BenchReportsTheAcceptanceOfItsRun) {
  const std::string model = MakeModel(dir_.path(), "llama", {"--seed", "19"});
  Coordinator c = StartCoordinator(model, 1, dir_.path() + "/coordinator.log",
                                   {"--speculative-method", "ngram", "--speculative-policy=false"});
  ASSERT_TRUE(c.stub) << "no coordinator";
  // Repetitive prompts (random ones are seldom matched), as a --dataset.
  const std::string dataset = dir_.path() + "/prompts.jsonl";
  {
    std::mt19937_64 rng(testing_util::TestSeed());
    std::ofstream out(dataset);
    for (int i = 0; i < 8; ++i) {
      std::vector<uint32_t> phrase;
      out << nlohmann::json{{"prompt_token_ids", RepetitivePrompt(rng, phrase)}, {"output_len", 32}}.dump() << "\n";
    }
  }
  const std::string json = dir_.path() + "/bench.json", log = dir_.path() + "/bench.log";
  ASSERT_EQ(RunCommand({BinaryPath("tools/bench/tpserve-bench"), "throughput", "--server", c.address,
                        "--num-prompts", "8", "--dataset", dataset, "--output-len", "32", "--json", json},
                       log),
            0);
  const v1::ServerInfo info = ServerInfo(*c.stub);
  ASSERT_GT(info.spec_decode_num_accepted_tokens(), 0u) << "nothing accepted: a weak check";
  ExpectPerPositionAddsUp(info, 4);
  std::ifstream in(json);
  const nlohmann::json doc = nlohmann::json::parse(in, nullptr, false);
  ASSERT_FALSE(doc.is_discarded()) << "bench.json is not JSON";
  const nlohmann::json& s = doc["runs"][0]["spec_decode"];
  ASSERT_TRUE(s.is_object()) << doc.dump(2);
  const auto drafts = static_cast<double>(info.spec_decode_num_drafts());
  const auto accepted = static_cast<double>(info.spec_decode_num_accepted_tokens());
  EXPECT_EQ(s["drafts"].get<uint64_t>(), info.spec_decode_num_drafts());
  EXPECT_EQ(s["draft_tokens"].get<uint64_t>(), info.spec_decode_num_draft_tokens());
  EXPECT_EQ(s["accepted_tokens"].get<uint64_t>(), info.spec_decode_num_accepted_tokens());
  EXPECT_DOUBLE_EQ(s["acceptance_rate"].get<double>(),
                   accepted / static_cast<double>(info.spec_decode_num_draft_tokens()));
  EXPECT_DOUBLE_EQ(s["acceptance_length"].get<double>(), 1 + accepted / drafts);
  ASSERT_EQ(s["per_position_acceptance"].size(), info.spec_decode_num_accepted_tokens_per_pos().size());
  for (int i = 0; i < info.spec_decode_num_accepted_tokens_per_pos().size(); ++i) {
    EXPECT_DOUBLE_EQ(s["per_position_acceptance"][i].get<double>(),
                     static_cast<double>(info.spec_decode_num_accepted_tokens_per_pos(i)) / drafts);
  }
  std::ifstream table(log);
  const std::string printed((std::istreambuf_iterator<char>(table)), std::istreambuf_iterator<char>());
  for (const char* line : {"Speculative Decoding", "Acceptance rate (%):", "Acceptance length:",
                           "Per-position acceptance (%):"}) {
    EXPECT_NE(printed.find(line), std::string::npos) << line << " in\n" << printed;
  }
  std::cout << printed;
}

}  // namespace
}  // namespace tpserve::e2e
