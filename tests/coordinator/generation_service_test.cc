// GenerationService's helpers: who a client is, and server-assigned request ids.
#include "coordinator/generation_service.h"

#include <gtest/gtest.h>

#include <set>

#include "absl/strings/ascii.h"

namespace tpserve {
namespace {

TEST(ClientIdentityTest, IsThePeerAddressWithoutThePort) {
  EXPECT_EQ(ClientIdentity("ipv4:127.0.0.1:51234"), "ipv4:127.0.0.1");
  EXPECT_EQ(ClientIdentity("ipv4:127.0.0.1:1"), ClientIdentity("ipv4:127.0.0.1:2"));
  EXPECT_EQ(ClientIdentity("ipv6:[::1]:443"), "ipv6:[::1]");
  EXPECT_EQ(ClientIdentity("ipv6:[::ffff:10.0.0.7]:80"), "ipv6:[::ffff:10.0.0.7]");
  EXPECT_NE(ClientIdentity("ipv4:127.0.0.1:5"), ClientIdentity("ipv4:127.0.0.2:5"));
  // Nothing that looks like a port: kept whole.
  EXPECT_EQ(ClientIdentity("unix:/tmp/sock"), "unix:/tmp/sock");
  EXPECT_EQ(ClientIdentity("unix:/tmp/a:12"), "unix:/tmp/a:12");
  EXPECT_EQ(ClientIdentity("ipv6:[::1]"), "ipv6:[::1]");
  EXPECT_EQ(ClientIdentity(""), "");
}

TEST(NewRequestIdTest, Is128RandomBitsInHex) {
  std::set<std::string> seen;
  for (int i = 0; i < 1000; ++i) {
    const std::string id = NewRequestId();
    ASSERT_EQ(id.size(), 4u + 32u) << id;
    ASSERT_EQ(id.substr(0, 4), "req-") << id;
    for (char c : id.substr(4)) {
      ASSERT_TRUE(absl::ascii_isxdigit(static_cast<unsigned char>(c))) << id;
    }
    ASSERT_TRUE(seen.insert(id).second) << "repeated " << id;
  }
}

}  // namespace
}  // namespace tpserve
