#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "comm/communicator.h"
#include "tests/testing/seed.h"

namespace tpserve {
namespace {

TEST(SoloCommunicator, CollectivesOfOneRank) {
  uint32_t seed = testing_util::TestSeed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-3, 3);
  auto comm = MakeSoloCommunicator();
  EXPECT_EQ(comm->rank(), 0);
  EXPECT_EQ(comm->world_size(), 1);
  std::vector<float> x(19);
  for (float& v : x) v = dist(rng);
  std::vector<float> before = x;
  Tensor t(x.data(), DType::kF32, Device::kCpu, {19});
  ASSERT_TRUE(comm->AllReduceSum(t).ok());
  ASSERT_TRUE(comm->Broadcast(t, 0).ok());
  EXPECT_EQ(x, before);
  std::vector<float> out(19, -1.0f);
  ASSERT_TRUE(comm->Gather(t, Tensor(out.data(), DType::kF32, Device::kCpu, {1, 19})).ok());
  EXPECT_EQ(out, x);
  std::fill(out.begin(), out.end(), -1.0f);
  ASSERT_TRUE(comm->AllGather(t, Tensor(out.data(), DType::kF32, Device::kCpu, {1, 19})).ok());
  EXPECT_EQ(out, x);
  EXPECT_TRUE(comm->Barrier().ok());
}

TEST(SoloCommunicator, BadArgumentsAreInvalidArgument) {
  auto comm = MakeSoloCommunicator();
  std::vector<uint16_t> h(6);
  std::vector<float> f(6);
  Tensor f16(h.data(), DType::kF16, Device::kCpu, {6});
  EXPECT_TRUE(absl::IsInvalidArgument(comm->AllReduceSum(f16)));
  Tensor in(f.data(), DType::kF32, Device::kCpu, {2, 3});
  absl::Status s = comm->Gather(in, Tensor(f.data(), DType::kF32, Device::kCpu, {2, 3}));
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_NE(s.message().find("[2, 3]"), std::string::npos) << s;
  s = comm->AllGather(in, Tensor(h.data(), DType::kBF16, Device::kCpu, {1, 2, 3}));
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_TRUE(absl::IsInvalidArgument(comm->Broadcast(in, 1)));
}

}  // namespace
}  // namespace tpserve
