// tpserve-tokenize --model DIR
//
// Reads JSON lines on stdin and writes one JSON line per request on stdout:
//   {"text": "...", "add_special_tokens": true}   -> {"ids": [...]}
//   {"ids": [...], "skip_special_tokens": false}   -> {"text": "..."}
// add_special_tokens defaults to true, skip_special_tokens to false. A line
// that is not such a request gets {"error": "..."} and the tool goes on;
// blank lines are ignored. DIR is a model folder with tokenizer.json (or the file).
#include <iostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "base/tool_usage.h"
#include "tokenizer/tokenizer.h"

ABSL_FLAG(std::string, model, "", "model folder holding tokenizer.json, or the tokenizer.json file");

namespace {

using nlohmann::json;

absl::StatusOr<json> Handle(const tpserve::Tokenizer& tok, const std::string& line) {
  json req = json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (req.is_discarded()) return absl::InvalidArgumentError("line is not valid JSON");
  if (!req.is_object()) return absl::InvalidArgumentError("request must be a JSON object");
  const bool has_text = req.contains("text"), has_ids = req.contains("ids");
  if (has_text == has_ids) {
    return absl::InvalidArgumentError("request needs exactly one of \"text\" (to encode) or \"ids\" (to decode)");
  }
  const char* flag = has_text ? "add_special_tokens" : "skip_special_tokens";
  for (const auto& [key, value] : req.items()) {
    if (key != (has_text ? "text" : "ids") && key != flag) {
      return absl::InvalidArgumentError(absl::StrCat("unknown key \"", key, "\" (a request has ",
                                                     has_text ? "\"text\" and \"add_special_tokens\""
                                                              : "\"ids\" and \"skip_special_tokens\"",
                                                     ")"));
    }
  }
  bool option = has_text;  // add_special_tokens defaults to true, skip_special_tokens to false
  if (req.contains(flag)) {
    if (!req[flag].is_boolean()) return absl::InvalidArgumentError(absl::StrCat("\"", flag, "\" must be true or false"));
    option = req[flag].get<bool>();
  }
  if (has_text) {
    if (!req["text"].is_string()) return absl::InvalidArgumentError("\"text\" must be a string");
    return json{{"ids", tok.Encode(req["text"].get<std::string>(), option)}};
  }
  if (!req["ids"].is_array()) return absl::InvalidArgumentError("\"ids\" must be an array of token ids");
  std::vector<int32_t> ids;
  for (const json& id : req["ids"]) {
    if (!id.is_number_integer() || id.get<int64_t>() < INT32_MIN || id.get<int64_t>() > INT32_MAX) {
      return absl::InvalidArgumentError(absl::StrCat("\"ids\" must hold integers; got ", id.dump()));
    }
    ids.push_back(id.get<int32_t>());
  }
  auto text = tok.Decode(ids, option);
  if (!text.ok()) return text.status();
  return json{{"text", *text}};
}

}  // namespace

int main(int argc, char** argv) {
  tpserve::InitToolUsage(argc, argv,
      "tpserve-tokenize --model DIR < requests.jsonl: a tokenizer on JSON lines.\n"
      "\n"
      "Each line in, one line out:\n"
      "  {\"text\": \"...\", \"add_special_tokens\": true} -> {\"ids\": [...]}\n"
      "  {\"ids\": [...], \"skip_special_tokens\": false} -> {\"text\": \"...\"}\n"
      "\n"
      "Example:\n"
      "  echo '{\"text\": \"Hello\"}' | tpserve-tokenize --model /tmp/m\n",
      {__FILE__});
  absl::ParseCommandLine(argc, argv);
  const std::string model = absl::GetFlag(FLAGS_model);
  if (model.empty()) {
    std::cerr << "tpserve-tokenize: --model is required (a folder holding tokenizer.json)\n";
    return 2;
  }
  auto tok = tpserve::Tokenizer::Load(model);
  if (!tok.ok()) {
    std::cerr << "tpserve-tokenize: " << tok.status().message() << "\n";
    return 1;
  }
  std::string line;
  while (std::getline(std::cin, line)) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    auto reply = Handle(**tok, line);
    const json out = reply.ok() ? *reply : json{{"error", std::string(reply.status().message())}};
    std::cout << out.dump(-1, ' ', false, json::error_handler_t::replace) << std::endl;
  }
  return 0;
}
