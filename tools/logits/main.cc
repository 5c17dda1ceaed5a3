// tpserve-logits: greedy continuation of one prompt on one rank (CPU or CUDA
// backend, through the offline Engine: the serving scheduler and step runner),
// with the logits each token was taken from. The input of tools/hf_parity.py,
// which holds them to Hugging Face transformers (or to the numpy reference).
//
//   tpserve-logits MODEL_DIR --prompt-ids 1,2,3 --steps 32 --out PREFIX [--backend cpu|cuda]
//
// Writes PREFIX.json: {"backend", "vocab_size", "prompt_ids", "tokens": [steps ids]}
// and PREFIX.f32: [steps, vocab_size] float32 (little-endian), row i the logits
// token i was the argmax of. EOS does not stop it. Built in engine-only builds
// (scripts/gpu-check.sh); exit status 0, or 1 with the reason on stderr.
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "comm/rank_env.h"
#include "model/config.h"
#include "nlohmann/json.hpp"
#include "rank/rank_start.h"
#include "base/status_macros.h"
#include "worker/engine.h"

namespace tpserve {
namespace {

struct Args {
  std::string model_dir, out, backend = "cpu";
  std::vector<int32_t> prompt;
  int steps = 32;
};

bool ParseArgs(int argc, char** argv, Args& a) {
  if (argc < 2) return false;
  a.model_dir = argv[1];
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--out") {
      a.out = v;
    } else if (k == "--backend") {
      a.backend = v;
    } else if (k == "--steps") {
      if (!absl::SimpleAtoi(v, &a.steps) || a.steps < 1) return false;
    } else if (k == "--prompt-ids") {
      for (absl::string_view t : absl::StrSplit(v, ',', absl::SkipEmpty())) {
        int32_t id = 0;
        if (!absl::SimpleAtoi(t, &id)) return false;
        a.prompt.push_back(id);
      }
    } else {
      return false;
    }
  }
  return !a.out.empty() && !a.prompt.empty();
}

absl::Status Run(const Args& a) {
  TPSERVE_ASSIGN_OR_RETURN(const ModelConfig config, LoadModelConfig(a.model_dir));
  RankStartOptions start;
  start.backend = a.backend;
  start.vocab_size = config.vocab_size;
  start.max_seqs = 1;
  TPSERVE_ASSIGN_OR_RETURN(RankResources rank, StartRank(RankEnv{}, start));
  EngineOptions options;
  options.model.max_num_seqs = 1;
  options.model.max_position = static_cast<int64_t>(a.prompt.size()) + a.steps + 16;
  options.return_logits = true;  // host sampling: every token comes with its logits row
  TPSERVE_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine,
                           Engine::Create(a.model_dir, *rank.backend, *rank.comm, options));
  GenerationRequest request;
  request.prompt = a.prompt;
  request.max_tokens = a.steps;
  request.ignore_eos = true;
  request.sampling.temperature = 0;  // greedy
  TPSERVE_ASSIGN_OR_RETURN(std::vector<GenerationResult> results,
                           engine->Generate(std::span<const GenerationRequest>(&request, 1)));
  const GenerationResult& r = results.at(0);
  std::ofstream f32(a.out + ".f32", std::ios::binary);
  for (const std::vector<float>& row : r.logits) {
    f32.write(reinterpret_cast<const char*>(row.data()), static_cast<std::streamsize>(row.size() * sizeof(float)));
  }
  nlohmann::json j;
  j["backend"] = rank.backend->name();
  j["vocab_size"] = r.logits.empty() ? 0 : r.logits[0].size();
  j["prompt_ids"] = a.prompt;
  j["tokens"] = r.tokens;
  std::ofstream(a.out + ".json") << j.dump() << "\n";
  if (!f32) return absl::InternalError(absl::StrCat("cannot write ", a.out, ".f32"));
  return absl::OkStatus();
}

}  // namespace
}  // namespace tpserve

int main(int argc, char** argv) {
  constexpr char kUsage[] =
      "usage: tpserve-logits MODEL_DIR --prompt-ids 1,2,3 --steps N --out PREFIX [--backend cpu|cuda]\n"
      "Greedy tokens of one prompt on one rank, with the logits each came from (PREFIX.json, PREFIX.f32).\n"
      "Example: tpserve-logits models/qwen3 --prompt-ids 1,2,3 --steps 32 --out /tmp/q --backend cuda\n";
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    }
  }
  tpserve::Args args;
  if (!tpserve::ParseArgs(argc, argv, args)) {
    std::fputs(kUsage, stderr);
    return 2;
  }
  if (absl::Status s = tpserve::Run(args); !s.ok()) {
    std::fprintf(stderr, "tpserve-logits: %s\n", s.ToString().c_str());
    return 1;
  }
  return 0;
}
