// The kernel-set switch (cuda/kernel_set.h), on the CPU.
#include "cuda/kernel_set.h"

#include <cstdlib>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace tpserve::cuda {
namespace {

using ::testing::HasSubstr;

TEST(KernelSetTest, ParsesBothNamesAndRefusesOthersNamingTheVariable) {
  ASSERT_TRUE(ParseKernelSet("fast").ok());
  EXPECT_EQ(*ParseKernelSet("fast"), KernelSet::kFast);
  EXPECT_EQ(*ParseKernelSet("reference"), KernelSet::kReference);
  EXPECT_EQ(KernelSetName(KernelSet::kReference), "reference");
  const absl::StatusOr<KernelSet> bad = ParseKernelSet("Fast");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("TPSERVE_KERNELS=\"Fast\""));
  EXPECT_THAT(bad.status().message(), HasSubstr("\"reference\""));
}

TEST(KernelSetTest, EnvironmentDefaultsToFast) {
  ::unsetenv(kKernelSetEnv);
  EXPECT_EQ(*KernelSetFromEnvironment(), KernelSet::kFast);
  ::setenv(kKernelSetEnv, "", 1);
  EXPECT_EQ(*KernelSetFromEnvironment(), KernelSet::kFast);
  ::setenv(kKernelSetEnv, "reference", 1);
  EXPECT_EQ(*KernelSetFromEnvironment(), KernelSet::kReference);
  ::setenv(kKernelSetEnv, "slow", 1);
  EXPECT_FALSE(KernelSetFromEnvironment().ok());
  ::unsetenv(kKernelSetEnv);
}

// TPSERVE_PDL: on unless "off"; anything else is refused naming the variable.
TEST(KernelSetTest, PdlSwitchDefaultsToOnAndRefusesOtherValues) {
  ::unsetenv(kPdlEnv);
  EXPECT_EQ(*ProgrammaticLaunchFromEnvironment(), true);
  ::setenv(kPdlEnv, "", 1);
  EXPECT_EQ(*ProgrammaticLaunchFromEnvironment(), true);
  ::setenv(kPdlEnv, "on", 1);
  EXPECT_EQ(*ProgrammaticLaunchFromEnvironment(), true);
  ::setenv(kPdlEnv, "off", 1);
  EXPECT_EQ(*ProgrammaticLaunchFromEnvironment(), false);
  ::setenv(kPdlEnv, "0", 1);
  const absl::StatusOr<bool> bad = ProgrammaticLaunchFromEnvironment();
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("TPSERVE_PDL=\"0\""));
  EXPECT_THAT(bad.status().message(), HasSubstr("\"off\""));
  ::unsetenv(kPdlEnv);
}

// TPSERVE_DETERMINISTIC: off unless "1"; "0" and empty are off; anything else
// is refused naming the variable.
TEST(KernelSetTest, DeterministicSwitchDefaultsToOffAndRefusesOtherValues) {
  ::unsetenv(kDeterministicEnv);
  EXPECT_EQ(*DeterministicFromEnvironment(), false);
  ::setenv(kDeterministicEnv, "", 1);
  EXPECT_EQ(*DeterministicFromEnvironment(), false);
  ::setenv(kDeterministicEnv, "0", 1);
  EXPECT_EQ(*DeterministicFromEnvironment(), false);
  ::setenv(kDeterministicEnv, "1", 1);
  EXPECT_EQ(*DeterministicFromEnvironment(), true);
  ::setenv(kDeterministicEnv, "yes", 1);
  const absl::StatusOr<bool> bad = DeterministicFromEnvironment();
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("TPSERVE_DETERMINISTIC=\"yes\""));
  ::unsetenv(kDeterministicEnv);
}

}  // namespace
}  // namespace tpserve::cuda
