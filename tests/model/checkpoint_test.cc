// Checkpoint: round trips through SafetensorsWriter in every dtype (whole tensors,
// row and column slices with odd sizes and edge ranges, every output dtype), sharded
// checkpoints with an index, and the errors for bad reads and bad indexes.
#include <gtest/gtest.h>

#include <fstream>

#include "model/safetensors.h"
#include "tests/model/safetensors_test_util.h"

namespace tpserve {
namespace {

using namespace testing_util;

constexpr DType kAll[] = {DType::kF32, DType::kF16, DType::kBF16};
constexpr uint32_t kSeed = 20240611;

// Expected bytes of rows [r0, r0 + nr) and of columns [c0, c0 + nc) of a [rows, cols]
// matrix whose full expected bytes are `all` with element size `es`.
std::vector<uint8_t> SliceRows(const std::vector<uint8_t>& all, size_t cols, size_t es, size_t r0, size_t nr) {
  return {all.begin() + static_cast<std::ptrdiff_t>(r0 * cols * es),
          all.begin() + static_cast<std::ptrdiff_t>((r0 + nr) * cols * es)};
}
std::vector<uint8_t> SliceCols(const std::vector<uint8_t>& all, size_t rows, size_t cols, size_t es,
                               size_t c0, size_t nc) {
  std::vector<uint8_t> out;
  for (size_t r = 0; r < rows; ++r) {
    const auto row = all.begin() + static_cast<std::ptrdiff_t>((r * cols + c0) * es);
    out.insert(out.end(), row, row + static_cast<std::ptrdiff_t>(nc * es));
  }
  return out;
}

void WriteIndex(const std::filesystem::path& dir, const std::string& json) {
  std::ofstream(dir / "model.safetensors.index.json") << json;
}

// Checks every slice of a [7, 19] tensor written in `stored`, read into every dtype.
void CheckMatrix(const Checkpoint& c, const std::string& name, const std::vector<float>& values, DType stored) {
  constexpr size_t kRows = 7, kCols = 19;
  for (DType out : kAll) {
    SCOPED_TRACE(::testing::Message() << name << " stored " << DTypeName(stored) << " read as " << DTypeName(out));
    const size_t es = DTypeSize(out);
    const std::vector<uint8_t> all = Expected(values, stored, out);
    const std::pair<size_t, size_t> row_ranges[] = {{0, 7}, {0, 1}, {6, 1}, {2, 3}, {3, 4}, {7, 0}, {0, 0}};
    for (auto [r0, nr] : row_ranges) {
      std::vector<uint8_t> got(nr * kCols * es, 0xAB);
      ASSERT_TRUE(c.ReadRows(name, static_cast<int64_t>(r0), static_cast<int64_t>(nr), out, got.data()).ok());
      EXPECT_EQ(got, SliceRows(all, kCols, es, r0, nr)) << "rows " << r0 << " + " << nr;
    }
    const std::pair<size_t, size_t> col_ranges[] = {{0, 19}, {0, 1}, {18, 1}, {5, 7}, {12, 7}, {19, 0}};
    for (auto [c0, nc] : col_ranges) {
      std::vector<uint8_t> got(kRows * nc * es, 0xAB);
      ASSERT_TRUE(c.ReadCols(name, static_cast<int64_t>(c0), static_cast<int64_t>(nc), out, got.data()).ok());
      EXPECT_EQ(got, SliceCols(all, kRows, kCols, es, c0, nc)) << "cols " << c0 << " + " << nc;
    }
  }
  absl::StatusOr<std::vector<float>> whole = c.ReadF32(name);
  ASSERT_TRUE(whole.ok()) << whole.status();
  const std::vector<uint8_t> expect = Expected(values, stored, DType::kF32);
  ASSERT_EQ(whole->size() * 4, expect.size());
  EXPECT_EQ(std::memcmp(whole->data(), expect.data(), expect.size()), 0);
}

TEST(CheckpointTest, SingleFileRoundTripInEveryDtype) {
  SCOPED_TRACE(::testing::Message() << "seed " << kSeed);
  const std::filesystem::path dir = FreshDir("single");
  SafetensorsWriter w;
  std::vector<std::vector<float>> values;
  for (DType d : kAll) {
    values.push_back(RandomValues(7 * 19, kSeed + static_cast<uint32_t>(values.size())));
    w.AddF32(std::string("m.") + std::string(DTypeName(d)), d, {7, 19}, values.back());
  }
  ASSERT_TRUE(w.Write(dir / "model.safetensors").ok());
  absl::StatusOr<std::unique_ptr<Checkpoint>> c = Checkpoint::Open(dir);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ((*c)->TensorNames(), (std::vector<std::string>{"m.BF16", "m.F16", "m.F32"}));
  for (size_t i = 0; i < 3; ++i) {
    const std::string name = std::string("m.") + std::string(DTypeName(kAll[i]));
    const TensorInfo* info = *(*c)->Info(name);
    EXPECT_EQ(info->dtype, kAll[i]);
    EXPECT_EQ(info->shape, (std::vector<int64_t>{7, 19}));
    EXPECT_TRUE(info->readable);
    CheckMatrix(**c, name, values[i], kAll[i]);
  }
}

TEST(CheckpointTest, RowsOfHigherRankAndOneDimensionalTensors) {
  const std::filesystem::path dir = FreshDir("rank");
  const std::vector<float> cube = RandomValues(3 * 5 * 2, kSeed + 7), vec = RandomValues(11, kSeed + 8);
  SafetensorsWriter w;
  w.AddF32("cube", DType::kBF16, {3, 5, 2}, cube);  // rows of width 10
  w.AddF32("vec", DType::kF16, {11}, vec);           // rows of width 1
  ASSERT_TRUE(w.Write(dir / "model.safetensors").ok());
  absl::StatusOr<std::unique_ptr<Checkpoint>> c = Checkpoint::Open(dir);
  ASSERT_TRUE(c.ok()) << c.status();
  std::vector<float> got(10);
  ASSERT_TRUE((*c)->ReadRows("cube", 2, 1, DType::kF32, got.data()).ok());
  std::vector<uint8_t> e = Expected(cube, DType::kBF16, DType::kF32);
  EXPECT_EQ(std::memcmp(got.data(), e.data() + 20 * 4, 10 * 4), 0);
  ASSERT_TRUE((*c)->ReadRows("vec", 9, 2, DType::kF32, got.data()).ok());
  e = Expected(vec, DType::kF16, DType::kF32);
  EXPECT_EQ(std::memcmp(got.data(), e.data() + 9 * 4, 2 * 4), 0);
  const absl::Status s = (*c)->ReadCols("cube", 0, 1, DType::kF32, got.data());
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("'cube'"), std::string::npos) << s;
  EXPECT_NE(s.message().find("2-D"), std::string::npos) << s;
  EXPECT_NE(s.message().find("model.safetensors"), std::string::npos) << s;
}

TEST(CheckpointTest, MisalignedDataSectionReadsCorrectly) {
  // Hand-made files need not pad the header: here 8 + N is odd, so every element
  // sits at an odd address in the mapping.
  const std::filesystem::path dir = FreshDir("misaligned");
  const std::vector<float> v = RandomValues(7 * 19, kSeed + 9);
  SafetensorsWriter w;
  w.AddF32("m", DType::kF32, {7, 19}, v);
  ASSERT_TRUE(w.Write(dir / "a.safetensors").ok());
  const std::vector<uint8_t> good = ReadBytes(dir / "a.safetensors");
  std::string header = HeaderText(good);
  header.erase(header.find_last_not_of(' ') + 1);
  if (header.size() % 2 == 0) header += ' ';
  WriteBytes(dir / "model.safetensors", WithHeader(good, header));
  std::filesystem::remove(dir / "a.safetensors");
  absl::StatusOr<std::unique_ptr<Checkpoint>> c = Checkpoint::Open(dir);
  ASSERT_TRUE(c.ok()) << c.status();
  CheckMatrix(**c, "m", v, DType::kF32);
}

TEST(CheckpointTest, ShardedAcrossThreeFiles) {
  SCOPED_TRACE(::testing::Message() << "seed " << kSeed);
  const std::filesystem::path dir = FreshDir("sharded");
  std::vector<std::vector<float>> values;
  std::string weight_map;
  for (int shard = 0; shard < 3; ++shard) {
    SafetensorsWriter w;
    const std::string file = "model-0000" + std::to_string(shard + 1) + "-of-00003.safetensors";
    for (int t = 0; t < 2; ++t) {
      const std::string name = "layers." + std::to_string(shard) + ".w" + std::to_string(t);
      values.push_back(RandomValues(7 * 19, kSeed + 100 + static_cast<uint32_t>(values.size())));
      w.AddF32(name, kAll[(shard + t) % 3], {7, 19}, values.back());
      weight_map += (weight_map.empty() ? "" : ",") + ("\"" + name + "\":\"" + file + "\"");
    }
    ASSERT_TRUE(w.Write(dir / file).ok());
  }
  WriteIndex(dir, R"({"metadata":{"total_size":0},"weight_map":{)" + weight_map + "}}");
  absl::StatusOr<std::unique_ptr<Checkpoint>> c = Checkpoint::Open(dir);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ((*c)->TensorNames().size(), 6u);
  for (int shard = 0; shard < 3; ++shard) {
    for (int t = 0; t < 2; ++t) {
      const std::string name = "layers." + std::to_string(shard) + ".w" + std::to_string(t);
      EXPECT_TRUE((*c)->Has(name));
      CheckMatrix(**c, name, values[static_cast<size_t>(shard * 2 + t)], kAll[(shard + t) % 3]);
    }
  }
  EXPECT_FALSE((*c)->Has("layers.9.w0"));
}

TEST(CheckpointTest, SingleFileWinsOverIndexLikeTransformers) {
  const std::filesystem::path dir = FreshDir("both");
  SafetensorsWriter w;
  w.AddF32("single", DType::kF32, {1}, RandomValues(1, kSeed + 10));
  ASSERT_TRUE(w.Write(dir / "model.safetensors").ok());
  WriteIndex(dir, R"({"weight_map":{"sharded":"model-00001-of-00001.safetensors"}})");
  absl::StatusOr<std::unique_ptr<Checkpoint>> c = Checkpoint::Open(dir);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ((*c)->TensorNames(), std::vector<std::string>{"single"});
}

// ---- errors ----

#define EXPECT_MENTIONS(status, text)                                        \
  EXPECT_NE(std::string((status).message()).find(text), std::string::npos) \
      << "expected '" << (text) << "' in: " << (status)

class CheckpointErrorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = FreshDir("err");
    SafetensorsWriter w;
    w.AddF32("w", DType::kF16, {7, 19}, RandomValues(7 * 19, kSeed + 50));
    ASSERT_TRUE(w.Write(dir_ / "model-00001-of-00001.safetensors").ok());
  }
  absl::Status OpenWithIndex(const std::string& index) {
    WriteIndex(dir_, index);
    return Checkpoint::Open(dir_).status();
  }
  std::filesystem::path dir_;
};

