#include "coordinator/worker_gate.h"

#include <gtest/gtest.h>

namespace tpserve {
namespace {

namespace iv1 = tpserve::internal::v1;

iv1::Hello HelloFor(const ClusterSecret& secret, const std::string& challenge, uint32_t rank, uint32_t world) {
  iv1::Hello hello;
  hello.set_rank(rank);
  hello.set_world_size(world);
  hello.set_challenge(challenge);
  hello.set_proof(secret.HelloProof(challenge, rank, world));
  return hello;
}

TEST(WorkerGateTest, WithoutASecretAnyoneIsAdmitted) {
  WorkerGate gate(std::nullopt, 2);
  EXPECT_FALSE(gate.secret_required());
  EXPECT_TRUE(gate.Verify(iv1::Hello()).ok());
  EXPECT_TRUE(gate.CheckStoreToken("").ok());
}

TEST(WorkerGateTest, TheRightProofIsAdmittedOnceAndGrantsTheStore) {
  const ClusterSecret secret = ClusterSecret::Generate();
  WorkerGate gate(secret, 2);
  const std::string challenge = gate.IssueChallenge();
  EXPECT_FALSE(gate.CheckStoreToken(secret.StoreToken(challenge)).ok()) << "no session admitted yet";
  absl::StatusOr<std::string> token = gate.Verify(HelloFor(secret, challenge, 1, 2));
  ASSERT_TRUE(token.ok()) << token.status();
  EXPECT_EQ(*token, secret.StoreToken(challenge));
  EXPECT_FALSE(gate.CheckStoreToken(*token).ok()) << "valid only once the Hello is admitted";
  gate.Grant(1, *token);
  EXPECT_TRUE(gate.CheckStoreToken(*token).ok());
  EXPECT_EQ(gate.CheckStoreToken("forged").code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(gate.Verify(HelloFor(secret, challenge, 1, 2)).status().code(), absl::StatusCode::kUnauthenticated)
      << "a challenge is single use: a replayed Hello is refused";
  gate.Forget(1);
  EXPECT_FALSE(gate.CheckStoreToken(*token).ok()) << "the session ended";
}

TEST(WorkerGateTest, WrongSecretMissingProofAndUnknownChallengeAreRefused) {
  const ClusterSecret secret = ClusterSecret::Generate();
  WorkerGate gate(secret, 2);
  absl::StatusOr<std::string> wrong = gate.Verify(HelloFor(ClusterSecret::Generate(), gate.IssueChallenge(), 0, 2));
  EXPECT_EQ(wrong.status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_NE(wrong.status().message().find("different cluster secret"), std::string::npos) << wrong.status();

  iv1::Hello no_proof;
  no_proof.set_challenge(gate.IssueChallenge());
  absl::StatusOr<std::string> missing = gate.Verify(no_proof);
  EXPECT_NE(missing.status().message().find("--cluster-secret-file"), std::string::npos) << missing.status();

  EXPECT_FALSE(gate.Verify(HelloFor(secret, "made-up-challenge", 0, 2)).ok());
  // A proof for rank 0 does not admit rank 1.
  const std::string challenge = gate.IssueChallenge();
  iv1::Hello moved = HelloFor(secret, challenge, 0, 2);
  moved.set_rank(1);
  EXPECT_FALSE(gate.Verify(moved).ok());
}

TEST(WorkerGateTest, ChallengesExpireAndAreBounded) {
  const ClusterSecret secret = ClusterSecret::Generate();
  WorkerGate gate(secret, 1);
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  const std::string old = gate.IssueChallenge(t0);
  EXPECT_FALSE(gate.Verify(HelloFor(secret, old, 0, 1), t0 + WorkerGate::kChallengeLifetime).ok()) << "expired";

  const std::string first = gate.IssueChallenge(t0);
  for (size_t i = 0; i < WorkerGate::kMaxChallenges; ++i) gate.IssueChallenge(t0);
  EXPECT_FALSE(gate.Verify(HelloFor(secret, first, 0, 1), t0).ok()) << "the oldest was dropped";
  EXPECT_TRUE(gate.Verify(HelloFor(secret, gate.IssueChallenge(t0), 0, 1), t0).ok());
}

// Each data-parallel group's port has its gate: a Hello naming its group,
// or none, passes; one naming another group (or one the coordinator does
// not serve) is refused naming both, with or without a secret, and a refused
// Hello grants nothing.
TEST(WorkerGateTest, AHelloNamingAnotherGroupIsRefusedNamingBoth) {
  WorkerGate group0(std::nullopt, 1, {.rank = 0, .size = 2});
  iv1::Hello hello;
  hello.set_host("h1");
  hello.set_pid(42);
  EXPECT_TRUE(group0.Verify(hello).ok()) << "no group named: the port's";
  hello.set_dp_rank(0);
  EXPECT_TRUE(group0.Verify(hello).ok());
  hello.set_dp_rank(1);
  const absl::Status wrong = group0.Verify(hello).status();
  EXPECT_EQ(wrong.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(wrong.message().find("names data-parallel group 1 (--dp-rank) but dialled the port of group 0"),
            std::string::npos)
      << wrong;
  EXPECT_NE(wrong.message().find("on h1 (pid 42)"), std::string::npos) << wrong;
  EXPECT_NE(wrong.message().find("dial group 1's port"), std::string::npos) << wrong;
  hello.set_dp_rank(2);
  const absl::Status outside = group0.CheckGroup(hello);
  EXPECT_EQ(outside.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(outside.message().find("names data-parallel group 2 (--dp-rank) but this coordinator serves 2 groups"),
            std::string::npos)
      << outside;

  const ClusterSecret secret = ClusterSecret::Generate();
  WorkerGate group1(secret, 1, {.rank = 1, .size = 2});
  iv1::Hello proved = HelloFor(secret, group1.IssueChallenge(), 0, 1);
  proved.set_dp_rank(0);
  const absl::StatusOr<std::string> refused = group1.Verify(proved);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition) << "the right secret, the wrong group";
  EXPECT_NE(refused.status().message().find("group 0 (--dp-rank) but dialled the port of group 1"), std::string::npos)
      << refused.status();
  proved = HelloFor(secret, group1.IssueChallenge(), 0, 1);
  proved.set_dp_rank(1);
  EXPECT_TRUE(group1.Verify(proved).ok());

  WorkerGate single(std::nullopt, 1);  // no --dp: group 0 of 1
  hello.set_dp_rank(1);
  EXPECT_NE(single.CheckGroup(hello).message().find("serves 1 group (no --dp)"), std::string::npos);
  hello.set_dp_rank(0);
  EXPECT_TRUE(single.CheckGroup(hello).ok());
}

}  // namespace
}  // namespace tpserve
