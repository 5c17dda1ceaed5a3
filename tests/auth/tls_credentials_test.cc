// auth/tls_credentials.h: which files make TLS, and errors that name the flag.
// (The handshakes themselves are in tests/e2e/security_test.cc.)
#include "auth/tls_credentials.h"

#include <sys/stat.h>

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

namespace tpserve {
namespace {

class TlsCredentialsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/tpserve-tls-XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    dir_ = pattern;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string Write(const std::string& name, const std::string& text, mode_t mode = 0600) {
    const std::string path = dir_ + "/" + name;
    std::ofstream(path) << text;
    chmod(path.c_str(), mode);
    return path;
  }
  std::string dir_;
};

TEST_F(TlsCredentialsTest, NoFilesIsPlainTextAndHalfAPairNamesBothFlags) {
  EXPECT_TRUE(MakeServerCredentials(TlsFiles{}).ok());
  EXPECT_TRUE(MakeChannelCredentials(TlsFiles{}).ok());
  TlsFiles half{.cert = Write("a.pem", "-----BEGIN CERTIFICATE-----\n"), .cert_flag = "--worker-tls-cert",
                .key_flag = "--worker-tls-key"};
  for (const absl::Status& s : {MakeServerCredentials(half).status(), MakeChannelCredentials(half).status()}) {
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("--worker-tls-cert and --worker-tls-key go together"), absl::string_view::npos) << s;
  }
}

TEST_F(TlsCredentialsTest, AServerCaWithoutACertificateIsRefused) {
  const TlsFiles ca_only{.ca = Write("ca.pem", "-----BEGIN CERTIFICATE-----\n"), .ca_flag = "--tls-client-ca"};
  const absl::Status s = MakeServerCredentials(ca_only).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("--tls-client-ca needs --tls-cert and --tls-key"), absl::string_view::npos) << s;
  // A client with only a CA is plain TLS (no client certificate): fine.
  EXPECT_TRUE(MakeChannelCredentials(ca_only).ok());
}

TEST_F(TlsCredentialsTest, MissingAndNonPemFilesNameTheFlagAndPath) {
  const TlsFiles missing{.ca = dir_ + "/nope.pem", .ca_flag = "--tls-ca"};
  const absl::Status gone = MakeChannelCredentials(missing).status();
  EXPECT_EQ(gone.code(), absl::StatusCode::kNotFound);
  EXPECT_NE(gone.message().find("--tls-ca: cannot read " + dir_ + "/nope.pem"), absl::string_view::npos) << gone;

  const TlsFiles not_pem{.ca = Write("ca.der", "\x30\x82 binary"), .ca_flag = "--worker-tls-ca"};
  const absl::Status der = MakeChannelCredentials(not_pem).status();
  EXPECT_EQ(der.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(der.message().find("--worker-tls-ca"), absl::string_view::npos) << der;
  EXPECT_NE(der.message().find("is not a PEM file"), absl::string_view::npos) << der;
}

TEST_F(TlsCredentialsTest, AKeyOthersCanReadIsRefused) {
  const TlsFiles world_readable{.cert = Write("c.pem", "-----BEGIN CERTIFICATE-----\n"),
                                .key = Write("c.key", "-----BEGIN PRIVATE KEY-----\n", 0644)};
  const absl::Status s = MakeServerCredentials(world_readable).status();
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("--tls-key"), absl::string_view::npos) << s;
}

}  // namespace
}  // namespace tpserve