TEST_F(CheckpointErrorTest, EmptyFolder) {
  const absl::Status s = Checkpoint::Open(FreshDir("nothing")).status();
  ASSERT_FALSE(s.ok());
  EXPECT_MENTIONS(s, "model.safetensors.index.json");
}

TEST_F(CheckpointErrorTest, IndexListsTensorMissingFromItsFile) {
  const absl::Status s = OpenWithIndex(
      R"({"weight_map":{"w":"model-00001-of-00001.safetensors","ghost":"model-00001-of-00001.safetensors"}})");
  ASSERT_FALSE(s.ok());
  EXPECT_MENTIONS(s, "'ghost'");
  EXPECT_MENTIONS(s, "model-00001-of-00001.safetensors");
  EXPECT_MENTIONS(s, "does not contain");
}

TEST_F(CheckpointErrorTest, IndexPointsAtMissingFile) {
  const absl::Status s = OpenWithIndex(R"({"weight_map":{"w":"model-00002-of-00002.safetensors"}})");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_MENTIONS(s, "'w'");
  EXPECT_MENTIONS(s, "model-00002-of-00002.safetensors");
}

TEST_F(CheckpointErrorTest, IndexIsInvalidJson) {
  const absl::Status s = OpenWithIndex(R"({"weight_map":{"w":)");
  ASSERT_FALSE(s.ok());
  EXPECT_MENTIONS(s, "model.safetensors.index.json");
  EXPECT_MENTIONS(s, "not valid JSON");
}

