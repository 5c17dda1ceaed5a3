// proposer_bench: the speculative proposers' cost per step (Append of the new
// token + Propose) at 32k tokens of history, and how much of what they propose
// a greedy verifier would accept, on text the project ships.
//
//   proposer_bench [--history 32768] [--steps 4096] [--k 4]
//
// Proposers: ngram 2..4 over a window of the whole history; suffix (depth 24,
// Arctic's default) over a window of the whole history (w32k) and of the
// default 4096 tokens (w4k), and w4k with a SuffixCache holding five other
// files of the project as earlier outputs.
//
// Text becomes tokens by a word-level split (runs of letters, digits and '_';
// every other non-blank character; each line break with the indentation after
// it), each distinct piece one id: a stand-in for a model's tokenizer with the
// same repetition. Scenarios (each: a prompt of --history tokens, then --steps
// tokens of "output", one step per token):
//   quote:  the output repeats a passage of the prompt (summarisation with
//           quotes, multi-turn chat resending its history)
//   edit:   the prompt holds an old revision of docs/architecture.md and
//           worker/step_runner.cc (from git; skipped without .git), the output
//           is the current one (code editing)
//   fresh:  the output is text that is not in the prompt
// Acceptance: per step the proposal is checked against the tokens that really
// follow, the longest equal prefix accepted (greedy verification; the step
// then still advances by one token, so every position is proposed for).
// Reported, not a goal. The cost is the goal: <= 20 us per sequence per step.
// MB: what the proposer holds for its sequence once the prompt is in (the
// suffix cache, shared by the server's sequences, is not counted).
#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>

#include "speculative/proposer.h"

namespace {

using namespace tpserve::speculative;

class WordTokenizer {
 public:
  std::vector<int32_t> Encode(const std::string& text) {
    std::vector<int32_t> out;
    size_t i = 0;
    auto word = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; };
    while (i < text.size()) {
      size_t j = i + 1;
      if (word(text[i])) {
        while (j < text.size() && word(text[j])) ++j;
      } else if (text[i] == '\n') {
        while (j < text.size() && text[j] == ' ') ++j;
      } else if (text[i] == ' ') {
        i = j;
        continue;
      }
      auto [it, fresh] = ids_.try_emplace(text.substr(i, j - i), static_cast<int32_t>(ids_.size()));
      out.push_back(it->second);
      i = j;
    }
    return out;
  }

 private:
  std::unordered_map<std::string, int32_t> ids_;
};

std::string ReadFile(const std::string& rel) {
  std::ifstream in(std::string(TPSERVE_SOURCE_DIR) + "/" + rel);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string GitShow(const std::string& rev_path) {
  const std::string cmd = "git -C " + std::string(TPSERVE_SOURCE_DIR) + " show " + rev_path + " 2>/dev/null";
  std::string out;
  if (FILE* f = popen(cmd.c_str(), "r")) {
    char buf[65536];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
    pclose(f);
  }
  return out;
}

std::string GitOldestRevision(const std::string& path) {
  const std::string cmd = "git -C " + std::string(TPSERVE_SOURCE_DIR) +
                          " log --format=%H --reverse -- " + path + " 2>/dev/null | head -n 1";
  std::string out;
  if (FILE* f = popen(cmd.c_str(), "r")) {
    char buf[128];
    while (fgets(buf, sizeof buf, f) != nullptr) out += buf;
    pclose(f);
  }
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
  return out;
}

// Prompt tokens followed by output tokens; proposals are made for the outputs.
struct Scenario {
  std::string name;
  std::vector<int32_t> prompt, output;
};

void Measure(const Scenario& s, const std::string& label, Proposer& p, int32_t k) {
  p.Append(s.prompt);
  const double mb = static_cast<double>(p.memory_bytes()) / (1 << 20);  // after the prompt: the window is full
  std::vector<int32_t> out(static_cast<size_t>(k));
  std::vector<double> us;
  us.reserve(s.output.size());
  int64_t proposed = 0, accepted = 0, steps_with = 0;
  for (size_t i = 0; i < s.output.size(); ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    p.Append(std::span<const int32_t>(&s.output[i], 1));
    const int32_t n = p.Propose(out);
    us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
    proposed += n;
    steps_with += n > 0;
    for (int32_t j = 0; j < n && i + 1 + j < s.output.size() && out[j] == s.output[i + 1 + j]; ++j) ++accepted;
  }
  std::vector<double> sorted = us;
  std::sort(sorted.begin(), sorted.end());
  double mean = 0;
  for (double u : us) mean += u;
  mean /= static_cast<double>(us.size());
  std::printf("%-6s %-16s %9.2f %9.2f %9.2f %10.1f%% %9.3f %10.2f %8.1f\n", s.name.c_str(), label.c_str(), mean,
              sorted[sorted.size() / 2], sorted[sorted.size() * 99 / 100],
              proposed ? 100.0 * static_cast<double>(accepted) / static_cast<double>(proposed) : 0.0,
              static_cast<double>(accepted) / static_cast<double>(s.output.size()),
              static_cast<double>(proposed) / static_cast<double>(s.output.size()), mb);
}

}  // namespace

