// tpserve-grammar --model DIR (--json-schema FILE | --json-object | --regex RE |
//                 --ebnf FILE | --choice A,B,...) [--check FILE ...] [--json] [--dump]
//
// The grammar engine alone: compiles the constraint against the model's
// tokenizer and prints the compile time; for each --check file, tokenizes its
// text as the service would (tokenizer.json, no special tokens added, special
// tokens' text as text) and holds the tokens against the grammar one by one
// as the sampler would, reporting where the first refused token is (or that
// the end was refused) and the mask time per token (p50/p99/max).
#include <chrono>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "base/flag_spelling.h"
#include "base/tool_usage.h"
#include "grammar/compiled_grammar.h"
#include "grammar/matcher.h"
#include "tools/grammar/model_vocabulary.h"
#include "tools/grammar/token_check.h"

ABSL_FLAG(std::string, model, "", "model folder holding tokenizer.json (and config.json or tokenizer_config.json for the stop ids)");
ABSL_FLAG(std::string, json_schema, "", "file holding a JSON Schema the output must satisfy");
ABSL_FLAG(bool, json_object, false, "the output is any JSON object");
ABSL_FLAG(bool, indent, false, "JSON laid out as json.dumps(indent=2) instead of compact (with --json-schema / --json-object)");
ABSL_FLAG(std::string, regex, "", "a regular expression the whole output matches (grammar/regex.h)");
ABSL_FLAG(std::string, ebnf, "", "file holding a GBNF grammar, start rule `root` (grammar/ebnf.h)");
ABSL_FLAG(std::vector<std::string>, choice, {}, "comma-separated list: the output is exactly one of them");
ABSL_FLAG(std::vector<std::string>, check, {}, "files whose text is held against the grammar (comma-separated; more may follow as arguments)");
ABSL_FLAG(bool, json, false, "print one JSON object instead of text");
ABSL_FLAG(bool, dump, false, "print the compiled grammar (rules, then terminals as /regex/)");

namespace {

using nlohmann::json;

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

absl::StatusOr<tpserve::grammar::GrammarSpec> SpecFromFlags() {
  using tpserve::grammar::GrammarSpec;
  GrammarSpec spec;
  int given = 0;
  spec.layout = absl::GetFlag(FLAGS_indent) ? tpserve::grammar::JsonLayout::kIndented : tpserve::grammar::JsonLayout::kCompact;
  if (const std::string f = absl::GetFlag(FLAGS_json_schema); !f.empty()) {
    ++given, spec.kind = GrammarSpec::Kind::kJsonSchema;
    auto text = ReadFile(f);
    if (!text.ok()) return text.status();
    spec.text = *std::move(text);
  }
  if (absl::GetFlag(FLAGS_json_object)) ++given, spec.kind = GrammarSpec::Kind::kJsonObject;
  if (const std::string r = absl::GetFlag(FLAGS_regex); !r.empty()) ++given, spec.kind = GrammarSpec::Kind::kRegex, spec.text = r;
  if (const std::string f = absl::GetFlag(FLAGS_ebnf); !f.empty()) {
    ++given, spec.kind = GrammarSpec::Kind::kEbnf;
    auto text = ReadFile(f);
    if (!text.ok()) return text.status();
    spec.text = *std::move(text);
  }
  if (!absl::GetFlag(FLAGS_choice).empty()) ++given, spec.kind = GrammarSpec::Kind::kChoice, spec.choices = absl::GetFlag(FLAGS_choice);
  if (given != 1) {
    return absl::InvalidArgumentError("give exactly one of --json-schema, --json-object, --regex, --ebnf, --choice");
  }
  return spec;
}

std::string Quoted(const std::string& bytes) { return json(bytes).dump(-1, ' ', false, json::error_handler_t::replace); }

json CheckFile(const std::string& path, const tpserve::ModelVocabulary& model,
               const std::shared_ptr<const tpserve::grammar::CompiledGrammar>& grammar) {
  json out = {{"file", path}};
  auto text = ReadFile(path);
  if (!text.ok()) return out.update({{"error", std::string(text.status().message())}}), out;
  const std::vector<int32_t> ids = model.tokenizer->Encode(*text, false, tpserve::SpecialTokensInText::kAsText);
  const tpserve::TokenCheck check = tpserve::CheckTokens(grammar, model.vocabulary->size(), ids);
  out["tokens"] = ids.size();
  out["accepted"] = check.accepted;
  if (!check.accepted) {
    const auto at = static_cast<size_t>(check.rejected_at);
    json where = {{"token_index", at}};
    size_t offset = 0;
    for (size_t i = 0; i < at; ++i) offset += model.vocabulary->bytes(ids[i]).size();
    where["byte_offset"] = offset;
    if (at < ids.size()) {
      where["token_id"] = ids[at];
      where["token"] = model.vocabulary->bytes(ids[at]);
      where["reason"] = "token not allowed";
    } else {
      where["reason"] = "the end is not allowed: the output is incomplete";
    }
    if (!check.gave_up.empty()) where["reason"] = check.gave_up;  // the mask there: the grammar gave up
    out["rejected"] = where;
  }
  out["mask_us"] = {{"count", check.mask_us.size()},
                    {"p50", tpserve::Percentile(check.mask_us, 0.5)},
                    {"p99", tpserve::Percentile(check.mask_us, 0.99)},
                    {"max", tpserve::Percentile(check.mask_us, 1.0)}};
  return out;
}

void PrintText(const json& report) {
  std::cout << absl::StrFormat("compiled %s in %.3f ms (%d rules, %d terminals)\n", report["kind"].get<std::string>(),
                               report["compile_ms"].get<double>(), report["rules"].get<int>(),
                               report["terminals"].get<int>());
  for (const json& c : report["checks"]) {
    std::cout << "check " << c["file"].get<std::string>() << ": ";
    if (c.contains("error")) {
      std::cout << c["error"].get<std::string>() << "\n";
      continue;
    }
    if (c["accepted"].get<bool>()) {
      std::cout << "accepted";
    } else {
      const json& r = c["rejected"];
      std::cout << "rejected at token " << r["token_index"] << " (byte " << r["byte_offset"] << ")";
      const std::string reason = r["reason"].get<std::string>();
      if (reason != "token not allowed" && reason.rfind("the end is not allowed", 0) != 0) {
        std::cout << ": " << reason;  // the grammar gave up on the mask there
      } else if (r.contains("token")) {
        std::cout << ": id " << r["token_id"] << " " << Quoted(r["token"]) << " not allowed";
      } else {
        std::cout << ": the end is not allowed (incomplete)";
      }
    }
    const json& m = c["mask_us"];
    std::cout << absl::StrFormat(", %d tokens; mask p50 %.1f us, p99 %.1f us, max %.1f us\n", c["tokens"].get<int>(),
                                 m["p50"].get<double>(), m["p99"].get<double>(), m["max"].get<double>());
  }
}

const char* KindName(tpserve::grammar::GrammarSpec::Kind kind) {
  using K = tpserve::grammar::GrammarSpec::Kind;
  switch (kind) {
    case K::kJsonSchema: return "json-schema";
    case K::kJsonObject: return "json-object";
    case K::kRegex: return "regex";
    case K::kEbnf: return "ebnf";
    case K::kChoice: return "choice";
  }
  return "?";
}

}  // namespace

