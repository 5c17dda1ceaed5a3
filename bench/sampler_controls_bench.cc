// Token-level controls on the host sampler (tpserve::Sample, rank 0 of a CPU
// worker): time per step of 64 rows over a Llama 3 vocabulary (128,256) with
// logit_bias of 300 entries, allowed_token_ids of 1,000 and both, against the
// same rows without controls, measured in the same run (issue 29: goal <= 5%
// more). Configurations alternate round by round, so a change of load hits
// them alike; each is the median over its rounds. A second table: the host
// side of the CUDA sampler's step for the same rows (cuda/sampling_inputs.h's
// AppendRowEntries: what CudaSampler::StageRows builds and uploads), which a
// GPU step pays on the CPU before its kernel. Markdown on stdout.
//
//   sampler_controls_bench [--rounds N]   (default 15)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "cuda/sampling_inputs.h"
#include "sampling/sampler.h"
#include "sampling/token_controls.h"

namespace {

using tpserve::SamplingParams;
using tpserve::SequenceSamplingState;
using tpserve::TokenControls;

constexpr int kRows = 64;
constexpr int32_t kVocab = 128256;

struct Config {
  std::string name;
  std::shared_ptr<const TokenControls> controls;
};

std::vector<Config> Configs(std::mt19937_64& rng) {
  std::uniform_int_distribution<int32_t> any(0, kVocab - 1);
  std::uniform_real_distribution<float> bias(-5.0f, 5.0f);
  TokenControls biased, allowed;
  while (biased.logit_bias.size() < 300) {
    biased.logit_bias.emplace_back(any(rng), bias(rng));
    tpserve::NormalizeTokenControls(biased);
  }
  while (allowed.allowed_token_ids.size() < 1000) {
    allowed.allowed_token_ids.push_back(any(rng));
    tpserve::NormalizeTokenControls(allowed);
  }
  TokenControls both = allowed;
  both.logit_bias = biased.logit_bias;
  auto shared = [](const TokenControls& c) { return std::make_shared<const TokenControls>(c); };
  return {{"none", nullptr},
          {"logit_bias 300", shared(biased)},
          {"allowed_token_ids 1000", shared(allowed)},
          {"both", shared(both)}};
}

// One step of kRows rows; returns its milliseconds.
double StepMs(const std::vector<float>& logits, std::vector<std::unique_ptr<SequenceSamplingState>>& seqs) {
  std::vector<SequenceSamplingState*> ptrs;
  for (auto& s : seqs) ptrs.push_back(s.get());
  const auto start = std::chrono::steady_clock::now();
  const std::vector<tpserve::SampledToken> out = tpserve::Sample(logits, kVocab, kVocab, ptrs);
  const std::chrono::duration<double, std::milli> ms = std::chrono::steady_clock::now() - start;
  if (out.size() != static_cast<size_t>(kRows)) std::abort();
  return ms.count();
}

// The CUDA sampler's host staging of one step of kRows rows; returns its microseconds.
double StagingUs(std::vector<std::unique_ptr<SequenceSamplingState>>& seqs,
                 std::vector<tpserve::sampling::PenaltyEntry>& staging) {
  const auto start = std::chrono::steady_clock::now();
  staging.clear();
  for (auto& s : seqs) tpserve::sampling::AppendRowEntries(*s, kVocab, staging);
  const std::chrono::duration<double, std::micro> us = std::chrono::steady_clock::now() - start;
  return us.count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int rounds = 15;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--rounds") == 0) rounds = std::max(3, std::atoi(argv[i + 1]));
  }
  std::mt19937_64 rng(29);
  std::vector<float> logits(static_cast<size_t>(kRows) * kVocab);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  for (float& x : logits) x = normal(rng);
  const std::vector<Config> configs = Configs(rng);

  struct Mix {
    const char* name;
    float temperature, top_p;
  };
  std::printf("| params | controls | ms per step (64 rows, median) | vs none |\n|---|---|---|---|\n");
  for (const Mix& mix : {Mix{"greedy", 0.0f, 1.0f}, Mix{"T 0.8, top_p 0.95", 0.8f, 0.95f}}) {
    std::vector<std::vector<std::unique_ptr<SequenceSamplingState>>> seqs(configs.size());
    for (size_t c = 0; c < configs.size(); ++c) {
      for (int s = 0; s < kRows; ++s) {
        SamplingParams p;
        p.temperature = mix.temperature;
        p.top_p = mix.top_p;
        p.seed = static_cast<uint64_t>(s);
        p.controls = configs[c].controls;
        seqs[c].push_back(std::make_unique<SequenceSamplingState>(p));
      }
      StepMs(logits, seqs[c]);  // warm-up: scratch buffers, caches
    }
    std::vector<std::vector<double>> ms(configs.size());
    for (int r = 0; r < rounds; ++r) {
      for (size_t c = 0; c < configs.size(); ++c) ms[c].push_back(StepMs(logits, seqs[c]));
    }
    const double base = Median(ms[0]);
    for (size_t c = 0; c < configs.size(); ++c) {
      const double m = Median(ms[c]);
      std::printf("| %s | %s | %.3f | %.3fx |\n", mix.name, configs[c].name.c_str(), m, m / base);
    }
  }
  std::printf("\n| controls | CUDA sampler host staging, 64 rows (us, median) | entries |\n|---|---|---|\n");
  std::vector<tpserve::sampling::PenaltyEntry> staging;
  for (const Config& c : configs) {
    std::vector<std::unique_ptr<SequenceSamplingState>> seqs;
    for (int s = 0; s < kRows; ++s) {
      SamplingParams p;
      p.controls = c.controls;
      seqs.push_back(std::make_unique<SequenceSamplingState>(p));
    }
    std::vector<double> us;
    for (int r = 0; r < 4 * rounds; ++r) us.push_back(StagingUs(seqs, staging));
    std::printf("| %s | %.1f | %zu |\n", c.name.c_str(), Median(us), staging.size());
  }
  return 0;
}
