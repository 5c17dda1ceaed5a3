#include "comm/rank_env.h"

#include <charconv>
#include <cstdlib>
#include <string_view>

#include "absl/strings/str_cat.h"

namespace tpserve {
namespace {

// The variable names one launcher uses (nullptr: the launcher has none).
struct Launcher {
  const char* name;
  const char* rank;
  const char* size;
  const char* local_rank;
  const char* local_size;
};

constexpr Launcher kLaunchers[] = {
    {"openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
     "OMPI_COMM_WORLD_LOCAL_SIZE"},
    {"pmi", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"},
    {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"},
};

const char* Env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : nullptr;
}

// Parses an optional non-negative integer variable.
absl::StatusOr<std::optional<int>> ReadInt(const char* name) {
  const char* v = Env(name);
  if (v == nullptr) return std::optional<int>();
  std::string_view s(v);
  int value = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (ec != std::errc() || end != s.data() + s.size() || value < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "environment variable ", name, "='", v,
        "' is not a non-negative integer; fix or unset it (it tells this worker its rank)"));
  }
  return std::optional<int>(value);
}

}  // namespace

absl::StatusOr<RankEnv> ReadRankEnv(const RankOverrides& overrides) {
  RankEnv env;
  env.source = "default";
  const char* rank_var = "rank";
  const char* size_var = "world size";
  const char* local_rank_var = "local rank";
  const char* local_size_var = "local world size";
  std::optional<int> local_rank;
  for (const Launcher& l : kLaunchers) {
    absl::StatusOr<std::optional<int>> rank = ReadInt(l.rank);
    if (!rank.ok()) return rank.status();
    absl::StatusOr<std::optional<int>> size = ReadInt(l.size);
    if (!size.ok()) return size.status();
    if (!rank->has_value() && !size->has_value()) continue;
    if (!rank->has_value() || !size->has_value()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the ", l.name, " launcher environment is incomplete: ",
          rank->has_value() ? l.rank : l.size, " is set but ", rank->has_value() ? l.size : l.rank,
          " is not; start the workers with the launcher or set both"));
    }
    absl::StatusOr<std::optional<int>> lrank = ReadInt(l.local_rank);
    if (!lrank.ok()) return lrank.status();
    absl::StatusOr<std::optional<int>> lsize = ReadInt(l.local_size);
    if (!lsize.ok()) return lsize.status();
    env.rank = **rank;
    env.world_size = **size;
    local_rank = *lrank;
    env.local_world_size = lsize->value_or(0);
    env.source = l.name;
    rank_var = l.rank;
    size_var = l.size;
    local_rank_var = l.local_rank;
    local_size_var = l.local_size;
    break;
  }

  bool overridden = false;
  if (overrides.rank) {
    env.rank = *overrides.rank;
    rank_var = "the rank override";
    overridden = true;
  }
  if (overrides.world_size) {
    env.world_size = *overrides.world_size;
    size_var = "the world size override";
    overridden = true;
  }
  if (overrides.local_rank) {
    local_rank = *overrides.local_rank;
    local_rank_var = "the local rank override";
    overridden = true;
  }
  if (overridden) absl::StrAppend(&env.source, "+override");
  env.local_rank = local_rank.value_or(env.rank);

  if (env.world_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("world size ", env.world_size, " (from ", size_var, ") must be at least 1"));
  }
  if (env.rank < 0 || env.rank >= env.world_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rank ", env.rank, " (from ", rank_var, ") is not below the world size ", env.world_size,
        " (from ", size_var, "); the launcher's variables are inconsistent"));
  }
  if (env.local_rank < 0 || env.local_rank >= env.world_size) {
    return absl::InvalidArgumentError(absl::StrCat("local rank ", env.local_rank, " (from ",
                                                   local_rank_var, ") is not below the world size ",
                                                   env.world_size, " (from ", size_var, ")"));
  }
  if (env.local_world_size > 0 && env.local_rank >= env.local_world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("local rank ", env.local_rank, " (from ", local_rank_var,
                     ") is not below the local world size ", env.local_world_size, " (from ",
                     local_size_var, ")"));
  }

  if (const char* addr = Env("MASTER_ADDR")) env.master_addr = addr;
  absl::StatusOr<std::optional<int>> port = ReadInt("MASTER_PORT");
  if (!port.ok()) return port.status();
  if (port->has_value()) {
    if (**port < 1 || **port > 65535) {
      return absl::InvalidArgumentError(
          absl::StrCat("MASTER_PORT=", **port, " is not a TCP port (1..65535)"));
    }
    env.master_port = **port;
  }
  return env;
}

}  // namespace tpserve