TEST_F(CheckpointErrorTest, IndexWithoutWeightMap) {
  const absl::Status s = OpenWithIndex(R"({"metadata":{}})");
  ASSERT_FALSE(s.ok());
  EXPECT_MENTIONS(s, "weight_map");
}

TEST_F(CheckpointErrorTest, IndexEntryLeavesTheFolder) {
  for (const char* target : {"../model-00001-of-00001.safetensors", "/etc/passwd", "", "7"}) {
    const std::string value = std::string(target) == "7" ? "7" : "\"" + std::string(target) + "\"";
    const absl::Status s = OpenWithIndex(R"({"weight_map":{"w":)" + value + "}}");
    ASSERT_FALSE(s.ok()) << target;
    EXPECT_MENTIONS(s, "'w'");
    EXPECT_MENTIONS(s, "not a file name");
  }
}

TEST_F(CheckpointErrorTest, BrokenShardNamesIndexFileAndTensor) {
  WriteBytes(dir_ / "model-00001-of-00001.safetensors", {1, 2, 3});
  const absl::Status s = OpenWithIndex(R"({"weight_map":{"w":"model-00001-of-00001.safetensors"}})");
  ASSERT_FALSE(s.ok());
  EXPECT_MENTIONS(s, "'w'");
  EXPECT_MENTIONS(s, (dir_ / "model-00001-of-00001.safetensors").string());
  EXPECT_MENTIONS(s, "3 bytes");
}

