// SafetensorsWriter: the byte layout Hugging Face writes, insertion order, metadata,
// bad Adds reported by Write, and atomic writes (nothing half-written on failure).
#include <gtest/gtest.h>

#include "model/safetensors.h"
#include "nlohmann/json.hpp"
#include "tests/model/safetensors_test_util.h"

namespace tpserve {
namespace {

using namespace testing_util;

TEST(SafetensorsWriterTest, LayoutIsPaddedHeaderThenDataInInsertionOrder) {
  const std::filesystem::path dir = FreshDir("layout");
  // Names deliberately out of alphabetical order.
  SafetensorsWriter w;
  const std::vector<float> z = RandomValues(7 * 3, 11), a = RandomValues(5, 12), m = RandomValues(2, 13);
  w.AddF32("z.first", DType::kF32, {7, 3}, z);
  w.AddF32("a.second", DType::kBF16, {5}, a);
  w.AddF32("m.third", DType::kF16, {1, 2}, m);
  EXPECT_EQ(w.data_bytes(), 7u * 3 * 4 + 5 * 2 + 2 * 2);
  ASSERT_TRUE(w.Write(dir / "m.safetensors").ok());

  const std::vector<uint8_t> file = ReadBytes(dir / "m.safetensors");
  const uint64_t n = HeaderLength(file);
  EXPECT_EQ(n % 8, 0u) << "header must be padded to a multiple of 8 bytes";
  EXPECT_EQ(file.size(), 8 + n + w.data_bytes());
  const std::string text = HeaderText(file);
  const size_t last = text.find_last_not_of(' ');
  EXPECT_EQ(text[last], '}');  // padding is trailing spaces only
  const nlohmann::json header = nlohmann::json::parse(text);
  EXPECT_EQ(header["__metadata__"], nlohmann::json({{"format", "pt"}}));
  EXPECT_EQ(header["z.first"]["dtype"], "F32");
  EXPECT_EQ(header["z.first"]["shape"], nlohmann::json({7, 3}));
  EXPECT_EQ(header["z.first"]["data_offsets"], nlohmann::json({0, 84}));
  EXPECT_EQ(header["a.second"]["dtype"], "BF16");
  EXPECT_EQ(header["a.second"]["data_offsets"], nlohmann::json({84, 94}));
  EXPECT_EQ(header["m.third"]["dtype"], "F16");
  EXPECT_EQ(header["m.third"]["data_offsets"], nlohmann::json({94, 98}));

  // The data bytes are exactly the converted values, back to back.
  const uint8_t* data = file.data() + 8 + n;
  const std::vector<uint8_t> ez = Expected(z, DType::kF32, DType::kF32);
  const std::vector<uint8_t> ea = Expected(a, DType::kBF16, DType::kBF16);
  const std::vector<uint8_t> em = Expected(m, DType::kF16, DType::kF16);
  EXPECT_TRUE(std::equal(ez.begin(), ez.end(), data));
  EXPECT_TRUE(std::equal(ea.begin(), ea.end(), data + 84));
  EXPECT_TRUE(std::equal(em.begin(), em.end(), data + 94));
}

TEST(SafetensorsWriterTest, AddCopiesRawBytes) {
  const std::filesystem::path dir = FreshDir("raw");
  std::vector<uint16_t> bits = {0x3f80, 0xc000, 0x0001, 0x7f80, 0x1234};  // bf16 1, -2, tiny, inf, x
  SafetensorsWriter w;
  w.Add("t", DType::kBF16, {5}, bits.data());
  bits[0] = 0;  // the writer holds its own copy
  ASSERT_TRUE(w.Write(dir / "raw.safetensors").ok());
  absl::StatusOr<std::unique_ptr<Checkpoint>> c = Checkpoint::Open(dir / "raw.safetensors");
  ASSERT_TRUE(c.ok()) << c.status();
  std::vector<uint16_t> back(5);
  ASSERT_TRUE((*c)->ReadRows("t", 0, 5, DType::kBF16, back.data()).ok());
  EXPECT_EQ(back, (std::vector<uint16_t>{0x3f80, 0xc000, 0x0001, 0x7f80, 0x1234}));
}

TEST(SafetensorsWriterTest, EmptyAndScalarTensors) {
  const std::filesystem::path dir = FreshDir("empty");
  SafetensorsWriter w;
  w.AddF32("empty", DType::kF16, {0, 19}, {});
  const float pi = 3.25f;
  w.AddF32("scalar", DType::kF32, {}, std::span<const float>(&pi, 1));
  ASSERT_TRUE(w.Write(dir / "e.safetensors").ok());
  absl::StatusOr<std::unique_ptr<Checkpoint>> c = Checkpoint::Open(dir / "e.safetensors");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE((*c)->ReadF32("empty")->empty());
  EXPECT_EQ(*(*c)->ReadF32("scalar"), std::vector<float>{3.25f});
}

TEST(SafetensorsWriterTest, DuplicateNameIsAnErrorAndWritesNothing) {
  const std::filesystem::path dir = FreshDir("dup");
  SafetensorsWriter w;
  w.AddF32("x", DType::kF32, {1}, RandomValues(1, 3));
  w.AddF32("x", DType::kF32, {1}, RandomValues(1, 4));
  const absl::Status s = w.Write(dir / "d.safetensors");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("'x'"), std::string::npos) << s;
  EXPECT_TRUE(std::filesystem::is_empty(dir));
}

TEST(SafetensorsWriterTest, ValueCountMismatchIsReportedByWrite) {
  const std::filesystem::path dir = FreshDir("count");
  SafetensorsWriter w;
  w.AddF32("w", DType::kBF16, {3, 7}, RandomValues(20, 5));
  const absl::Status s = w.Write(dir / "c.safetensors");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("'w'"), std::string::npos) << s;
  EXPECT_NE(s.message().find("20 values"), std::string::npos) << s;
  EXPECT_TRUE(std::filesystem::is_empty(dir));
}

TEST(SafetensorsWriterTest, FailedWriteLeavesOldFileAndNoTemporary) {
  const std::filesystem::path dir = FreshDir("atomic");
  SafetensorsWriter good;
  good.AddF32("w", DType::kF32, {2}, RandomValues(2, 6));
  ASSERT_TRUE(good.Write(dir / "model.safetensors").ok());
  const std::vector<uint8_t> before = ReadBytes(dir / "model.safetensors");

  SafetensorsWriter bad;
  bad.AddF32("w", DType::kF32, {-1}, {});
  EXPECT_FALSE(bad.Write(dir / "model.safetensors").ok());
  EXPECT_EQ(ReadBytes(dir / "model.safetensors"), before);

  // A folder that does not exist: an error naming the path, nothing created.
  const absl::Status s = good.Write(dir / "missing" / "model.safetensors");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("missing"), std::string::npos) << s;

  // Overwriting succeeds and leaves only the final file behind.
  SafetensorsWriter other;
  other.AddF32("v", DType::kF16, {3}, RandomValues(3, 7));
  ASSERT_TRUE(other.Write(dir / "model.safetensors").ok());
  int files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    ++files;
    EXPECT_EQ(e.path().filename(), "model.safetensors");
  }
  EXPECT_EQ(files, 1);
  EXPECT_NE(ReadBytes(dir / "model.safetensors"), before);
}

}  // namespace
}  // namespace tpserve
