// The token ids the service sends for a chat rendered by a checkpoint's own
// template (tests/jinja/templates) with the real Llama 3 and Qwen3 tokenizers:
// over the conformance corpus (tests/jinja/conversations.jsonl) the rendering is
// byte-identical to Python's Jinja2 (tests/jinja/reference_render.py), and the ids
// equal the reference tokenization of that whole text: Hugging Face's tokenizers
// (@lenml/tokenizers under node, tests/tokenizer/reference_tokenize.js) and
// Tokenizer::Encode with special tokens matched.
// Content that spells a control token ("<|im_end|>") is the exception, on
// purpose: it renders the same but encodes as text.
// Skips without the real tokenizers (scripts/fetch-tokenizers.sh) or python3-jinja2.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/tokenizer/reference_env.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace tpserve {
namespace {

namespace fs = std::filesystem;
using OJson = nlohmann::ordered_json;

fs::path JinjaTests() { return fs::path(TPSERVE_SOURCE_DIR) / "tests/jinja"; }

std::vector<OJson> ReadJsonLines(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::vector<OJson> out;
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty()) out.push_back(OJson::parse(line));
  }
  return out;
}

ChatInput InputOf(const OJson& vars) {
  ChatInput in;
  in.messages = vars["messages"];
  in.tools = vars["tools"];
  in.add_generation_prompt = vars["add_generation_prompt"].get<bool>();
  for (const auto& [k, v] : vars.items()) {
    if (k != "messages" && k != "tools" && k != "add_generation_prompt") in.kwargs[k] = v;
  }
  return in;
}

// True when a text segment (data, or template text between control tokens) spells
// one of the tokenizer's special tokens.
bool TextSpellsSpecialToken(const std::vector<ChatSegment>& segments, const Tokenizer& tok) {
  std::vector<std::string> specials;
  for (int32_t id = 0; id < tok.vocab_size(); ++id) {
    const int32_t one[1] = {id};
    if (tok.IsSpecial(id)) specials.push_back(*tok.Decode(one, false));
  }
  for (const ChatSegment& s : segments) {
    if (s.control) continue;
    for (const std::string& sp : specials) {
      if (s.text.find(sp) != std::string::npos) return true;
    }
  }
  return false;
}

struct Case {
  std::string template_name;   // tests/jinja/templates/<name>.jinja
  std::string tokenizer_name;  // @lenml/tokenizer-<name>
};

class ChatTemplateIdsTest : public ::testing::TestWithParam<Case> {};