int main(int argc, char** argv) {
  int64_t history = 32768, steps = 4096;
  int32_t k = 4;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--history") history = std::stoll(argv[i + 1]);
    else if (flag == "--steps") steps = std::stoll(argv[i + 1]);
    else if (flag == "--k") k = std::stoi(argv[i + 1]);
    else {
      std::fprintf(stderr, "proposer_bench: unknown option %s\n", argv[i]);
      return 2;
    }
  }
  WordTokenizer tok;
  // The project's own text: enough for any --history (repeated if need be).
  std::vector<int32_t> corpus;
  for (const char* f : {"docs/architecture.md", "README.md", "worker/step_runner.cc", "coordinator/engine_loop.cc",
                        "scheduler/scheduler.cc", "backend/cpu_backend.cc", "worker/model.cc", "cuda/cuda_backend.cc"}) {
    const std::vector<int32_t> t = tok.Encode(ReadFile(f));
    corpus.insert(corpus.end(), t.begin(), t.end());
  }
  while (static_cast<int64_t>(corpus.size()) < history + 2 * steps) corpus.insert(corpus.end(), corpus.begin(), corpus.end());
  std::vector<std::vector<int32_t>> others;
  for (const char* f : {"worker/engine.cc", "scheduler/block_manager.cc", "coordinator/output_processor.cc",
                        "tools/engine_cli/main.cc", "sampling/sampler.cc"}) {
    others.push_back(tok.Encode(ReadFile(f)));
  }
  std::vector<Scenario> scenarios;
  const std::vector<int32_t> prompt(corpus.begin(), corpus.begin() + history);
  scenarios.push_back({"quote", prompt, std::vector<int32_t>(prompt.begin() + history / 3,
                                                             prompt.begin() + history / 3 + steps)});
  {
    std::vector<int32_t> old_text, new_text;
    for (const char* f : {"docs/architecture.md", "worker/step_runner.cc"}) {
      const std::string rev = GitOldestRevision(f);
      const std::vector<int32_t> o = tok.Encode(rev.empty() ? std::string() : GitShow(rev + ":" + f));
      const std::vector<int32_t> n = tok.Encode(ReadFile(f));
      old_text.insert(old_text.end(), o.begin(), o.end());
      new_text.insert(new_text.end(), n.begin(), n.end());
    }
    if (!old_text.empty()) {
      std::vector<int32_t> p(corpus.end() - std::max<int64_t>(0, history - static_cast<int64_t>(old_text.size())),
                             corpus.end());
      p.insert(p.end(), old_text.begin(), old_text.end());
      if (static_cast<int64_t>(p.size()) > history) p.erase(p.begin(), p.end() - history);
      new_text.resize(std::min<size_t>(new_text.size(), static_cast<size_t>(steps)));
      scenarios.push_back({"edit", p, new_text});
    } else {
      std::printf("(edit skipped: no git history)\n");
    }
  }
  scenarios.push_back({"fresh", prompt, std::vector<int32_t>(corpus.end() - steps, corpus.end())});

  std::printf("proposer_bench: %lld tokens of history, %lld steps, k = %d, one thread\n",
              static_cast<long long>(history), static_cast<long long>(steps), k);
  std::printf("%-6s %-16s %9s %9s %9s %11s %9s %10s %8s\n", "text", "proposer", "mean us", "p50 us", "p99 us",
              "accepted", "acc/step", "prop/step", "MB");
  for (const Scenario& s : scenarios) {
    {
      std::unique_ptr<Proposer> p = MakeProposer(*NgramProposer::Create(
          {.prompt_lookup_min = 2, .prompt_lookup_max = 4, .num_speculative_tokens = k, .max_history = history}));
      Measure(s, "ngram 2..4", *p, k);
    }
    for (int64_t window : {history, int64_t{4096}}) {
      std::unique_ptr<Proposer> p =
          MakeProposer(*SuffixProposer::Create({.num_speculative_tokens = k, .max_history = window}, nullptr));
      Measure(s, "suffix w" + std::to_string(window / 1024) + "k", *p, k);
    }
    {
      // Earlier outputs of the server: other files of the project, none of the scenarios' text.
      SuffixCache cache = *SuffixCache::Create({});
      for (const std::vector<int32_t>& t : others) cache.AddOutput(t);
      std::unique_ptr<Proposer> p =
          MakeProposer(*SuffixProposer::Create({.num_speculative_tokens = k, .max_history = 4096}, &cache));
      Measure(s, "suffix w4k+cache", *p, k);
    }
  }
  return 0;
}
