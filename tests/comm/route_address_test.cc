// LocalAddressToward: the source address of this host's route toward a peer
// (the cross-host case, a veth between two namespaces, is in
// tests/e2e/two_hosts_test.cc).
#include "comm/route_address.h"

#include <gtest/gtest.h>

namespace tpserve {
namespace {

TEST(LocalAddressToward, LoopbackAndUnixPeersAreThisHostsLoopback) {
  EXPECT_EQ(LocalAddressToward("127.0.0.1:50052").value_or("?"), "127.0.0.1");
  // Any 127/8 destination leaves from the loopback interface's 127.0.0.1.
  EXPECT_EQ(LocalAddressToward("127.0.0.1:1").value_or("?"), "127.0.0.1");
  EXPECT_EQ(LocalAddressToward("unix:/tmp/coordinator.sock").value_or("?"), "127.0.0.1");
  const absl::StatusOr<std::string> named = LocalAddressToward("localhost:50052");
  ASSERT_TRUE(named.ok()) << named.status();
  EXPECT_TRUE(*named == "127.0.0.1" || *named == "::1") << *named;
}

TEST(LocalAddressToward, BracketedIpv6LiteralIsSplitAtTheLastColon) {
  const absl::StatusOr<std::string> v6 = LocalAddressToward("[::1]:50052");
  if (!v6.ok()) GTEST_SKIP() << "no IPv6 loopback here: " << v6.status();
  EXPECT_EQ(*v6, "::1");
}

TEST(LocalAddressToward, MalformedOrUnresolvablePeersSaySo) {
  for (const char* bad : {"no-port", ":50052", "host:"}) {
    const absl::StatusOr<std::string> r = LocalAddressToward(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
    EXPECT_NE(r.status().message().find("HOST:PORT"), std::string::npos) << r.status();
  }
  const absl::StatusOr<std::string> missing = LocalAddressToward("no-such-host.invalid:50052");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(missing.status().message().find("no-such-host.invalid"), std::string::npos) << missing.status();
}

}  // namespace
}  // namespace tpserve
