// Pure parts of the launcher: the rank environment, the command line, output
// line prefixing, program lookup and the group outcome's messages.
#include <sys/stat.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <random>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "launcher/child_env.h"
#include "launcher/find_program.h"
#include "launcher/launch_cli.h"
#include "launcher/line_prefixer.h"
#include "launcher/rank_exit.h"
#include "tests/launcher/test_process.h"

namespace tpserve {
namespace {

using launcher_test::EnvValue;

std::string Dump(const std::vector<std::string>& env) {
  std::string s;
  for (const std::string& e : env) s += e + "\n";
  return s;
}

TEST(RankEnvironment, SetsTorchrunVariablesAndDropsOuterLaunchers) {
  LaunchOptions o;
  o.nproc_per_node = 7;
  o.master_addr = "10.0.0.3";
  o.master_port = 4111;
  o.extra_env = {"EXTRA=1", "RANK=overridden-by-extra"};
  const std::vector<std::string> parent = {"PATH=/bin", "RANK=99", "OMPI_COMM_WORLD_RANK=5",
                                           "OMPI_COMM_WORLD_SIZE=9", "PMI_RANK=2", "PMI_SIZE=4",
                                           "MPI_LOCALRANKID=1", "MPI_LOCALNRANKS=2", "PMIX_RANK=3",
                                           "OMPI_MCA_pml=ob1", "TORCHELASTIC_RUN_ID=outer", "A=b=c", "broken"};
  const std::string env = Dump(RankEnvironment(o, 5, parent));
  EXPECT_EQ(EnvValue(env, "PATH"), "/bin");
  EXPECT_EQ(EnvValue(env, "A"), "b=c");
  EXPECT_EQ(EnvValue(env, "RANK"), "overridden-by-extra");
  EXPECT_EQ(EnvValue(env, "EXTRA"), "1");
  EXPECT_EQ(EnvValue(env, "LOCAL_RANK"), "5");
  EXPECT_EQ(EnvValue(env, "WORLD_SIZE"), "7");
  EXPECT_EQ(EnvValue(env, "LOCAL_WORLD_SIZE"), "7");
  EXPECT_EQ(EnvValue(env, "GROUP_RANK"), "0");
  EXPECT_EQ(EnvValue(env, "ROLE_RANK"), "5");
  EXPECT_EQ(EnvValue(env, "ROLE_WORLD_SIZE"), "7");
  EXPECT_EQ(EnvValue(env, "MASTER_ADDR"), "10.0.0.3");
  EXPECT_EQ(EnvValue(env, "MASTER_PORT"), "4111");
  EXPECT_EQ(EnvValue(env, "TPSERVE_LAUNCHER"), "1");
  EXPECT_EQ(EnvValue(env, "TORCHELASTIC_RUN_ID"), "none");  // ours, not the outer job's
  for (const char* gone : {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "PMI_RANK", "PMI_SIZE",
                           "MPI_LOCALRANKID", "MPI_LOCALNRANKS", "PMIX_RANK", "OMPI_MCA_pml", "broken"}) {
    EXPECT_FALSE(EnvValue(env, gone).has_value()) << gone;
  }
  // Each name once.
  EXPECT_EQ(env.find("RANK=99"), std::string::npos);
}

// torchrun's static multi-node layout: node 1 of 3 with 4 ranks each holds
// ranks 4..7 of 12; the group variables say which node, the local ones stay local.
TEST(RankEnvironment, PlacesRanksOfOneNodeOfSeveral) {
  LaunchOptions o;
  o.nproc_per_node = 4;
  o.nnodes = 3;
  o.node_rank = 1;
  for (int local = 0; local < 4; ++local) {
    const std::string env = Dump(RankEnvironment(o, local, {"GROUP_RANK=7", "GROUP_WORLD_SIZE=9"}));
    EXPECT_EQ(EnvValue(env, "RANK"), std::to_string(4 + local));
    EXPECT_EQ(EnvValue(env, "ROLE_RANK"), std::to_string(4 + local));
    EXPECT_EQ(EnvValue(env, "LOCAL_RANK"), std::to_string(local));
    EXPECT_EQ(EnvValue(env, "WORLD_SIZE"), "12");
    EXPECT_EQ(EnvValue(env, "ROLE_WORLD_SIZE"), "12");
    EXPECT_EQ(EnvValue(env, "LOCAL_WORLD_SIZE"), "4");
    EXPECT_EQ(EnvValue(env, "GROUP_RANK"), "1");
    EXPECT_EQ(EnvValue(env, "GROUP_WORLD_SIZE"), "3");
    EXPECT_FALSE(EnvValue(env, "NODE_RANK").has_value());  // torchrun sets none
  }
  // The last node of two with one rank each: rank 1 of 2.
  o.nproc_per_node = 1;
  o.nnodes = 2;
  o.node_rank = 1;
  const std::string last = Dump(RankEnvironment(o, 0, {}));
  EXPECT_EQ(EnvValue(last, "RANK"), "1");
  EXPECT_EQ(EnvValue(last, "WORLD_SIZE"), "2");
  EXPECT_EQ(EnvValue(last, "LOCAL_RANK"), "0");
}

TEST(LaunchArgs, ParsesNnodesAndNodeRank) {
  auto cmd = ParseLaunchArgs({"--nnodes=2", "--node_rank", "1", "--nproc-per-node", "1", "--master-addr", "10.9.0.1",
                              "--", "prog"});
  ASSERT_TRUE(cmd.ok()) << cmd.status();
  EXPECT_EQ(cmd->options.nnodes, 2);
  EXPECT_EQ(cmd->options.node_rank, 1);
  EXPECT_EQ(cmd->options.master_addr, "10.9.0.1");
  auto single = ParseLaunchArgs({"--nproc-per-node", "2", "prog"});
  ASSERT_TRUE(single.ok()) << single.status();
  EXPECT_EQ(single->options.nnodes, 1);
  EXPECT_EQ(single->options.node_rank, 0);
}

// --dp-rank G names the data-parallel group the ranks join: TPSERVE_DP_RANK,
// which tpserve-worker reads; without it an inherited value passes through.
TEST(LaunchArgs, DpRankNamesTheGroupInTheRanksEnvironment) {
  auto cmd = ParseLaunchArgs({"--nproc-per-node", "2", "--dp-rank", "3", "--", "prog"});
  ASSERT_TRUE(cmd.ok()) << cmd.status();
  EXPECT_EQ(cmd->options.dp_rank, 3);
  EXPECT_EQ(EnvValue(Dump(RankEnvironment(cmd->options, 1, {"TPSERVE_DP_RANK=7"})), "TPSERVE_DP_RANK"), "3");
  auto none = ParseLaunchArgs({"--nproc-per-node", "2", "prog"});
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_EQ(none->options.dp_rank, -1);
  EXPECT_FALSE(EnvValue(Dump(RankEnvironment(none->options, 0, {})), "TPSERVE_DP_RANK").has_value());
  EXPECT_EQ(EnvValue(Dump(RankEnvironment(none->options, 0, {"TPSERVE_DP_RANK=7"})), "TPSERVE_DP_RANK"), "7");
  auto bad = ParseLaunchArgs({"--nproc-per-node", "2", "--dp-rank", "-1", "--", "prog"});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("--dp-rank"), std::string::npos) << bad.status();
}

TEST(LaunchArgs, ParsesTorchrunStyleFlags) {
  auto cmd = ParseLaunchArgs({"--nproc_per_node=3", "--master-addr", "h", "--master-port=1234", "--grace-seconds",
                              "0.25", "--log-dir", "/tmp/x", "--", "prog", "--nproc-per-node", "9"});
  ASSERT_TRUE(cmd.ok()) << cmd.status();
  EXPECT_EQ(cmd->options.nproc_per_node, 3);
  EXPECT_EQ(cmd->options.master_addr, "h");
  EXPECT_EQ(cmd->options.master_port, 1234);
  EXPECT_EQ(cmd->options.grace, absl::Milliseconds(250));
  EXPECT_EQ(cmd->options.output, OutputMode::kLogFiles);
  EXPECT_EQ(cmd->options.argv, (std::vector<std::string>{"prog", "--nproc-per-node", "9"}));

  auto bare = ParseLaunchArgs({"--nproc-per-node", "2", "--no-prefix", "prog", "-x"});
  ASSERT_TRUE(bare.ok()) << bare.status();
  EXPECT_EQ(bare->options.output, OutputMode::kInherit);
  EXPECT_EQ(bare->options.argv, (std::vector<std::string>{"prog", "-x"}));
  EXPECT_TRUE(ParseLaunchArgs({"--help"})->help);
}

TEST(LaunchArgs, RejectsBadCommandLinesNamingTheFlag) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--", "prog"}, "--nproc-per-node"},
      {{"--nproc-per-node", "0", "--", "p"}, "--nproc-per-node"},
      {{"--nproc-per-node", "x", "--", "p"}, "--nproc-per-node"},
      {{"--nproc-per-node", "2", "--master-port", "70000", "--", "p"}, "--master-port"},
      {{"--nproc-per-node", "2", "--grace-seconds", "-1", "--", "p"}, "--grace-seconds"},
      {{"--nproc-per-node", "2", "--bogus", "--", "p"}, "--bogus"},
      {{"--nproc-per-node", "2", "--"}, "no program"},
      {{"--nproc-per-node"}, "needs a value"},
      {{"--nproc-per-node", "1", "--nnodes", "0", "--", "p"}, "--nnodes"},
      {{"--nproc-per-node", "1", "--node-rank", "-1", "--", "p"}, "--node-rank"},
      {{"--nproc-per-node", "1", "--nnodes", "2", "--node-rank", "2", "--", "p"}, "own --node-rank in 0..1"},
      {{"--nproc-per-node", "1", "--node-rank", "1", "--", "p"}, "--node-rank 1 is not a node of --nnodes 1"},
  };
  for (const auto& [args, needle] : cases) {
    auto cmd = ParseLaunchArgs(args);
    ASSERT_FALSE(cmd.ok()) << needle;
    EXPECT_EQ(cmd.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(cmd.status().message().find(needle), std::string::npos) << cmd.status();
  }
}

