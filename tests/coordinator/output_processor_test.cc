#include "coordinator/output_processor.h"

#include <gtest/gtest.h>

#include <memory>
#include <random>

#include "coordinator/token_stops.h"
#include "tests/testing/seed.h"
#include "tests/tokenizer/toy_tokenizer.h"

namespace tpserve {
namespace {

using testing::kEnd;

class OutputProcessorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto tok = Tokenizer::FromJsonText(testing::ToyTokenizerJson().dump(), "toy");
    ASSERT_TRUE(tok.ok()) << tok.status();
    tokenizer_ = std::move(*tok);
  }

  struct Run {
    std::vector<std::string> pieces;
    std::string text;
    StopReason finish = StopReason::kNone;
    std::string matched;
    int tokens_fed = 0;
  };

  // Feeds `ids` until the processor finishes.
  Run Feed(StopParams params, const std::vector<int32_t>& ids, int64_t prompt = 3,
           int64_t max_total = 1000) {
    if (params.max_tokens == 0) params.max_tokens = 1000;
    OutputProcessor proc(*tokenizer_, params, {kEnd}, prompt, max_total);
    Run run;
    for (int32_t id : ids) {
      OutputDelta d = proc.Append(id);
      ++run.tokens_fed;
      run.pieces.push_back(d.text);
      run.text += d.text;
      if (d.finish != StopReason::kNone) {
        run.finish = d.finish;
        run.matched = d.matched_stop;
        EXPECT_TRUE(proc.finished());
        break;
      }
    }
    return run;
  }

  static std::vector<int32_t> Bytes(std::string_view s) {
    std::vector<int32_t> ids;
    for (unsigned char c : s) ids.push_back(c);  // toy ids 0..255 are the bytes
    return ids;
  }

  std::unique_ptr<Tokenizer> tokenizer_;
};

TEST_F(OutputProcessorTest, StreamsTextUntilEos) {
  auto ids = Bytes("Hello world");
  ids.push_back(kEnd);
  ids.push_back('!');  // never reached
  Run run = Feed({}, ids);
  EXPECT_EQ(run.text, "Hello world");
  EXPECT_EQ(run.finish, StopReason::kEos);
  EXPECT_EQ(run.tokens_fed, 12);
}

TEST_F(OutputProcessorTest, MaxTokensEndsWithLength) {
  Run run = Feed({.max_tokens = 4}, Bytes("abcdefgh"));
  EXPECT_EQ(run.text, "abcd");
  EXPECT_EQ(run.finish, StopReason::kLength);
  EXPECT_EQ(run.tokens_fed, 4);
}

TEST_F(OutputProcessorTest, ModelMaximumLengthEndsWithLength) {
  Run run = Feed({}, Bytes("abcdefgh"), /*prompt=*/10, /*max_total=*/13);
  EXPECT_EQ(run.text, "abc");
  EXPECT_EQ(run.finish, StopReason::kLength);
}

TEST_F(OutputProcessorTest, StopStringAcrossTokensIsWithheldAndExcluded) {
  Run run = Feed({.stop = {"STOP"}}, Bytes("ab STOP cd"));
  EXPECT_EQ(run.text, "ab ");
  EXPECT_EQ(run.finish, StopReason::kStop);
  EXPECT_EQ(run.matched, "STOP");
  for (const std::string& p : run.pieces) EXPECT_EQ(p.find('S'), std::string::npos) << p;
}

TEST_F(OutputProcessorTest, StopStringIncludedWhenAsked) {
  Run run = Feed({.stop = {"STOP"}, .include_stop_str_in_output = true}, Bytes("ab STOP cd"));
  EXPECT_EQ(run.text, "ab STOP");
}

TEST_F(OutputProcessorTest, APartialMatchIsReleasedOnceItCannotMatch) {
  Run run = Feed({.max_tokens = 4, .stop = {"xyz"}}, Bytes("xyqr"));
  ASSERT_EQ(run.pieces.size(), 4u);
  EXPECT_EQ(run.pieces[0], "");    // "x" could start "xyz"
  EXPECT_EQ(run.pieces[1], "");    // "xy" too
  EXPECT_EQ(run.pieces[2], "xyq");
  EXPECT_EQ(run.pieces[3], "r");
  EXPECT_EQ(run.finish, StopReason::kLength);
}

TEST_F(OutputProcessorTest, WithheldTextIsFlushedAtTheEnd) {
  auto ids = Bytes("ab x");
  ids.push_back(kEnd);
  Run run = Feed({.stop = {"xyz"}}, ids);
  EXPECT_EQ(run.text, "ab x");
  EXPECT_EQ(run.finish, StopReason::kEos);
  Run length = Feed({.max_tokens = 4, .stop = {"xyz"}}, Bytes("ab x"));
  EXPECT_EQ(length.text, "ab x");
}

TEST_F(OutputProcessorTest, EarliestStopStringWins) {
  Run run = Feed({.stop = {"cd", "bc"}}, Bytes("abcdef"));
  EXPECT_EQ(run.text, "a");
  EXPECT_EQ(run.matched, "bc");
}

TEST_F(OutputProcessorTest, NeverEmitsBrokenUtf8) {
  auto ids = Bytes("a\xF0\x9F\x98\x80" "b");
  ids.push_back(kEnd);
  Run run = Feed({}, ids);
  EXPECT_EQ(run.text, "a\xF0\x9F\x98\x80" "b");
  EXPECT_EQ(run.pieces[1], "");
  EXPECT_EQ(run.pieces[2], "");
  EXPECT_EQ(run.pieces[3], "");
  EXPECT_EQ(run.pieces[4], "\xF0\x9F\x98\x80");
}

