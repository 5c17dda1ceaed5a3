// One scheduler + block-manager iteration (Schedule, then OnStepDone with one
// sampled token per sequence) with N running sequences in decode: the
// coordinator's own cost per step, which must stay far below a GPU step
// (target: <= 50 us at 256 sequences). The baseline in the same run is the
// same loop over the same sequences doing only the OnStepDone bookkeeping.
#include <benchmark/benchmark.h>

#include <numeric>
#include <vector>

#include "scheduler/block_manager.h"
#include "scheduler/scheduler.h"

namespace tpserve {
namespace {

constexpr int kPromptLen = 512;
constexpr int kDecodeSteps = 256;  // then the sequences are replaced, so they stay ~512-768 long

struct Setup {
  BlockManager blocks{1 << 16, 16};
  Scheduler sched{blocks, {.max_num_batched_tokens = 1 << 20, .max_num_seqs = 1024, .max_queue = 4096}};
  std::vector<std::pair<uint64_t, int32_t>> sampled;
  int num_seqs;
  uint64_t next_id = 0;

  explicit Setup(int n) : num_seqs(n) { Refill(); }

  // Finishes every sequence and admits a fresh set, prefilled, so the measured
  // iterations are decodes of sequences with a 512-token context.
  void Refill() {
    for (auto& [id, token] : sampled) sched.Finish(id);
    sampled.clear();
    for (int i = 0; i < num_seqs; ++i) {
      std::vector<int32_t> prompt(kPromptLen);
      std::iota(prompt.begin(), prompt.end(), static_cast<int32_t>(next_id * 7919));
      (void)sched.Add(next_id, std::move(prompt));
      sampled.emplace_back(next_id++, 1);
    }
    while (sched.num_waiting() > 0) {
      ScheduledStep step = sched.Schedule();
      sched.OnStepDone(step, sampled);
    }
  }
};

void BM_SchedulerDecodeIteration(benchmark::State& state) {
  Setup s(static_cast<int>(state.range(0)));
  int steps = 0;
  for (auto _ : state) {
    ScheduledStep step = s.sched.Schedule();
    benchmark::DoNotOptimize(step.num_tokens);
    s.sched.OnStepDone(step, s.sampled);
    if (++steps == kDecodeSteps) {
      state.PauseTiming();
      s.Refill();
      steps = 0;
      state.ResumeTiming();
    }
  }
  state.counters["seqs"] = static_cast<double>(state.range(0));
}
BENCHMARK(BM_SchedulerDecodeIteration)->Arg(1)->Arg(64)->Arg(256)->Unit(benchmark::kMicrosecond);

// Baseline: the cheapest loop that touches the same sequences, appending one
// token to each (what any scheduler must at least do per step).
void BM_BaselineAppendOnly(benchmark::State& state) {
  Setup s(static_cast<int>(state.range(0)));
  ScheduledStep step = s.sched.Schedule();
  for (auto _ : state) {
    for (auto& seq : step.sequences) {
      seq.seq->tokens.push_back(1);
      seq.seq->tokens.pop_back();
      benchmark::DoNotOptimize(seq.seq->tokens.data());
    }
  }
}
BENCHMARK(BM_BaselineAppendOnly)->Arg(256)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace tpserve

BENCHMARK_MAIN();
