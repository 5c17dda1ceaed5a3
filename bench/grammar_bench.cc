// The grammar engine's mask and compile times on real tokenizers (Llama 3,
// Qwen3; scripts/fetch-tokenizers.sh), one thread: every instance of the
// corpus is tokenized as the service would and held against its grammar
// token by token (tools/grammar/token_check.h), timing each mask.
//
//   grammar_bench [--corpus FILE]... [--tokenizers llama3,qwen3] [--json]
//
// Workloads: one per corpus of JSON Schemas with valid instances (each schema
// compiled once, each instance held against it): `json_schema_corpus`
// (tests/grammar/data/: 156 schemas in the shapes OpenAI strict mode, Pydantic,
// zod/MCP and LangChain send) and `tools` (bench/grammar_corpus/schemas.jsonl:
// 104 tool schemas in four variants, with long bounded strings); `gbnf` (every
// instance against llama.cpp's json.gbnf) and `regex` (patterns and samples).
// Masks are timed as serving sees them: the process keeps its caches across
// requests (the first request that reaches a lexer state pays for it).
// Goals (issue 26): mask p50 <= 10 us, p99 <= 500 us; compile p50 <= 2 ms.
// `forced`: masks that allowed exactly one token (jump-forward's share).
// GRAMMAR_BENCH_SLOW=US prints each mask slower than US microseconds with the
// text before it (where the tail comes from).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/strings/str_split.h"
#include "grammar/matcher.h"
#include "tests/tokenizer/reference_env.h"
#include "tools/grammar/model_vocabulary.h"
#include "tools/grammar/token_check.h"

namespace {

using nlohmann::json;
using tpserve::grammar::GrammarSpec;

struct Case {
  std::string workload;
  std::string name;
  GrammarSpec spec;
  std::vector<std::string> texts;
};

struct Figures {
  std::vector<double> mask_us, compile_ms;
  int texts = 0, accepted = 0, compile_errors = 0;
  int64_t forced = 0;  // masks of one token (jump-forward)
  std::vector<std::string> failures;
};

constexpr char kJsonGbnf[] = R"gbnf(root   ::= object
value  ::= object | array | string | number | ("true" | "false" | "null") ws
object ::= "{" ws ( string ":" ws value ("," ws string ":" ws value)* )? "}" ws
array  ::= "[" ws ( value ("," ws value)* )? "]" ws
string ::= "\"" ( [^"\\\x7F\x00-\x1F] | "\\" (["\\bfnrt] | "u" [0-9a-fA-F]{4}) )* "\"" ws
number ::= ("-"? ([0-9] | [1-9] [0-9]{0,15})) ("." [0-9]+)? ([eE] [-+]? [0-9] [0-9]{0,15})? ws
ws ::= | " " | "\n" [ \t]{0,20}
)gbnf";

// A corpus line: {"name", "schema", "instances"}; an instance is the JSON text
// itself (a string) or a value, written compact in member order (dump()).
void ReadCorpus(const std::string& path, std::vector<Case>& cases, Case& gbnf) {
  std::ifstream in(path);
  if (!in) std::cerr << "grammar_bench: cannot read " << path << "\n";
  std::string workload = path.substr(path.rfind('/') + 1);
  workload = workload.substr(0, workload.find('.'));
  if (workload == "schemas") workload = "tools";
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    const nlohmann::ordered_json entry = nlohmann::ordered_json::parse(line);  // keeps property order
    Case c{workload, entry["name"].get<std::string>(), {}, {}};
    c.spec.kind = GrammarSpec::Kind::kJsonSchema;
    c.spec.text = entry["schema"].dump();
    for (const auto& instance : entry["instances"]) {
      c.texts.push_back(instance.is_string() && workload == "tools" ? instance.get<std::string>() : instance.dump());
    }
    for (const std::string& text : c.texts) {
      if (text.front() == '{') gbnf.texts.push_back(text);  // json.gbnf's root is an object
    }
    cases.push_back(std::move(c));
  }
}

std::vector<Case> Corpus(const std::vector<std::string>& paths) {
  std::vector<Case> all;
  Case gbnf{"gbnf", "json.gbnf", {}, {}};
  gbnf.spec.kind = GrammarSpec::Kind::kEbnf;
  gbnf.spec.text = kJsonGbnf;
  for (const std::string& path : paths) ReadCorpus(path, all, gbnf);
  all.push_back(std::move(gbnf));
  auto regex = [&](std::string name, std::string re, std::vector<std::string> texts) {
    Case c{"regex", std::move(name), {}, std::move(texts)};
    c.spec.kind = GrammarSpec::Kind::kRegex;
    c.spec.text = std::move(re);
    all.push_back(std::move(c));
  };
  regex("phone", "\\+?[0-9]{1,3}[ -]?\\(?[0-9]{3}\\)?[ -]?[0-9]{3}[ -]?[0-9]{4}", {"+1 (555) 123-4567", "33 612-345-6789"});
  regex("date", "[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])", {"2024-05-17", "1999-12-31"});
  regex("email", "[a-zA-Z0-9._%+-]+@[a-zA-Z0-9.-]+\\.[a-zA-Z]{2,}", {"alice.smith@example.com", "ops+alerts@mail.example.org"});
  regex("uuid", "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", {"123e4567-e89b-12d3-a456-426614174000"});
  regex("sentences", "([A-Z][a-z]*( [a-z]+)*[.!?] ?){1,5}", {"The quick brown fox jumps over the lazy dog. It was happy!"});
  regex("answer", "(yes|no|maybe), because [a-z ,]{10,200}\\.", {"yes, because the sky is blue and water is wet."});
  return all;
}