class CheckpointReadErrorTest : public CheckpointErrorTest {
 protected:
  void SetUp() override {
    CheckpointErrorTest::SetUp();
    WriteIndex(dir_, R"({"weight_map":{"w":"model-00001-of-00001.safetensors"}})");
    absl::StatusOr<std::unique_ptr<Checkpoint>> c = Checkpoint::Open(dir_);
    ASSERT_TRUE(c.ok()) << c.status();
    ckpt_ = std::move(*c);
  }
  void ExpectOutOfRange(const absl::Status& s, const char* what) {
    ASSERT_FALSE(s.ok()) << what;
    EXPECT_EQ(s.code(), absl::StatusCode::kOutOfRange) << s;
    EXPECT_MENTIONS(s, "'w'");
    EXPECT_MENTIONS(s, "model-00001-of-00001.safetensors");
  }
  std::unique_ptr<Checkpoint> ckpt_;
  std::vector<float> out_ = std::vector<float>(7 * 19);
};

TEST_F(CheckpointReadErrorTest, RowsOutsideTensor) {
  ExpectOutOfRange(ckpt_->ReadRows("w", 5, 3, DType::kF32, out_.data()), "past the end");
  ExpectOutOfRange(ckpt_->ReadRows("w", -1, 2, DType::kF32, out_.data()), "negative begin");
  ExpectOutOfRange(ckpt_->ReadRows("w", 0, -1, DType::kF32, out_.data()), "negative count");
  ExpectOutOfRange(ckpt_->ReadRows("w", 8, 0, DType::kF32, out_.data()), "begin past the end");
  ExpectOutOfRange(ckpt_->ReadRows("w", 1, INT64_MAX, DType::kF32, out_.data()), "overflow");
}

TEST_F(CheckpointReadErrorTest, ColsOutsideTensor) {
  ExpectOutOfRange(ckpt_->ReadCols("w", 18, 2, DType::kF32, out_.data()), "past the end");
  ExpectOutOfRange(ckpt_->ReadCols("w", -3, 3, DType::kF32, out_.data()), "negative begin");
  ExpectOutOfRange(ckpt_->ReadCols("w", 2, INT64_MAX, DType::kF32, out_.data()), "overflow");
}

TEST_F(CheckpointReadErrorTest, UnknownTensorName) {
  for (const absl::Status& s : {ckpt_->ReadRows("nope", 0, 1, DType::kF32, out_.data()),
                                ckpt_->ReadCols("nope", 0, 1, DType::kF32, out_.data()),
                                ckpt_->ReadF32("nope").status(), ckpt_->Info("nope").status()}) {
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
    EXPECT_MENTIONS(s, "'nope'");
    EXPECT_MENTIONS(s, dir_.string());
  }
}

}  // namespace
}  // namespace tpserve
