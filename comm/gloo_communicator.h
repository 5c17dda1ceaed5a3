// GlooCommunicator: collectives over gloo's TCP transport (CPU processes, one
// per rank). CUDA tensors are staged through host memory (copy to a host
// buffer, collective, copy back), so several ranks may share one GPU in tests;
// that path exists only in CUDA builds (TPSERVE_WITH_CUDA).
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "comm/communicator.h"
#include "comm/store.h"

namespace tpserve {

struct GlooOptions {
  // Address this rank listens on; peers connect to it. Loopback by default
  // (all ranks on one host); set a routable host name/IP or `iface` otherwise.
  std::string hostname = "127.0.0.1";
  // Network interface to bind instead of `hostname` (e.g. "eth0"); empty = unused.
  std::string iface;
  // Upper bound for the rendezvous (all ranks must arrive within it) and for
  // every collective (a peer that stops answering is an error after it).
  std::chrono::milliseconds timeout = std::chrono::seconds(60);
};

// Connects rank `rank` of `world_size` through `store` (shared by all ranks;
// use a fresh store or PrefixStore per communicator). world_size 1 needs no
// peers and returns MakeSoloCommunicator(). Errors: INVALID_ARGUMENT for a bad
// rank/world size; DEADLINE_EXCEEDED naming the ranks that never arrived;
// UNAVAILABLE when a peer could not be connected.
absl::StatusOr<std::unique_ptr<Communicator>> MakeGlooCommunicator(
    Store& store, int rank, int world_size, const GlooOptions& options = {});

}  // namespace tpserve