void Run(const Case& c, const tpserve::ModelVocabulary& model, Figures& f) {
  const auto start = std::chrono::steady_clock::now();
  auto grammar = tpserve::grammar::Compile(c.spec, model.vocabulary);
  f.compile_ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
  if (!grammar.ok()) {
    ++f.compile_errors;
    f.failures.push_back(c.name + ": " + std::string(grammar.status().message()));
    return;
  }
  for (const std::string& text : c.texts) {
    const std::vector<int32_t> ids = model.tokenizer->Encode(text, false, tpserve::SpecialTokensInText::kAsText);
    const tpserve::TokenCheck check = tpserve::CheckTokens(*grammar, model.vocabulary->size(), ids);
    f.mask_us.insert(f.mask_us.end(), check.mask_us.begin(), check.mask_us.end());
    f.forced += check.forced;
    if (getenv("GRAMMAR_BENCH_SLOW")) {
      for (size_t i = 0; i < check.mask_us.size(); ++i) {
        if (check.mask_us[i] < atof(getenv("GRAMMAR_BENCH_SLOW"))) continue;
        std::string prefix;
        for (size_t k = 0; k < i && k < ids.size(); ++k) prefix += model.vocabulary->bytes(ids[k]);
        fprintf(stderr, "slow %.0f us: %s at token %zu after '%s'\n", check.mask_us[i], c.name.c_str(), i, prefix.c_str());
      }
    }
    ++f.texts;
    if (check.accepted) {
      ++f.accepted;
    } else {
      f.failures.push_back(c.name + ": rejected at token " + std::to_string(check.rejected_at) + " of " + text);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> corpora;
  std::vector<std::string> tokenizers = {"llama3", "qwen3"};
  bool as_json = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--corpus" && i + 1 < argc) {
      corpora.push_back(argv[++i]);
    } else if (arg == "--tokenizers" && i + 1 < argc) {
      tokenizers = absl::StrSplit(argv[++i], ',');
    } else if (arg == "--json") {
      as_json = true;
    } else {
      std::cerr << "usage: grammar_bench [--corpus FILE]... [--tokenizers llama3,qwen3] [--json]\n";
      return 2;
    }
  }
  if (corpora.empty()) {
    corpora = {std::string(TPSERVE_SOURCE_DIR) + "/tests/grammar/data/json_schema_corpus.jsonl",
               std::string(TPSERVE_SOURCE_DIR) + "/bench/grammar_corpus/schemas.jsonl"};
  }
  const std::vector<Case> cases = Corpus(corpora);
  std::vector<std::string> workloads;
  for (const Case& c : cases) {
    if (std::find(workloads.begin(), workloads.end(), c.workload) == workloads.end()) workloads.push_back(c.workload);
  }
  json report = json::array();
  if (!as_json) std::printf("%-8s %-18s %5s %7s %8s %8s %8s %9s %10s %10s %9s %7s\n", "tokens", "workload", "cases", "masks",
                            "p50_us", "p95_us", "p99_us", "max_us", "compile50", "compile99", "accepted", "forced");
  for (const std::string& name : tokenizers) {
    const auto dir = tpserve::testing::RealTokenizerDir(name);
    if (!dir) {
      std::cout << "grammar_bench: skipped " << name << ": " << tpserve::testing::SkipMessage() << "\n";
      continue;
    }
    auto model = tpserve::LoadModelVocabulary(*dir);
    if (!model.ok()) {
      std::cerr << "grammar_bench: " << model.status() << "\n";
      return 1;
    }
    for (const std::string& workload : workloads) {
      Figures f;
      int n = 0;
      for (const Case& c : cases) {
        if (c.workload == workload) ++n, Run(c, *model, f);
      }
      using tpserve::Percentile;
      json row = {{"tokenizer", name}, {"workload", workload}, {"cases", n}, {"masks", f.mask_us.size()},
                  {"mask_us", {{"p50", Percentile(f.mask_us, 0.5)}, {"p95", Percentile(f.mask_us, 0.95)},
                               {"p99", Percentile(f.mask_us, 0.99)}, {"max", Percentile(f.mask_us, 1.0)}}},
                  {"compile_ms", {{"p50", Percentile(f.compile_ms, 0.5)}, {"p99", Percentile(f.compile_ms, 0.99)}}},
                  {"forced", f.forced}, {"texts", f.texts}, {"accepted", f.accepted}, {"compile_errors", f.compile_errors},
                  {"failures", f.failures}};
      report.push_back(row);
      if (as_json) continue;
      std::printf("%-8s %-18s %5d %7zu %8.1f %8.1f %8.1f %9.1f %8.3fms %8.3fms %5d/%-4d %7lld\n", name.c_str(), workload.c_str(),
                  n, f.mask_us.size(), Percentile(f.mask_us, 0.5), Percentile(f.mask_us, 0.95),
                  Percentile(f.mask_us, 0.99), Percentile(f.mask_us, 1.0), Percentile(f.compile_ms, 0.5),
                  Percentile(f.compile_ms, 0.99), f.accepted, f.texts, static_cast<long long>(f.forced));
      for (const std::string& failure : f.failures) std::printf("    %s\n", failure.substr(0, 300).c_str());
    }
  }
  if (as_json) std::cout << report.dump(2) << "\n";
  return 0;
}
