#include "comm/store.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <thread>

#include "tests/testing/seed.h"

namespace tpserve {
namespace {

using std::chrono::milliseconds;

std::string FreshDir() {
  std::string tmpl = (std::filesystem::temp_directory_path() / "tpserve-store-XXXXXX").string();
  char* dir = mkdtemp(tmpl.data());
  EXPECT_NE(dir, nullptr);
  return tmpl;
}

TEST(FileStore, SetThenGetReturnsTheBytes) {
  auto store = FileStore::Open(FreshDir());
  ASSERT_TRUE(store.ok()) << store.status();
  std::string value("a\0b\xff\n", 5);
  ASSERT_TRUE((*store)->Set("key/with spaces", value).ok());
  auto got = (*store)->Get("key/with spaces", milliseconds(0));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, value);
  // Keys that differ only in escaped characters stay apart.
  ASSERT_TRUE((*store)->Set("key%2Fwith spaces", "other").ok());
  EXPECT_EQ(*(*store)->Get("key/with spaces", milliseconds(0)), value);
  ASSERT_TRUE((*store)->Set("", "").ok());
  EXPECT_EQ(*(*store)->Get("", milliseconds(0)), "");
}

TEST(FileStore, LargeRandomValueRoundTrips) {
  uint32_t seed = testing_util::TestSeed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  std::mt19937 rng(seed);
  std::string value(100003, '\0');
  for (char& c : value) c = static_cast<char>(rng());
  auto store = FileStore::Open(FreshDir());
  ASSERT_TRUE(store.ok());
  ASSERT_TRUE((*store)->Set("big", value).ok());
  EXPECT_EQ(*(*store)->Get("big", milliseconds(10)), value);
}

TEST(FileStore, MissingKeyIsDeadlineExceededAfterTheTimeout) {
  auto store = FileStore::Open(FreshDir());
  ASSERT_TRUE(store.ok());
  auto start = std::chrono::steady_clock::now();
  auto got = (*store)->Get("never", milliseconds(150));
  auto waited = std::chrono::steady_clock::now() - start;
  EXPECT_TRUE(absl::IsDeadlineExceeded(got.status())) << got.status();
  EXPECT_NE(got.status().message().find("never"), std::string::npos);
  EXPECT_GE(waited, milliseconds(150));
  EXPECT_LT(waited, milliseconds(2000));
}

TEST(FileStore, GetWaitsForALaterSetFromAnotherStoreOnTheSameDirectory) {
  std::string dir = FreshDir();
  auto reader = FileStore::Open(dir);
  auto writer = FileStore::Open(dir);
  ASSERT_TRUE(reader.ok() && writer.ok());
  std::thread t([&] {
    std::this_thread::sleep_for(milliseconds(100));
    ASSERT_TRUE((*writer)->Set("late", "value").ok());
  });
  auto got = (*reader)->Get("late", milliseconds(5000));
  t.join();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, "value");
}

TEST(FileStore, WaitNamesEveryMissingKey) {
  auto store = FileStore::Open(FreshDir());
  ASSERT_TRUE(store.ok());
  ASSERT_TRUE((*store)->Set("a", "1").ok());
  EXPECT_TRUE((*store)->Wait({"a"}, milliseconds(0)).ok());
  absl::Status s = (*store)->Wait({"a", "b", "c"}, milliseconds(50));
  EXPECT_TRUE(absl::IsDeadlineExceeded(s)) << s;
  EXPECT_NE(s.message().find("b, c"), std::string::npos) << s;
}

TEST(FileStore, OpenFailsClearlyOnAFile) {
  std::string dir = FreshDir();
  ASSERT_TRUE((*FileStore::Open(dir))->Set("x", "1").ok());
  auto bad = FileStore::Open(dir + "/k_x/sub");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInternal);
  EXPECT_NE(bad.status().message().find("k_x/sub"), std::string::npos) << bad.status();
}

TEST(PrefixStore, KeepsNamespacesApart) {
  auto store = FileStore::Open(FreshDir());
  ASSERT_TRUE(store.ok());
  PrefixStore a("a", **store), b("b", **store);
  ASSERT_TRUE(a.Set("k", "from a").ok());
  ASSERT_TRUE(b.Set("k", "from b").ok());
  EXPECT_EQ(*a.Get("k", milliseconds(0)), "from a");
  EXPECT_EQ(*b.Get("k", milliseconds(0)), "from b");
  EXPECT_EQ(*(*store)->Get("a/k", milliseconds(0)), "from a");
  EXPECT_TRUE(absl::IsDeadlineExceeded(a.Get("missing", milliseconds(0)).status()));
}

}  // namespace
}  // namespace tpserve
