#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "auth/api_keys.h"
#include "auth/cluster_secret.h"
#include "auth/secret_file.h"

namespace tpserve {
namespace {

class AuthTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (std::filesystem::temp_directory_path() / "tpserve-auth-XXXXXX").string();
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string Write(const std::string& name, const std::string& text, mode_t mode) {
    const std::string path = (dir_ / name).string();
    std::ofstream(path) << text;
    chmod(path.c_str(), mode);
    return path;
  }
  std::filesystem::path dir_;
};

TEST_F(AuthTest, ASecretReadableByOthersIsRefusedWithTheFix) {
  const std::string path = Write("secret", "0123456789abcdef0123", 0644);
  absl::StatusOr<ClusterSecret> secret = ClusterSecret::FromFile(path, "--cluster-secret-file");
  ASSERT_FALSE(secret.ok());
  EXPECT_NE(secret.status().message().find("chmod 600"), std::string::npos) << secret.status();
  EXPECT_NE(secret.status().message().find("--cluster-secret-file"), std::string::npos) << secret.status();
}

TEST_F(AuthTest, AShortOrMissingSecretIsRefused) {
  EXPECT_EQ(ClusterSecret::FromFile(Write("short", "abc\n", 0600), "F").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ClusterSecret::FromFile((dir_ / "absent").string(), "F").status().code(), absl::StatusCode::kNotFound);
}

TEST_F(AuthTest, TrailingNewlineIsNotPartOfTheSecret) {
  absl::StatusOr<ClusterSecret> a = ClusterSecret::FromFile(Write("a", "0123456789abcdef0123\n", 0600), "F");
  absl::StatusOr<ClusterSecret> b = ClusterSecret::FromFile(Write("b", "0123456789abcdef0123", 0600), "F");
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->HelloProof("challenge", 0, 2), b->HelloProof("challenge", 0, 2));
}

TEST_F(AuthTest, ProofsBindTheChallengeRankAndWorldSize) {
  const ClusterSecret secret = ClusterSecret::Generate();
  const std::string proof = secret.HelloProof("challenge-1", 0, 2);
  EXPECT_EQ(proof.size(), 32u);
  EXPECT_NE(proof, secret.HelloProof("challenge-2", 0, 2));
  EXPECT_NE(proof, secret.HelloProof("challenge-1", 1, 2));
  EXPECT_NE(proof, secret.HelloProof("challenge-1", 0, 4));
  EXPECT_NE(proof, secret.StoreToken("challenge-1"));
  EXPECT_NE(proof, ClusterSecret::Generate().HelloProof("challenge-1", 0, 2));
}

// A generated secret written to a file reads back the same, every time (raw
// random bytes ending in a whitespace byte would lose it to the trim).
TEST_F(AuthTest, GeneratedSecretsSurviveTheirFile) {
  for (int i = 0; i < 300; ++i) {
    const ClusterSecret made = ClusterSecret::Generate();
    const std::string path = (dir_ / ("generated-" + std::to_string(i))).string();
    ASSERT_TRUE(WriteSecretFile(path, made.bytes()).ok());
    absl::StatusOr<ClusterSecret> read = ClusterSecret::FromFile(path, "F");
    ASSERT_TRUE(read.ok()) << read.status();
    ASSERT_EQ(read->bytes(), made.bytes());
  }
}

TEST_F(AuthTest, WrittenSecretFilesArePrivate) {
  const std::string path = (dir_ / "made").string();
  ASSERT_TRUE(WriteSecretFile(path, "0123456789abcdef0123").ok());
  struct stat st {};
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_TRUE(ClusterSecret::FromFile(path, "F").ok());
  EXPECT_FALSE(WriteSecretFile(path, "again").ok()) << "an existing file is never overwritten";
}

TEST_F(AuthTest, ApiKeysMatchByNameAndRejectEverythingElse) {
  absl::StatusOr<ApiKeys> keys = ApiKeys::FromText(
      "# team keys\n"
      "alice  alice-key-0123456789\n"
      "\n"
      "bob-key-0123456789abcdef\n",
      "keys");
  ASSERT_TRUE(keys.ok()) << keys.status();
  EXPECT_EQ(keys->size(), 2u);
  EXPECT_EQ(keys->Match("alice-key-0123456789"), "alice");
  EXPECT_EQ(keys->Match("bob-key-0123456789abcdef"), "key-4");
  EXPECT_EQ(keys->Match("alice-key-012345678"), std::nullopt);
  EXPECT_EQ(keys->Match(""), std::nullopt);
  EXPECT_EQ(keys->Match("alice"), std::nullopt) << "a name is not a key";
}

TEST_F(AuthTest, BadKeyFilesNameTheLine) {
  absl::StatusOr<ApiKeys> short_key = ApiKeys::FromText("ok-key-0123456789abc\nshort\n", "keys");
  ASSERT_FALSE(short_key.ok());
  EXPECT_NE(short_key.status().message().find("line 2"), std::string::npos) << short_key.status();
  EXPECT_FALSE(ApiKeys::FromText("# nothing\n", "keys").ok());
  EXPECT_FALSE(ApiKeys::FromText("same-key-0123456789\nsame-key-0123456789\n", "keys").ok());
  EXPECT_FALSE(ApiKeys::FromText("a b c-0123456789abcdef\n", "keys").ok());
  EXPECT_FALSE(ApiKeys::FromFile(Write("open-keys", "k-0123456789abcdef\n", 0644)).ok());
}

// A client's key file (tpserve-client, tpserve-http): the key of its first key line.
TEST_F(AuthTest, ClientKeyFileGivesItsFirstKey) {
  const std::string named = (dir_ / "client-named").string();
  ASSERT_TRUE(WriteSecretFile(named, "# mine\n\n  alice  alice-key-0123456789 \nbob bob-key-0123456789\n").ok());
  absl::StatusOr<std::string> key = ReadClientApiKey(named, "--api-key-file");
  ASSERT_TRUE(key.ok()) << key.status();
  EXPECT_EQ(*key, "alice-key-0123456789");
  const std::string bare = (dir_ / "client-bare").string();
  ASSERT_TRUE(WriteSecretFile(bare, "bare-key-0123456789\n").ok());
  EXPECT_EQ(ReadClientApiKey(bare, "F").value_or(""), "bare-key-0123456789");
  const std::string empty = (dir_ / "client-empty").string();
  ASSERT_TRUE(WriteSecretFile(empty, "# nothing\n").ok());
  key = ReadClientApiKey(empty, "--server-api-key-file");
  EXPECT_EQ(key.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(key.status().message(), "--server-api-key-file")) << key.status();
}

TEST_F(AuthTest, BearerTokenParsesOnlyTheBearerScheme) {
  EXPECT_EQ(ApiKeys::BearerToken("Bearer abc"), "abc");
  EXPECT_EQ(ApiKeys::BearerToken("bearer  abc "), "abc");
  EXPECT_EQ(ApiKeys::BearerToken("Basic abc"), std::nullopt);
  EXPECT_EQ(ApiKeys::BearerToken("Bearer "), std::nullopt);
  EXPECT_EQ(ApiKeys::BearerToken("abc"), std::nullopt);
}

TEST_F(AuthTest, ConstantTimeEqualsComparesWholeStrings) {
  EXPECT_TRUE(ConstantTimeEquals("abc", "abc"));
  EXPECT_FALSE(ConstantTimeEquals("abc", "abd"));
  EXPECT_FALSE(ConstantTimeEquals("abc", "ab"));
  EXPECT_TRUE(ConstantTimeEquals("", ""));
}

}  // namespace
}  // namespace tpserve
