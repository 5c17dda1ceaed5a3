// Where a CUDA worker runs and which communicator its ranks use.
#include "comm/gpu_placement.h"

#include "gtest/gtest.h"

namespace tpserve {
namespace {

RankEnv Env(int rank, int world, int local_rank, int local_world) {
  RankEnv env;
  env.rank = rank;
  env.world_size = world;
  env.local_rank = local_rank;
  env.local_world_size = local_world;
  return env;
}

TEST(GpuPlacement, OneRankPerGpuUsesItsLocalRankAndNccl) {
  for (int r = 0; r < 4; ++r) {
    absl::StatusOr<GpuPlacement> p = PlaceOnGpu(Env(r, 4, r, 4), 8, /*have_nccl=*/true, /*have_gloo=*/true);
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_EQ(p->device, r);
    EXPECT_EQ(p->ranks_per_device, 1);
    EXPECT_EQ(p->comm, CommKind::kNccl);
  }
}

TEST(GpuPlacement, ASingleRankNeedsNoCommunicator) {
  absl::StatusOr<GpuPlacement> p = PlaceOnGpu(Env(0, 1, 0, 1), 1, false, false);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->comm, CommKind::kSolo);
  EXPECT_EQ(p->device, 0);
}

TEST(GpuPlacement, RanksSharingAGpuGoThroughGloo) {
  // tp = 3 on 2 GPUs: ranks 0 and 2 share GPU 0, rank 1 has GPU 1.
  const int expect_device[] = {0, 1, 0};
  const int expect_sharing[] = {2, 1, 2};
  for (int r = 0; r < 3; ++r) {
    absl::StatusOr<GpuPlacement> p = PlaceOnGpu(Env(r, 3, r, 3), 2, true, true);
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_EQ(p->device, expect_device[r]) << r;
    EXPECT_EQ(p->ranks_per_device, expect_sharing[r]) << r;
    EXPECT_EQ(p->comm, CommKind::kGloo) << "NCCL refuses two ranks on one GPU";
  }
}

TEST(GpuPlacement, WithoutNcclOwnGpusFallBackToGloo) {
  absl::StatusOr<GpuPlacement> p = PlaceOnGpu(Env(1, 2, 1, 2), 2, /*have_nccl=*/false, /*have_gloo=*/true);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->comm, CommKind::kGloo);
  EXPECT_EQ(p->device, 1);
}

TEST(GpuPlacement, LocalWorldSizeFallsBackToWorldSize) {
  // A launcher that sets no local world size: every rank is taken to be local.
  absl::StatusOr<GpuPlacement> p = PlaceOnGpu(Env(1, 2, 1, 0), 1, true, true);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->ranks_per_device, 2);
  EXPECT_EQ(p->comm, CommKind::kGloo);
}

TEST(GpuPlacement, ErrorsSayWhatToDo) {
  absl::StatusOr<GpuPlacement> none = PlaceOnGpu(Env(0, 1, 0, 1), 0, true, true);
  EXPECT_EQ(none.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(none.status().message().find("--backend cpu"), std::string::npos) << none.status();
  EXPECT_NE(none.status().message().find("CUDA_VISIBLE_DEVICES"), std::string::npos) << none.status();

  absl::StatusOr<GpuPlacement> shared = PlaceOnGpu(Env(0, 2, 0, 2), 1, /*have_nccl=*/true, /*have_gloo=*/false);
  EXPECT_EQ(shared.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(shared.status().message().find("libgloo-dev"), std::string::npos) << shared.status();
  EXPECT_NE(shared.status().message().find("NCCL refuses two ranks on one GPU"), std::string::npos);

  absl::StatusOr<GpuPlacement> neither = PlaceOnGpu(Env(0, 2, 0, 2), 2, false, false);
  EXPECT_EQ(neither.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(neither.status().message().find("neither"), std::string::npos) << neither.status();
}

TEST(GpuPlacement, KindsHaveNames) {
  EXPECT_EQ(CommKindName(CommKind::kSolo), "solo");
  EXPECT_EQ(CommKindName(CommKind::kNccl), "nccl");
  EXPECT_EQ(CommKindName(CommKind::kGloo), "gloo");
}

}  // namespace
}  // namespace tpserve