TEST(LinePrefixer, PrefixesWholeLinesWhateverTheChunking) {
  std::mt19937 rng(20240611);
  std::string input;
  for (int line = 0; line < 37; ++line) input += absl::StrCat("line ", line, std::string(line % 11, 'x'), "\n");
  input += "tail without newline";
  std::string expected;
  for (int line = 0; line < 37; ++line) {
    expected += absl::StrCat("[rank 3] line ", line, std::string(line % 11, 'x'), "\n");
  }
  expected += "[rank 3] tail without newline\n";
  for (int trial = 0; trial < 19; ++trial) {
    LinePrefixer p("[rank 3] ");
    std::string out;
    size_t pos = 0;
    while (pos < input.size()) {
      const size_t n = std::min<size_t>(input.size() - pos, 1 + rng() % 23);
      out += p.Feed(std::string_view(input).substr(pos, n));
      pos += n;
    }
    out += p.Flush();
    ASSERT_EQ(out, expected) << "trial " << trial;
  }
}

TEST(LinePrefixer, CutsOverlongLines) {
  LinePrefixer p("> ", 4);
  EXPECT_EQ(p.Feed("abcdefghi"), "> abcd\n> efgh\n");
  EXPECT_EQ(p.Feed("j\n"), "> ij\n");
  EXPECT_EQ(p.Flush(), "");
  EXPECT_EQ(p.Feed("abc"), "");
  EXPECT_EQ(p.Feed("d"), "> abcd\n");
}

