// bench/serving_overhead's full-batch section (issue 32): the coordinator's
// CPU per output token when every step carries a full batch, next to the
// gRPC layer's own cost (bench/grpc_floor.h).
//
// For tp 1 and 2: a tpserve-coordinator with --simulate-step-us 2000 (the
// workers sleep 2 ms a step, no CPU: a stand-in for a GPU) and
// --max-num-seqs 1024 serves batches of 64, 256 and 1024 requests of 400
// greedy tokens (EOS ignored) from one client thread. Per batch, from
// /proc/PID/task of the coordinator: its CPU per output token over all of its
// threads, and that of its busiest thread (named); from the client: the time
// per output token of each request ((last - first chunk) / (tokens - 1)),
// p50 and p99 over the batch. The gRPC floor server gets the same batches at
// the same 2 ms cadence: its CPU per message and per token, and its time per
// token. Batch 1 with a 300 us step adds the time per token of one stream.
// Each figure is the median of the repetitions, [min-max] beside it. With a
// build to compare (--compare FILE), both run side by side, alternating.
#pragma once

#include <filesystem>

#include "nlohmann/json.hpp"

namespace tpserve::bench {

struct FullBatchSettings {
  int repetitions = 3;
  int tokens = 400;  // per request
  std::filesystem::path scratch;
  std::filesystem::path model;
  std::string self;  // this binary, to start the floor server (--grpc-floor-server)
  // Another tpserve-coordinator measured alongside, its runs alternating with
  // this build's ("compare" in the table): before and after under the same load.
  std::string compare_binary;
};

// Measures, prints the table on stdout, and returns the figures as JSON.
nlohmann::json RunFullBatch(const FullBatchSettings& settings);

}  // namespace tpserve::bench
