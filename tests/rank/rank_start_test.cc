// StartRank (rank/rank_start.h): the CPU backend on one rank, the errors a user
// can act on, and the out-of-step mark on statuses.
#include "rank/rank_start.h"

#include <gtest/gtest.h>

#include "rank/gpu_query.h"
#include "rank/out_of_step.h"

namespace tpserve {
namespace {

RankEnv SoloEnv() { return RankEnv{.rank = 0, .world_size = 1, .local_rank = 0, .source = "default"}; }

TEST(StartRank, CpuOnOneRankIsSoloWithoutSampler) {
  RankStartOptions options;
  options.backend = "cpu";
  options.cpu_threads = 1;
  absl::StatusOr<RankResources> rank = StartRank(SoloEnv(), options);
  ASSERT_TRUE(rank.ok()) << rank.status();
  ASSERT_NE(rank->backend, nullptr);
  ASSERT_NE(rank->comm, nullptr);
  EXPECT_EQ(rank->comm->rank(), 0);
  EXPECT_EQ(rank->comm->world_size(), 1);
  EXPECT_EQ(rank->sampler, nullptr);  // the host samples on the CPU backend
  EXPECT_FALSE(rank->gpu.has_value());
  EXPECT_EQ(rank->prefix_store, nullptr);
}

TEST(StartRank, AnUnknownBackendNamesTheChoices) {
  RankStartOptions options;
  options.backend = "tpu";
  absl::StatusOr<RankResources> rank = StartRank(SoloEnv(), options);
  ASSERT_FALSE(rank.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(rank.status())) << rank.status();
  EXPECT_NE(rank.status().message().find("unknown backend \"tpu\"; use \"cpu\" or \"cuda\""), std::string::npos)
      << rank.status();
  EXPECT_FALSE(IsOutOfStep(rank.status()));
}

TEST(StartRank, SeveralRanksWithoutAStoreSayWhatIsMissing) {
  RankStartOptions options;
  options.cpu_threads = 1;
  const RankEnv env{.rank = 1, .world_size = 2, .local_rank = 1, .source = "torchrun"};
  absl::StatusOr<RankResources> rank = StartRank(env, options);
  ASSERT_FALSE(rank.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(rank.status())) << rank.status();
  EXPECT_NE(rank.status().message().find("RankStartOptions::store"), std::string::npos) << rank.status();
  EXPECT_NE(rank.status().message().find("rank 1 of 2"), std::string::npos) << rank.status();
}

TEST(StartRank, CudaWithoutAGpuIsAClearError) {
  RankStartOptions options;
  options.backend = "cuda";
  options.vocab_size = 300;
  options.max_seqs = 4;
  absl::StatusOr<RankResources> rank = StartRank(SoloEnv(), options);
  if (PlaceRankOnGpu(SoloEnv()).ok()) {
    // A GPU: the CUDA backend, and rank 0 samples on it.
    ASSERT_TRUE(rank.ok()) << rank.status();
    ASSERT_TRUE(rank->gpu.has_value());
    EXPECT_EQ(rank->gpu->comm, CommKind::kSolo);
    EXPECT_NE(rank->sampler, nullptr);
    return;
  }
  ASSERT_FALSE(rank.ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(rank.status())) << rank.status();
  const char* why = BuiltWithCuda() ? "sees no CUDA device" : "built without CUDA";
  EXPECT_NE(rank.status().message().find(why), std::string::npos) << rank.status();
  EXPECT_NE(rank.status().message().find("CUDA_VISIBLE_DEVICES"), std::string::npos) << rank.status();
  EXPECT_NE(rank.status().message().find("--backend cpu"), std::string::npos) << rank.status();
  EXPECT_FALSE(QueryRankGpu(SoloEnv()).ok());
}

TEST(OutOfStep, TheMarkKeepsCodeAndMessage) {
  EXPECT_TRUE(MarkOutOfStep(absl::OkStatus()).ok());
  const absl::Status plain = absl::DeadlineExceededError("rank 1 of 2 did not arrive");
  EXPECT_FALSE(IsOutOfStep(plain));
  const absl::Status marked = MarkOutOfStep(plain);
  EXPECT_TRUE(IsOutOfStep(marked));
  EXPECT_EQ(marked.code(), plain.code());
  EXPECT_EQ(marked.message(), plain.message());
}

}  // namespace
}  // namespace tpserve
