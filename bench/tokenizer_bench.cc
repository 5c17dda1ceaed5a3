// Tokenizer encode throughput, single-threaded, next to the node reference
// (@lenml/tokenizers, transformers.js's port of HF tokenizers) on the same text
// in the same run. Needs scripts/fetch-tokenizers.sh; says so and exits 0 without.
//
//   tokenizer_bench [--mb N] [--passes P]
//
// The text: >= N MB (default 1.5) of documents of 1-8 KB mixing the conformance
// corpus (English, code, CJK, Arabic, Hindi, emoji, digits, whitespace runs) with
// random made-up words, so the per-word BPE cache also sees misses.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/tokenizer/reference_env.h"
#include "tokenizer/tokenizer.h"

namespace fs = std::filesystem;

namespace {

std::vector<std::string> MakeDocs(double mb) {
  std::vector<std::string> corpus;
  std::ifstream in(fs::path(TPSERVE_SOURCE_DIR) / "tests/tokenizer/conformance_corpus.jsonl");
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty()) corpus.push_back(nlohmann::json::parse(line).at("text").get<std::string>());
  }
  const std::vector<std::string> alphabet = {"a", "e", "i", "o", "u", "n", "r", "s", "t", "l", "k", "m", "z",
                                             "é", "ö", "ß", "ж", "λ", "你", "好", "世", "の", "한"};
  std::mt19937 rng(1234);
  std::vector<std::string> docs;
  size_t total = 0;
  while (total < mb * 1e6) {
    std::string doc;
    const size_t want = std::uniform_int_distribution<size_t>(1000, 8000)(rng);
    while (doc.size() < want) {
      if (rng() % 10 < 7 || corpus.empty()) {
        std::string word;
        for (size_t k = std::uniform_int_distribution<size_t>(2, 10)(rng); k > 0; --k) word += alphabet[rng() % alphabet.size()];
        doc += " " + word;
      } else {
        doc += " " + corpus[rng() % corpus.size()];
      }
    }
    total += doc.size();
    docs.push_back(std::move(doc));
  }
  return docs;
}

}  // namespace

int main(int argc, char** argv) {
  double mb = 1.5;
  int passes = 3;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--mb") mb = std::atof(argv[i + 1]);
    if (a == "--passes") passes = std::max(1, std::atoi(argv[i + 1]));
  }
  if (!tpserve::testing::HaveNodeReference()) {
    std::cout << "tokenizer_bench: skipped: " << tpserve::testing::SkipMessage() << "\n";
    return 0;
  }
  const std::vector<std::string> docs = MakeDocs(mb);
  size_t bytes = 0;
  for (const auto& d : docs) bytes += d.size();
  const fs::path docs_file = fs::temp_directory_path() / ("tokenizer_bench_docs_" + std::to_string(::getpid()) + ".json");
  std::ofstream(docs_file) << nlohmann::json(docs).dump();
  std::printf("tokenizer_bench: %zu documents, %.2f MB, single thread, best of %d passes (tpserve cold = first pass)\n",
              docs.size(), static_cast<double>(bytes) / 1e6, passes);
  std::printf("%-8s %-10s %10s %12s %12s\n", "model", "impl", "MB/s", "tokens/s", "tokens");
  int status = 0;
  for (const std::string model : {"llama3", "qwen3"}) {
    const auto dir = tpserve::testing::RealTokenizerDir(model);
    if (!dir) continue;
    auto tok = tpserve::Tokenizer::Load(*dir);
    if (!tok.ok()) {
      std::cerr << tok.status() << "\n";
      return 1;
    }
    double cold = 0, best = 1e30;
    size_t tokens = 0;
    for (int p = 0; p < passes; ++p) {
      tokens = 0;
      const auto t0 = std::chrono::steady_clock::now();
      for (const auto& d : docs) tokens += (*tok)->Encode(d, false).size();
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (p == 0) cold = s;
      best = std::min(best, s);
    }
    const fs::path out = fs::temp_directory_path() / ("tokenizer_bench_node_" + std::to_string(::getpid()) + ".json");
    const std::string cmd = "node " + tpserve::testing::Quote(fs::path(TPSERVE_SOURCE_DIR) / "bench/tokenizer_bench.js") +
                            " " + tpserve::testing::Quote(tpserve::testing::NodeModules()) + " " +
                            tpserve::testing::Quote(*dir / "tokenizer.json") + " " +
                            tpserve::testing::Quote(*dir / "tokenizer_config.json") + " " +
                            tpserve::testing::Quote(docs_file) + " " + std::to_string(passes) + " > " +
                            tpserve::testing::Quote(out);
    if (std::system(cmd.c_str()) != 0) {
      std::cerr << "tokenizer_bench: node reference failed: " << cmd << "\n";
      return 1;
    }
    const auto node = nlohmann::json::parse(std::ifstream(out));
    fs::remove(out);
    const auto secs = node.at("seconds").get<std::vector<double>>();
    const double node_best = *std::min_element(secs.begin(), secs.end());
    const auto node_tokens = node.at("tokens").get<size_t>();
    const double mbytes = static_cast<double>(bytes) / 1e6;
    std::printf("%-8s %-10s %10.2f %12.0f %12zu\n", model.c_str(), "tpserve", mbytes / best, tokens / best, tokens);
    std::printf("%-8s %-10s %10.2f %12.0f %12zu\n", model.c_str(), "(cold)", mbytes / cold, tokens / cold, tokens);
    std::printf("%-8s %-10s %10.2f %12.0f %12zu\n", model.c_str(), "node-ref", mbytes / node_best,
                node_tokens / node_best, node_tokens);
    std::printf("%-8s ratio tpserve/node: %.1fx (cold %.1fx)\n", model.c_str(), node_best / best, node_best / cold);
    if (node_tokens != tokens) {
      std::printf("%-8s WARNING: token counts differ (tpserve %zu, node %zu)\n", model.c_str(), tokens, node_tokens);
      status = 1;
    }
  }
  fs::remove(docs_file);
  return status;
}
