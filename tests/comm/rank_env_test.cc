#include "comm/rank_env.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <string>

namespace tpserve {
namespace {

const char* const kAllVars[] = {
    "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
    "OMPI_COMM_WORLD_LOCAL_SIZE", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS",
    "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", kDpRankEnv};

// Every test starts from an environment without any launcher variable.
class RankEnvTest : public testing::Test {
 protected:
  void SetUp() override {
    for (const char* v : kAllVars) unsetenv(v);
  }
  void TearDown() override { SetUp(); }
  static void Set(const char* name, const char* value) { setenv(name, value, 1); }
};

TEST_F(RankEnvTest, NothingSetIsASingleProcess) {
  auto env = ReadRankEnv();
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->rank, 0);
  EXPECT_EQ(env->world_size, 1);
  EXPECT_EQ(env->local_rank, 0);
  EXPECT_EQ(env->source, "default");
}

// The data-parallel group: none unless named; TPSERVE_DP_RANK names it, the
// override wins, and a value that is not a number is an error naming it.
TEST_F(RankEnvTest, DpRankFromTheOverrideElseTheEnvironment) {
  auto none = ReadRankEnv();
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_FALSE(none->dp_rank.has_value());
  Set(kDpRankEnv, "3");
  auto named = ReadRankEnv();
  ASSERT_TRUE(named.ok()) << named.status();
  EXPECT_EQ(named->dp_rank, 3);
  auto overridden = ReadRankEnv({.dp_rank = 1});
  ASSERT_TRUE(overridden.ok()) << overridden.status();
  EXPECT_EQ(overridden->dp_rank, 1);
  Set(kDpRankEnv, "one");
  auto bad = ReadRankEnv();
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("TPSERVE_DP_RANK='one'"), std::string::npos) << bad.status();
}

TEST_F(RankEnvTest, OpenMpi) {
  Set("OMPI_COMM_WORLD_RANK", "5");
  Set("OMPI_COMM_WORLD_SIZE", "8");
  Set("OMPI_COMM_WORLD_LOCAL_RANK", "1");
  Set("OMPI_COMM_WORLD_LOCAL_SIZE", "4");
  auto env = ReadRankEnv();
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->rank, 5);
  EXPECT_EQ(env->world_size, 8);
  EXPECT_EQ(env->local_rank, 1);
  EXPECT_EQ(env->local_world_size, 4);
  EXPECT_EQ(env->source, "openmpi");
}

TEST_F(RankEnvTest, MpichPmi) {
  Set("PMI_RANK", "2");
  Set("PMI_SIZE", "3");
  Set("MPI_LOCALRANKID", "0");
  auto env = ReadRankEnv();
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->rank, 2);
  EXPECT_EQ(env->world_size, 3);
  EXPECT_EQ(env->local_rank, 0);
  EXPECT_EQ(env->local_world_size, 0);
  EXPECT_EQ(env->source, "pmi");
}

TEST_F(RankEnvTest, TorchrunWithMaster) {
  Set("RANK", "3");
  Set("WORLD_SIZE", "4");
  Set("LOCAL_RANK", "3");
  Set("LOCAL_WORLD_SIZE", "4");
  Set("MASTER_ADDR", "10.0.0.7");
  Set("MASTER_PORT", "29500");
  auto env = ReadRankEnv();
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->rank, 3);
  EXPECT_EQ(env->world_size, 4);
  EXPECT_EQ(env->local_rank, 3);
  EXPECT_EQ(env->local_world_size, 4);
  EXPECT_EQ(env->master_addr, "10.0.0.7");
  EXPECT_EQ(env->master_port, 29500);
  EXPECT_EQ(env->source, "torchrun");
}

TEST_F(RankEnvTest, LocalRankDefaultsToRank) {
  Set("RANK", "1");
  Set("WORLD_SIZE", "2");
  auto env = ReadRankEnv();
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->local_rank, 1);
}

TEST_F(RankEnvTest, OpenMpiWinsOverLeftoverTorchrunVariables) {
  Set("OMPI_COMM_WORLD_RANK", "1");
  Set("OMPI_COMM_WORLD_SIZE", "2");
  Set("RANK", "0");
  Set("WORLD_SIZE", "4");
  auto env = ReadRankEnv();
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->rank, 1);
  EXPECT_EQ(env->world_size, 2);
}

TEST_F(RankEnvTest, OverridesTakePrecedenceFieldByField) {
  Set("OMPI_COMM_WORLD_RANK", "1");
  Set("OMPI_COMM_WORLD_SIZE", "2");
  Set("OMPI_COMM_WORLD_LOCAL_RANK", "1");
  RankOverrides o;
  o.world_size = 4;
  o.rank = 3;
  auto env = ReadRankEnv(o);
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->rank, 3);
  EXPECT_EQ(env->world_size, 4);
  EXPECT_EQ(env->local_rank, 1);  // not overridden: from Open MPI
  EXPECT_EQ(env->source, "openmpi+override");

  unsetenv("OMPI_COMM_WORLD_RANK");
  unsetenv("OMPI_COMM_WORLD_SIZE");
  unsetenv("OMPI_COMM_WORLD_LOCAL_RANK");
  o.local_rank = 0;
  env = ReadRankEnv(o);
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->local_rank, 0);
  EXPECT_EQ(env->source, "default+override");
}

void ExpectInvalid(const RankOverrides& o, const std::string& mention) {
  auto env = ReadRankEnv(o);
  ASSERT_FALSE(env.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(env.status())) << env.status();
  EXPECT_NE(env.status().message().find(mention), std::string::npos)
      << env.status() << " should mention " << mention;
}

TEST_F(RankEnvTest, RankNotBelowWorldSizeIsAnError) {
  Set("OMPI_COMM_WORLD_RANK", "2");
  Set("OMPI_COMM_WORLD_SIZE", "2");
  ExpectInvalid({}, "OMPI_COMM_WORLD_RANK");
}

TEST_F(RankEnvTest, NonNumbersAreErrorsNamingTheVariable) {
  Set("PMI_RANK", "one");
  Set("PMI_SIZE", "2");
  ExpectInvalid({}, "PMI_RANK='one'");
  Set("PMI_RANK", "1");
  Set("PMI_SIZE", "2x");
  ExpectInvalid({}, "PMI_SIZE='2x'");
  Set("PMI_SIZE", "-2");
  ExpectInvalid({}, "PMI_SIZE='-2'");
}

TEST_F(RankEnvTest, HalfSetLauncherIsAnError) {
  Set("WORLD_SIZE", "2");
  ExpectInvalid({}, "RANK is not");
}

TEST_F(RankEnvTest, ZeroWorldSizeAndBadLocalRankAreErrors) {
  Set("RANK", "0");
  Set("WORLD_SIZE", "0");
  ExpectInvalid({}, "world size 0");
  Set("WORLD_SIZE", "4");
  Set("LOCAL_RANK", "2");
  Set("LOCAL_WORLD_SIZE", "2");
  ExpectInvalid({}, "LOCAL_WORLD_SIZE");
}

TEST_F(RankEnvTest, OverrideOutsideTheWorldIsAnError) {
  Set("RANK", "0");
  Set("WORLD_SIZE", "2");
  RankOverrides o;
  o.rank = 5;
  ExpectInvalid(o, "the rank override");
}

TEST_F(RankEnvTest, BadMasterPortIsAnError) {
  Set("MASTER_PORT", "70000");
  ExpectInvalid({}, "MASTER_PORT");
  Set("MASTER_PORT", "http");
  ExpectInvalid({}, "MASTER_PORT='http'");
}

}  // namespace
}  // namespace tpserve