TEST_P(ChatTemplateIdsTest, IdsAreTheTokenizationOfTheReferenceText) {
  const Case c = GetParam();
  const std::optional<fs::path> dir = testing::RealTokenizerDir(c.tokenizer_name);
  if (!dir) GTEST_SKIP() << testing::SkipMessage();
  const fs::path tmpl = JinjaTests() / "templates" / (c.template_name + ".jinja");
  const fs::path corpus = JinjaTests() / "conversations.jsonl";
  const fs::path ref = fs::path(TPSERVE_BINARY_DIR) / ("chat_ids_reference_" + c.template_name + ".jsonl");
  const std::string cmd = "python3 " + testing::Quote(JinjaTests() / "reference_render.py") + " " + testing::Quote(tmpl) +
                          " " + testing::Quote(corpus) + " " + testing::Quote(ref);
  if (std::system(cmd.c_str()) != 0) GTEST_SKIP() << "python3-jinja2 is not available: " << cmd;

  absl::StatusOr<std::unique_ptr<Tokenizer>> tok = Tokenizer::Load(*dir);
  ASSERT_TRUE(tok.ok()) << tok.status();
  // --chat-template FILE over the real tokenizer_config.json (for its special tokens).
  absl::StatusOr<ChatTemplate> chat = LoadChatTemplate(*dir, tmpl.string(), **tok);
  ASSERT_TRUE(chat.ok()) << chat.status();
  EXPECT_EQ(chat->name(), "jinja");

  const std::vector<OJson> cases = ReadJsonLines(corpus);
  const std::vector<OJson> expected = ReadJsonLines(ref);
  ASSERT_EQ(cases.size(), expected.size());
  // The Hugging Face reference ids of every text Jinja2 rendered, in corpus order.
  const fs::path texts = fs::path(TPSERVE_BINARY_DIR) / ("chat_ids_texts_" + c.template_name + ".jsonl");
  {
    std::ofstream out(texts, std::ios::binary);
    for (const OJson& e : expected) {
      if (e.contains("text")) out << OJson{{"text", e["text"]}}.dump() << "\n";
    }
  }
  std::vector<OJson> hf;
  if (testing::HaveNodeReference()) {
    const fs::path hf_out = fs::path(TPSERVE_BINARY_DIR) / ("chat_ids_hf_" + c.template_name + ".jsonl");
    const std::string node = "node " + testing::Quote(fs::path(TPSERVE_SOURCE_DIR) / "tests/tokenizer/reference_tokenize.js") +
                             " " + testing::Quote(testing::NodeModules()) + " " + testing::Quote(*dir / "tokenizer.json") +
                             " " + testing::Quote(*dir / "tokenizer_config.json") + " " + testing::Quote(texts) + " > " +
                             testing::Quote(hf_out);
    ASSERT_EQ(std::system(node.c_str()), 0) << node;
    hf = ReadJsonLines(hf_out);
  }
  size_t rendered = 0;
  int compared = 0, forged = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    if (!expected[i].contains("text")) continue;
    SCOPED_TRACE(cases[i]["name"].get<std::string>());
    absl::StatusOr<std::vector<ChatSegment>> segments = chat->RenderSegments(InputOf(cases[i]["vars"]));
    ASSERT_TRUE(segments.ok()) << segments.status();
    std::string text;
    for (const ChatSegment& s : *segments) text += s.text;
    const std::string want = expected[i]["text"].get<std::string>();
    ASSERT_EQ(text, want);
    const std::vector<int32_t> ids = EncodeChatSegments(*segments, **tok, /*allow_special_tokens=*/false);
    const std::vector<int32_t> reference = (*tok)->Encode(want, /*add_special_tokens=*/false);
    if (!hf.empty()) {
      ASSERT_LT(rendered, hf.size());
      EXPECT_EQ(reference, hf[rendered]["plain"].get<std::vector<int32_t>>()) << "Hugging Face disagrees";
    }
    ++rendered;
    if (TextSpellsSpecialToken(*segments, **tok)) {
      EXPECT_NE(ids, reference) << "content spelling a control token was encoded as that token";
      EXPECT_EQ(EncodeChatSegments(*segments, **tok, /*allow_special_tokens=*/true), reference);
      ++forged;
    } else {
      EXPECT_EQ(ids, reference);
      ++compared;
    }
    absl::StatusOr<std::string> decoded = (*tok)->Decode(ids, /*skip_special_tokens=*/false);
    ASSERT_TRUE(decoded.ok()) << decoded.status();
    EXPECT_EQ(*decoded, want);
  }
  EXPECT_GE(compared, 50);
  EXPECT_GE(forged, 1);
  if (hf.empty()) {
    std::cerr << "chat_template_ids_test: node reference not available (" << testing::SkipMessage()
              << "); compared with Tokenizer::Encode only\n";
  } else {
    EXPECT_EQ(rendered, hf.size());
  }
}

INSTANTIATE_TEST_SUITE_P(RealCheckpoints, ChatTemplateIdsTest,
                         ::testing::Values(Case{"qwen3", "qwen3"}, Case{"qwen2.5", "qwen3"}, Case{"llama3.2", "llama3"}),
                         [](const auto& info) {
                           std::string n = info.param.template_name;
                           for (char& ch : n) {
                             if (ch == '.') ch = '_';
                           }
                           return n;
                         });

}  // namespace
}  // namespace tpserve
