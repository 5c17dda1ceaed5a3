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

// Where each value came from, for the error messages: a variable's name or an override.
struct Origins {
  const char* rank = "rank";
  const char* size = "world size";
  const char* local_rank = "local rank";
  const char* local_size = "local world size";
};

// Takes rank, world size and local sizes from the first launcher whose rank or
// world size is set (none: env keeps its defaults).
absl::Status ReadLauncherEnv(RankEnv& env, std::optional<int>& local_rank, Origins& from) {
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
    from.rank = l.rank;
    from.size = l.size;
    from.local_rank = l.local_rank;
    from.local_size = l.local_size;
    break;
  }
  return absl::OkStatus();
}

void ApplyOverrides(const RankOverrides& overrides, RankEnv& env, std::optional<int>& local_rank,
                    Origins& from) {
  bool overridden = false;
  if (overrides.rank) {
    env.rank = *overrides.rank;
    from.rank = "the rank override";
    overridden = true;
  }
  if (overrides.world_size) {
    env.world_size = *overrides.world_size;
    from.size = "the world size override";
    overridden = true;
  }
  if (overrides.local_rank) {
    local_rank = *overrides.local_rank;
    from.local_rank = "the local rank override";
    overridden = true;
  }
  if (overridden) absl::StrAppend(&env.source, "+override");
}

absl::Status CheckRanks(const RankEnv& env, const Origins& from) {
  if (env.world_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("world size ", env.world_size, " (from ", from.size, ") must be at least 1"));
  }
  if (env.rank < 0 || env.rank >= env.world_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rank ", env.rank, " (from ", from.rank, ") is not below the world size ", env.world_size,
        " (from ", from.size, "); the launcher's variables are inconsistent"));
  }
  if (env.local_rank < 0 || env.local_rank >= env.world_size) {
    return absl::InvalidArgumentError(absl::StrCat("local rank ", env.local_rank, " (from ",
                                                   from.local_rank, ") is not below the world size ",
                                                   env.world_size, " (from ", from.size, ")"));
  }
  if (env.local_world_size > 0 && env.local_rank >= env.local_world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("local rank ", env.local_rank, " (from ", from.local_rank,
                     ") is not below the local world size ", env.local_world_size, " (from ",
                     from.local_size, ")"));
  }
  return absl::OkStatus();
}

// MASTER_ADDR and MASTER_PORT, whatever the source.
absl::Status ReadMaster(RankEnv& env) {
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
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<RankEnv> ReadRankEnv(const RankOverrides& overrides) {
  RankEnv env;
  env.source = "default";
  Origins from;
  std::optional<int> local_rank;
  if (absl::Status st = ReadLauncherEnv(env, local_rank, from); !st.ok()) return st;
  ApplyOverrides(overrides, env, local_rank, from);
  env.local_rank = local_rank.value_or(env.rank);
  if (absl::Status st = CheckRanks(env, from); !st.ok()) return st;
  if (absl::Status st = ReadMaster(env); !st.ok()) return st;
  env.dp_rank = overrides.dp_rank;
  if (!env.dp_rank) {
    absl::StatusOr<std::optional<int>> dp_rank = ReadInt(kDpRankEnv);
    if (!dp_rank.ok()) return dp_rank.status();
    env.dp_rank = *dp_rank;
  }
  return env;
}

}  // namespace tpserve
