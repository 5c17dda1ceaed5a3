#include "launcher/launch_cli.h"

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace tpserve {
namespace {

absl::StatusOr<int> ParseInt(const std::string& flag, const std::string& value, int lo, int hi) {
  int v = 0;
  if (!absl::SimpleAtoi(value, &v) || v < lo || v > hi) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, " must be an integer in ", lo, "..", hi, " (got '", value, "')"));
  }
  return v;
}

}  // namespace

std::string LaunchUsage() {
  return "usage: tpserve-launch --nproc-per-node N [--nnodes G --node-rank R] [--master-addr ADDR]\n"
         "                      [--master-port PORT] [--dp-rank G]\n"
         "                      [--log-dir DIR] [--no-prefix] [--grace-seconds S] -- PROGRAM ARGS...\n"
         "Starts N copies of PROGRAM with the torchrun environment (RANK, LOCAL_RANK, WORLD_SIZE,\n"
         "LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT, ...; TPSERVE_LAUNCHER=1). SIGINT/SIGTERM/SIGHUP\n"
         "are forwarded to every rank (SIGKILL after the grace period; a second signal kills at once).\n"
         "When one rank fails the others are stopped and the launcher exits with that rank's status.\n"
         "  --nproc-per-node N   ranks to start (required)\n"
         "  --nnodes G           nodes in the job, one tpserve-launch on each (default 1): WORLD_SIZE = G * N\n"
         "  --node-rank R        this node's place, 0..G-1 (default 0): RANK = R * N + LOCAL_RANK\n"
         "  --master-addr ADDR   MASTER_ADDR for the ranks (default 127.0.0.1)\n"
         "  --master-port PORT   MASTER_PORT for the ranks (default 29500)\n"
         "  --dp-rank G          the data-parallel group (tpserve-coordinator --dp) the ranks join:\n"
         "                       TPSERVE_DP_RANK=G; the coordinator refuses them on another group's port\n"
         "  --log-dir DIR        write DIR/rank-R.stdout and DIR/rank-R.stderr instead of the terminal\n"
         "  --no-prefix          pass the ranks' output through without the \"[rank R] \" prefix\n"
         "  --grace-seconds S    time between SIGTERM and SIGKILL when stopping (default 10)\n"
         "\n"
         "Example:\n"
         "  tpserve-launch --nproc-per-node 4 -- tpserve-worker --coordinator 127.0.0.1:50052\n"
         "Two hosts, tp 2 (on each host, R = 0 and 1; the coordinator runs --tp 2 --worker-listen HOST0:50052):\n"
         "  tpserve-launch --nnodes 2 --node-rank R --nproc-per-node 1 -- \\\n"
         "      tpserve-worker --coordinator HOST0:50052 --comm-host THIS_HOST_ADDR\n";
}

absl::StatusOr<LaunchCommand> ParseLaunchArgs(const std::vector<std::string>& args) {
  LaunchCommand cmd;
  LaunchOptions& o = cmd.options;
  bool have_nproc = false;
  size_t i = 0;
  for (; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--") {
      ++i;
      break;
    }
    if (arg == "-h" || arg == "--help") {
      cmd.help = true;
      return cmd;
    }
    if (arg.rfind("--", 0) != 0) break;  // the program
    std::string flag = arg.substr(2), value;
    const size_t eq = flag.find('=');
    const bool inline_value = eq != std::string::npos;
    if (inline_value) {
      value = flag.substr(eq + 1);
      flag.resize(eq);
    }
    std::replace(flag.begin(), flag.end(), '_', '-');
    if (flag == "no-prefix") {
      if (inline_value) return absl::InvalidArgumentError("--no-prefix takes no value");
      o.output = OutputMode::kInherit;
      continue;
    }
    if (flag != "nproc-per-node" && flag != "nnodes" && flag != "node-rank" && flag != "master-addr" && flag != "master-port" && flag != "log-dir" &&
        flag != "grace-seconds" && flag != "dp-rank") {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag '", arg, "' (see --help)"));
    }
    if (!inline_value) {
      if (i + 1 >= args.size()) return absl::InvalidArgumentError(absl::StrCat("--", flag, " needs a value"));
      value = args[++i];
    }
    if (flag == "nproc-per-node") {
      absl::StatusOr<int> n = ParseInt(flag, value, 1, 4096);
      if (!n.ok()) return n.status();
      o.nproc_per_node = *n;
      have_nproc = true;
    } else if (flag == "nnodes") {
      absl::StatusOr<int> g = ParseInt(flag, value, 1, 4096);
      if (!g.ok()) return g.status();
      o.nnodes = *g;
    } else if (flag == "node-rank") {
      absl::StatusOr<int> r = ParseInt(flag, value, 0, 4095);
      if (!r.ok()) return r.status();
      o.node_rank = *r;
    } else if (flag == "dp-rank") {
      absl::StatusOr<int> g = ParseInt(flag, value, 0, 4095);
      if (!g.ok()) return g.status();
      o.dp_rank = *g;
    } else if (flag == "master-addr") {
      if (value.empty()) return absl::InvalidArgumentError("--master-addr must not be empty");
      o.master_addr = value;
    } else if (flag == "master-port") {
      absl::StatusOr<int> p = ParseInt(flag, value, 1, 65535);
      if (!p.ok()) return p.status();
      o.master_port = *p;
    } else if (flag == "log-dir") {
      if (value.empty()) return absl::InvalidArgumentError("--log-dir must not be empty");
      o.log_dir = value;
    } else {  // grace-seconds
      double s = 0;
      if (!absl::SimpleAtod(value, &s) || !(s >= 0) || s > 86400) {
        return absl::InvalidArgumentError(
            absl::StrCat("--grace-seconds must be a number of seconds in 0..86400 (got '", value, "')"));
      }
      o.grace = absl::Seconds(s);
    }
  }
  if (!have_nproc) return absl::InvalidArgumentError("--nproc-per-node N is required");
  if (o.node_rank >= o.nnodes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--node-rank ", o.node_rank, " is not a node of --nnodes ", o.nnodes, ": give each of the ", o.nnodes,
        " launchers its own --node-rank in 0..", o.nnodes - 1, " (or raise --nnodes)"));
  }
  if (!o.log_dir.empty()) o.output = OutputMode::kLogFiles;
  o.argv.assign(args.begin() + static_cast<std::ptrdiff_t>(i), args.end());
  if (o.argv.empty()) return absl::InvalidArgumentError("no program given: put it after '--'");
  return cmd;
}

}  // namespace tpserve