TEST(FindProgram, LooksUpPathAndExplainsFailures) {
  const std::string dir = launcher_test::MakeTempDir();
  const std::string plain = dir + "/not-executable";
  std::ofstream(plain) << "#!/bin/sh\n";
  chmod(plain.c_str(), 0644);
  auto sh = FindProgram("sh", "/nonexistent:/bin:/usr/bin");
  ASSERT_TRUE(sh.ok()) << sh.status();
  EXPECT_EQ(*sh, "/bin/sh");
  auto missing = FindProgram("tpserve-no-such-program", "/bin");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("tpserve-no-such-program"), std::string::npos);
  EXPECT_EQ(ExecFailureStatus(missing.status()), 127);
  if (geteuid() != 0) {  // root may execute anything
    auto denied = FindProgram(plain, "");
    EXPECT_EQ(denied.status().code(), absl::StatusCode::kPermissionDenied) << denied.status();
    EXPECT_EQ(ExecFailureStatus(denied.status()), 126);
  }
  EXPECT_EQ(FindProgram(dir, "").status().code(), absl::StatusCode::kPermissionDenied);  // a folder
  EXPECT_EQ(FindProgram(dir + "/nothing", "").status().code(), absl::StatusCode::kNotFound);
  std::filesystem::remove_all(dir);
}

RankExit Exit(int rank, int code, int sig, bool stopped, int t, bool killed = false) {
  RankExit e;
  e.rank = rank;
  e.pid = 100 + rank;
  e.exit_code = code;
  e.signal = sig;
  e.stopped = stopped;
  e.killed_after_grace = killed;
  e.when = absl::FromUnixSeconds(t);
  return e;
}

TEST(GroupOutcome, NamesTheFirstRankThatFailedOnItsOwn) {
  EXPECT_TRUE(GroupOutcome({Exit(0, 0, 0, false, 1), Exit(1, 0, 0, false, 2)}, absl::Seconds(1)).ok());
  // Rank 2 failed first (t=1); rank 0 failed later on its own; rank 1 was stopped and killed.
  const absl::Status s = GroupOutcome({Exit(0, 5, 0, false, 3), Exit(1, -1, SIGKILL, true, 4, true),
                                       Exit(2, -1, SIGSEGV, false, 1)},
                                      absl::Seconds(10));
  EXPECT_EQ(s.code(), absl::StatusCode::kAborted);
  EXPECT_NE(s.message().find("rank 2 (pid 102) was killed by signal 11 (SIGSEGV)"), std::string::npos) << s;
  EXPECT_NE(s.message().find("stopped the other 1 rank (rank 1 ignored SIGTERM for 10s"), std::string::npos) << s;
  EXPECT_EQ(Exit(1, 3, 0, false, 0).Describe(), "rank 1 (pid 101) exited with status 3");
  EXPECT_EQ(Exit(1, 3, 0, false, 0).ShellStatus(), 3);
  EXPECT_EQ(Exit(1, -1, SIGTERM, false, 0).ShellStatus(), 143);
}

TEST(GroupOutcome, AskedForStopsAreOkUnlessSigkillWasNeeded) {
  EXPECT_TRUE(GroupOutcome({Exit(0, -1, SIGTERM, true, 1), Exit(1, 1, 0, true, 2)}, absl::Seconds(1)).ok());
  const absl::Status s =
      GroupOutcome({Exit(0, 0, 0, true, 1), Exit(1, -1, SIGKILL, true, 2, true)}, absl::Milliseconds(300));
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(s.message().find("rank 1 did not exit within 300ms"), std::string::npos) << s;
}

}  // namespace
}  // namespace tpserve
