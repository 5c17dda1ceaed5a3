#include "coordinator/output_processor.h"

#include <gtest/gtest.h>

#include <memory>

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