int main(int argc, char** argv) {
  tpserve::InitToolUsage(argc, argv,
      "tpserve-grammar --model DIR (--json-schema FILE | --json-object | --regex RE | --ebnf FILE |\n"
      "                --choice A,B,...) [--check FILE ...] [--json] [--dump]: the grammar engine alone.\n"
      "\n"
      "Compiles the constraint against the model's tokenizer and prints the compile time. Each --check\n"
      "file's text is tokenized as the service would and held against the grammar token by token:\n"
      "accepted (every token allowed in turn, then the end), or where it is rejected; with the mask\n"
      "time per token (p50/p99/max). Exit status: 0 when it compiles and every check is accepted,\n"
      "1 when a check is rejected, 2 for a usage error or a constraint that does not compile.\n"
      "\n"
      "Examples:\n"
      "  tpserve-grammar --model /models/qwen3 --json-schema tool.json --check answer.json\n"
      "  tpserve-grammar --model /models/llama3 --regex '[0-9]{3}-[0-9]{4}' --json\n",
      {__FILE__});
  const std::vector<std::string> positional = tpserve::ParseFlagsWithDashes(argc, argv);
  std::vector<std::string> checks = absl::GetFlag(FLAGS_check);
  for (size_t i = 1; i < positional.size(); ++i) checks.push_back(positional[i]);
  const bool as_json = absl::GetFlag(FLAGS_json);
  auto fail = [&](const std::string& message, int code) {
    if (as_json) std::cout << json{{"error", message}}.dump() << "\n";
    std::cerr << "tpserve-grammar: " << message << "\n";
    return code;
  };
  if (absl::GetFlag(FLAGS_model).empty()) return fail("--model is required (a folder holding tokenizer.json)", 2);
  auto spec = SpecFromFlags();
  if (!spec.ok()) return fail(std::string(spec.status().message()), 2);
  auto model = tpserve::LoadModelVocabulary(absl::GetFlag(FLAGS_model));
  if (!model.ok()) return fail(std::string(model.status().message()), 2);
  const auto start = std::chrono::steady_clock::now();
  auto grammar = tpserve::grammar::Compile(*spec, model->vocabulary);
  const double compile_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  if (!grammar.ok()) return fail(absl::StrCat("does not compile: ", grammar.status().message()), 2);
  json report = {{"kind", KindName(spec->kind)}, {"compile_ms", compile_ms},
                 {"rules", (*grammar)->grammar.rules.size()}, {"terminals", (*grammar)->grammar.terminals.size()},
                 {"checks", json::array()}};
  if (absl::GetFlag(FLAGS_dump)) report["dump"] = (*grammar)->grammar.Dump();
  bool all_accepted = true;
  for (const std::string& path : checks) {
    report["checks"].push_back(CheckFile(path, *model, *grammar));
    all_accepted = all_accepted && report["checks"].back().value("accepted", false);
  }
  if (as_json) {
    std::cout << report.dump(-1, ' ', false, json::error_handler_t::replace) << "\n";
  } else {
    if (report.contains("dump")) std::cout << report["dump"].get<std::string>();
    PrintText(report);
  }
  return all_accepted ? 0 : 1;
}
