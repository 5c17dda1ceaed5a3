// The collective checks that every rank of a multi-process test runs: each
// Communicator call against values computed here for every rank (exactly; the
// inputs are small multiples of 1/64, so float sums are exact in any order).
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "comm/communicator.h"

namespace tpserve::comm_test {

struct CheckOptions {
  uint64_t seed = 1;
  Device device = Device::kCpu;  // where the tensors live (kCuda: needs a CUDA build)
  // Waits for enqueued collectives (NcclCommunicator::Synchronize); may be empty.
  std::function<absl::Status()> sync;
  std::string barrier_dir;  // a directory all ranks share, for the Barrier check
  // The communicator promises AllReduceSum adds in rank order, (((t0 + t1) +
  // t2) + ...), whatever the size (gloo does: the CPU backend's batch
  // invariance). Checked bit for bit on inputs whose sums do round.
  bool rank_order_sum = false;
};

// Runs AllReduceSum (f32, bf16), Gather, AllGather, Broadcast (every root) on
// sizes 1, 7, 4097 (and the rank-order sum when promised) and Barrier. Returns
// the number of failed checks, each printed to stderr with the rank, the
// operation, the index and the values.
int RunCollectiveChecks(Communicator& comm, const CheckOptions& options);

// The input value of `rank` at element i of check `which` (seeded, exact in bf16).
float InputValue(uint64_t seed, int which, int rank, int64_t i);

}  // namespace tpserve::comm_test