TEST_F(OutputProcessorTest, MinTokensDefersEosAndStops) {
  std::vector<int32_t> ids = {kEnd, 'a', kEnd};
  Run run = Feed({.min_tokens = 2}, ids);
  EXPECT_EQ(run.tokens_fed, 3);
  EXPECT_EQ(run.finish, StopReason::kEos);
  EXPECT_EQ(run.text, "a");  // the early special token's text is skipped
}

TEST_F(OutputProcessorTest, IgnoreEosKeepsGoing) {
  std::vector<int32_t> ids = {'a', kEnd, 'b'};
  Run run = Feed({.max_tokens = 3, .ignore_eos = true}, ids);
  EXPECT_EQ(run.finish, StopReason::kLength);
  EXPECT_EQ(run.text, "ab");
}

TEST_F(OutputProcessorTest, StopTokenIdsEndWithTheirText) {
  Run run = Feed({.stop_token_ids = {'!'}}, Bytes("hi!there"));
  EXPECT_EQ(run.text, "hi");
  EXPECT_EQ(run.finish, StopReason::kStop);
  EXPECT_EQ(run.matched, "!");
}

// The engine thread decides the token-level stops with TokenStops alone; the
// processor must end at the same token for them (it may end earlier, only by
// a stop string, which the engine learns of from the output thread).
TEST_F(OutputProcessorTest, TheEngineTokenStopsEndWhereTheProcessorDoes) {
  const uint64_t seed = testing_util::TestSeed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937_64 rng(seed);
  auto uniform = [&rng](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  const std::vector<int32_t> eos = {kEnd};
  for (int round = 0; round < 2000; ++round) {
    StopParams params;
    params.max_tokens = uniform(1, 40);
    params.min_tokens = uniform(0, 3) == 0 ? uniform(1, 6) : 0;
    params.ignore_eos = uniform(0, 1) == 1;
    if (uniform(0, 1) == 1) params.stop_token_ids = {'!', static_cast<int32_t>(uniform('a', 'f'))};
    if (uniform(0, 2) == 0) params.stop = {"cab", "ee"};
    const int64_t prompt = uniform(1, 20), max_total = prompt + uniform(1, 50);
    const TokenStops engine(params, eos, prompt, max_total);
    OutputProcessor proc(*tokenizer_, params, eos, prompt, max_total);
    int engine_end = -1, proc_end = -1;
    StopReason engine_reason = StopReason::kNone, proc_reason = StopReason::kNone;
    std::string matched;
    for (int n = 1; n <= 60 && (engine_end < 0 || proc_end < 0); ++n) {
      const int pick = uniform(0, 9);
      const int32_t token = pick == 0 ? kEnd : pick == 1 ? '!' : static_cast<int32_t>(uniform('a', 'f'));
      if (engine_end < 0 && (engine_reason = engine.Check(token, n)) != StopReason::kNone) engine_end = n;
      if (proc_end < 0) {
        const OutputDelta d = proc.Append(token);
        if (d.finish != StopReason::kNone) {
          proc_end = n;
          proc_reason = d.finish;
          matched = d.matched_stop;
        }
      }
    }
    ASSERT_GT(engine_end, 0) << "max_tokens or the model's length always ends it";
    ASSERT_GT(proc_end, 0);
    const bool by_stop_string = proc_reason == StopReason::kStop && (matched == "cab" || matched == "ee");
    if (by_stop_string) {
      EXPECT_LE(proc_end, engine_end) << "round " << round;
    } else {
      EXPECT_EQ(proc_end, engine_end) << "round " << round;
      EXPECT_EQ(proc_reason, engine_reason) << "round " << round;
    }
  }
}

// The delta handed back for reuse: the same text as fresh ones.
TEST_F(OutputProcessorTest, AReusedDeltaGivesWhatFreshOnesGive) {
  const std::vector<int32_t> ids = Bytes("he said hi there and left");
  StopParams params{.max_tokens = 100, .stop = {"there"}};
  OutputProcessor fresh(*tokenizer_, params, {kEnd}, 3, 1000);
  OutputProcessor reused(*tokenizer_, params, {kEnd}, 3, 1000);
  OutputDelta delta;
  for (int32_t id : ids) {
    const OutputDelta want = fresh.Append(id);
    reused.Append(id, delta);
    EXPECT_EQ(delta.text, want.text);
    EXPECT_EQ(delta.finish, want.finish);
    EXPECT_EQ(delta.matched_stop, want.matched_stop);
    if (want.finish != StopReason::kNone) break;
  }
  EXPECT_EQ(delta.finish, StopReason::kStop);
}

TEST(StopStrings, ValidationNamesTheField) {
  EXPECT_TRUE(ValidateStopStrings({"a", "bc"}).ok());
  std::vector<std::string> many(kMaxStopStrings + 1, "x");
  EXPECT_NE(ValidateStopStrings(many).message().find("stopping.stop"), std::string::npos);
  EXPECT_NE(ValidateStopStrings({"ok", ""}).message().find("stopping.stop[1]"), std::string::npos);
  EXPECT_EQ(ValidateStopStrings({std::string(kMaxStopStringBytes + 1, 'y')}).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tpserve
