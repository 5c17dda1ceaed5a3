// dp_router_bench: the data-parallel router's cost per request
// (coordinator/dp_router.h: DpRouter::Route on the prompt's block hashes)
// with --prefixes cached prefixes per group. Goal: <= 20 us per request.
// Also timed: hashing a prompt's full blocks (BlockManager::ExtendBlockHashes),
// done once per request before routing, for the router and the chosen
// group's block manager alike: over every request's prompt (from memory) and
// over one prompt again and again (in cache, as one just tokenized is).
//
//   dp_router_bench [--groups 2] [--prefixes 10000] [--prefix-blocks 32]
//                   [--prompt-tokens 1024] [--requests 20000] [--block-size 16]
//
// Each group's index is filled through its observer as a BlockManager would
// (one store per block of each prefix, chained), then every request is a
// prompt of --prompt-tokens tokens: a cached prefix of a random group and a
// fresh tail (hits), or fresh tokens throughout (misses); each is released
// after it is routed, so the loads stay level. Cache-aware, least-load and
// round-robin are timed over the same prompts.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "coordinator/dp_router.h"

namespace {

using tpserve::BlockManager;
using tpserve::DpRouter;
using tpserve::DpRouting;

struct Flags {
  int groups = 2;
  int prefixes = 10000;
  int prefix_blocks = 32;
  int prompt_tokens = 1024;
  int requests = 20000;
  int block_size = 16;
};

Flags Parse(int argc, char** argv) {
  Flags f;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    const int v = std::atoi(argv[i + 1]);
    if (k == "--groups") f.groups = v;
    else if (k == "--prefixes") f.prefixes = v;
    else if (k == "--prefix-blocks") f.prefix_blocks = v;
    else if (k == "--prompt-tokens") f.prompt_tokens = v;
    else if (k == "--requests") f.requests = v;
    else if (k == "--block-size") f.block_size = v;
    else {
      std::fprintf(stderr, "dp_router_bench: unknown flag %s\n", k.c_str());
      std::exit(2);
    }
  }
  return f;
}

std::vector<uint64_t> Hashes(const std::vector<int32_t>& tokens, int block_size) {
  std::vector<uint64_t> h;
  BlockManager::ExtendBlockHashes(tokens, block_size, h);
  return h;
}

// Fills group g's index with the chained hashes of `tokens`' full blocks.
void Store(DpRouter& router, int g, const std::vector<int32_t>& tokens, int block_size) {
  const std::vector<uint64_t> hashes = Hashes(tokens, block_size);
  for (size_t i = 0; i < hashes.size(); ++i) {
    const std::span<const int32_t> block(tokens.data() + i * static_cast<size_t>(block_size),
                                         static_cast<size_t>(block_size));
    router.observer(g)->OnBlockStored(hashes[i], i == 0 ? 0 : hashes[i - 1], block);
  }
}

double TimeRoutes(DpRouter& router, const std::vector<std::vector<uint64_t>>& prompts, int64_t& hits) {
  hits = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (const auto& p : prompts) {
    const tpserve::DpRoute r = router.Route(p);
    hits += r.cached_blocks > 0;
    router.Release(r.group);
  }
  const auto t1 = std::chrono::steady_clock::now();
  return std::chrono::duration<double, std::micro>(t1 - t0).count() / static_cast<double>(prompts.size());
}

}  // namespace

int main(int argc, char** argv) {
  const Flags f = Parse(argc, argv);
  std::mt19937_64 rng(20261203);
  auto token = [&rng] { return static_cast<int32_t>(rng() % 150000); };
  const size_t prefix_tokens = static_cast<size_t>(f.prefix_blocks * f.block_size);
  std::vector<std::vector<std::vector<int32_t>>> prefixes(static_cast<size_t>(f.groups));
  for (auto& group : prefixes) {
    group.resize(static_cast<size_t>(f.prefixes));
    for (auto& p : group) {
      p.resize(prefix_tokens);
      for (int32_t& t : p) t = token();
    }
  }
  // Half the requests extend a cached prefix, half are new.
  std::vector<std::vector<int32_t>> prompts(static_cast<size_t>(f.requests));
  for (size_t i = 0; i < prompts.size(); ++i) {
    auto& p = prompts[i];
    if (i % 2 == 0) {
      const auto& g = prefixes[rng() % prefixes.size()];
      p = g[rng() % g.size()];
    }
    while (p.size() < static_cast<size_t>(f.prompt_tokens)) p.push_back(token());
  }
  std::vector<std::vector<uint64_t>> hashes(prompts.size());
  const auto h0 = std::chrono::steady_clock::now();
  for (size_t i = 0; i < prompts.size(); ++i) hashes[i] = Hashes(prompts[i], f.block_size);
  const double hash_us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - h0).count() /
                         static_cast<double>(prompts.size());
  std::printf("dp_router_bench: %d groups x %d cached prefixes of %d blocks (%d tokens/block), prompts of %d tokens, "
              "%d requests (half extend a cached prefix)\n",
              f.groups, f.prefixes, f.prefix_blocks, f.block_size, f.prompt_tokens, f.requests);
  for (DpRouting policy : {DpRouting::kCacheAware, DpRouting::kLeastLoad, DpRouting::kRoundRobin}) {
    DpRouter router({.groups = f.groups, .policy = policy, .block_size = f.block_size, .load_bound = 16});
    for (int g = 0; g < f.groups; ++g) {
      for (const auto& p : prefixes[static_cast<size_t>(g)]) Store(router, g, p, f.block_size);
    }
    int64_t hits = 0;
    TimeRoutes(router, hashes, hits);  // warm the caches
    const double us = TimeRoutes(router, hashes, hits);
    std::printf("  %-12s %7.2f us/request  (%zu hashes indexed, %lld routed to a cached prefix)%s\n",
                std::string(tpserve::DpRoutingName(policy)).c_str(), us, router.indexed_hashes(),
                static_cast<long long>(hits),
                policy == DpRouting::kCacheAware ? (us <= 20.0 ? "  goal <= 20 us: met" : "  goal <= 20 us: MISSED")
                                                 : "");
  }
  std::printf("  hashing a prompt's blocks once (ExtendBlockHashes, before routing; the chosen group keeps them): "
              "%.2f us/request\n",
              hash_us);
  // The same for a prompt in cache, as one just tokenized is: the hashing
  // itself, without the trip to memory of the prompts above.
  constexpr int kWarmReps = 2000;
  static volatile uint64_t sink = 0;  // the hashes are used: not optimized away
  const auto w0 = std::chrono::steady_clock::now();
  for (int r = 0; r < kWarmReps; ++r) sink = sink ^ Hashes(prompts[0], f.block_size).back();
  const double warm_us =
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - w0).count() / kWarmReps;
  std::printf("  the same, one prompt in cache: %.2f us/request\n", warm_us);
  return 0;
}
