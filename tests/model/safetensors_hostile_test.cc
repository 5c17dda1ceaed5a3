// Broken and hostile single files: each is made from a good writer-made file by byte
// surgery, and each must be a clear error naming the file (and the tensor where one
// is involved), never a crash or an out-of-bounds read.
#include <gtest/gtest.h>

#include "model/safetensors.h"
#include "tests/model/safetensors_test_util.h"

namespace tpserve {
namespace {

using namespace testing_util;

// Good file tensors: "a.weight" F32 [3, 5] at [0, 60), "b.bias" BF16 [4] at [60, 68).
constexpr const char* kA = R"("a.weight":{"dtype":"F32","shape":[3,5],"data_offsets":[0,60]})";

class HostileFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = FreshDir("hostile");
    good_ = GoodFile(dir_);
  }
  // Writes `bytes` and opens them both ways; returns the error message (which must
  // name the file), or fails the test when the file opens.
  std::string OpenError(const std::vector<uint8_t>& bytes) {
    const std::filesystem::path p = dir_ / "bad.safetensors";
    WriteBytes(p, bytes);
    absl::StatusOr<std::unique_ptr<SafetensorsFile>> f = SafetensorsFile::Open(p);
    EXPECT_FALSE(f.ok()) << "opened a broken file";
    if (f.ok()) return "";
    const std::string msg(f.status().message());
    EXPECT_NE(msg.find(p.string()), std::string::npos) << "message does not name the file: " << msg;
    absl::StatusOr<std::unique_ptr<Checkpoint>> c = Checkpoint::Open(p);
    EXPECT_FALSE(c.ok());
    // The parser alone gives the same verdict on the same bytes.
    EXPECT_FALSE(ParseSafetensorsHeader(bytes, "bad.safetensors").ok());
    return msg;
  }
  std::string OpenErrorWithA(const std::string& a_entry) {
    return OpenError(EditHeader(good_, kA, a_entry));
  }
  std::filesystem::path dir_;
  std::vector<uint8_t> good_;
};

#define EXPECT_MENTIONS(msg, text) \
  EXPECT_NE((msg).find(text), std::string::npos) << "expected '" << (text) << "' in: " << (msg)

TEST_F(HostileFileTest, GoodFileOpens) {
  WriteBytes(dir_ / "ok.safetensors", good_);
  ASSERT_TRUE(SafetensorsFile::Open(dir_ / "ok.safetensors").ok());
  ASSERT_TRUE(EditHeader(good_, kA, kA) == good_);  // surgery on an unchanged header is exact
}

TEST_F(HostileFileTest, EmptyFile) { EXPECT_MENTIONS(OpenError({}), "0 bytes"); }

TEST_F(HostileFileTest, ShorterThanEightBytes) {
  EXPECT_MENTIONS(OpenError(std::vector<uint8_t>(good_.begin(), good_.begin() + 5)), "5 bytes");
}

TEST_F(HostileFileTest, HeaderLengthPastEndOfFile) {
  std::vector<uint8_t> bad = good_;
  SetHeaderLength(bad, good_.size());  // 8 + N > file size
  EXPECT_MENTIONS(OpenError(bad), "past the end");
}

TEST_F(HostileFileTest, TruncatedInsideHeader) {
  EXPECT_MENTIONS(OpenError(std::vector<uint8_t>(good_.begin(), good_.begin() + 40)), "truncated");
}

TEST_F(HostileFileTest, AbsurdHeaderLength) {
  std::vector<uint8_t> bad = good_;
  SetHeaderLength(bad, ~uint64_t{0} - 3);  // 8 + N wraps around in 64 bits
  EXPECT_MENTIONS(OpenError(bad), "exceeds");
}

TEST_F(HostileFileTest, InvalidJson) {
  EXPECT_MENTIONS(OpenError(EditHeader(good_, "\"shape\":[3,5]", "\"shape\":[3,5")), "not valid JSON");
}

TEST_F(HostileFileTest, HeaderIsNotAnObject) {
  EXPECT_MENTIONS(OpenError(WithHeader(good_, "[1, 2, 3]")), "not a JSON object");
}

TEST_F(HostileFileTest, DeeplyNestedHeader) {
  EXPECT_MENTIONS(OpenError(WithHeader(good_, std::string(100000, '[') + std::string(100000, ']'))),
                  "nests deeper");
}

TEST_F(HostileFileTest, MetadataNotAnObject) {
  EXPECT_MENTIONS(OpenError(EditHeader(good_, "{\"format\":\"pt\"}", "7")), "__metadata__");
}

TEST_F(HostileFileTest, EntryNotAnObject) {
  EXPECT_MENTIONS(OpenErrorWithA(R"("a.weight":[1,2])"), "a.weight");
}

TEST_F(HostileFileTest, MissingDtype) {
  const std::string msg = OpenErrorWithA(R"("a.weight":{"shape":[3,5],"data_offsets":[0,60]})");
  EXPECT_MENTIONS(msg, "'a.weight'");
  EXPECT_MENTIONS(msg, "missing \"dtype\"");
}

TEST_F(HostileFileTest, MissingShape) {
  const std::string msg = OpenErrorWithA(R"("a.weight":{"dtype":"F32","data_offsets":[0,60]})");
  EXPECT_MENTIONS(msg, "'a.weight'");
  EXPECT_MENTIONS(msg, "missing \"shape\"");
}

TEST_F(HostileFileTest, MissingDataOffsets) {
  const std::string msg = OpenErrorWithA(R"("a.weight":{"dtype":"F32","shape":[3,5]})");
  EXPECT_MENTIONS(msg, "'a.weight'");
  EXPECT_MENTIONS(msg, "missing \"data_offsets\"");
}

TEST_F(HostileFileTest, DtypeNotAString) {
  const std::string msg = OpenErrorWithA(R"("a.weight":{"dtype":32,"shape":[3,5],"data_offsets":[0,60]})");
  EXPECT_MENTIONS(msg, "'a.weight'");
  EXPECT_MENTIONS(msg, "not a string");
}

TEST_F(HostileFileTest, ShapeNotAnArray) {
  const std::string msg = OpenErrorWithA(R"("a.weight":{"dtype":"F32","shape":"3x5","data_offsets":[0,60]})");
  EXPECT_MENTIONS(msg, "'a.weight'");
  EXPECT_MENTIONS(msg, "not an array");
}

TEST_F(HostileFileTest, DataOffsetsWrongArity) {
  const std::string msg = OpenErrorWithA(R"("a.weight":{"dtype":"F32","shape":[3,5],"data_offsets":[0,30,60]})");
  EXPECT_MENTIONS(msg, "'a.weight'");
  EXPECT_MENTIONS(msg, "data_offsets");
}

TEST_F(HostileFileTest, DataOffsetsNotIntegers) {
  const std::string msg = OpenErrorWithA(R"("a.weight":{"dtype":"F32","shape":[3,5],"data_offsets":["0",-60]})");
  EXPECT_MENTIONS(msg, "'a.weight'");
  EXPECT_MENTIONS(msg, "non-negative integers");
}

TEST_F(HostileFileTest, NegativeShape) {
  const std::string msg = OpenErrorWithA(R"("a.weight":{"dtype":"F32","shape":[-3,-5],"data_offsets":[0,60]})");
  EXPECT_MENTIONS(msg, "'a.weight'");
  EXPECT_MENTIONS(msg, "non-negative integer");
}

TEST_F(HostileFileTest, NonIntegerShape) {
  const std::string msg = OpenErrorWithA(R"("a.weight":{"dtype":"F32","shape":[3,5.0],"data_offsets":[0,60]})");
  EXPECT_MENTIONS(msg, "'a.weight'");
  EXPECT_MENTIONS(msg, "non-negative integer");
}

TEST_F(HostileFileTest, OffsetsOutsideData) {
  const std::string msg = OpenErrorWithA(R"("a.weight":{"dtype":"F32","shape":[3,5],"data_offsets":[1000,1060]})");
  EXPECT_MENTIONS(msg, "'a.weight'");
  EXPECT_MENTIONS(msg, "past the 68-byte data section");
}

TEST_F(HostileFileTest, DataSectionTruncated) {
  const std::string msg = OpenError(std::vector<uint8_t>(good_.begin(), good_.end() - 3));
  EXPECT_MENTIONS(msg, "'b.bias'");
  EXPECT_MENTIONS(msg, "truncated");
}

TEST_F(HostileFileTest, BeginAfterEnd) {
  const std::string msg = OpenErrorWithA(R"("a.weight":{"dtype":"F32","shape":[3,5],"data_offsets":[60,0]})");
  EXPECT_MENTIONS(msg, "'a.weight'");
  EXPECT_MENTIONS(msg, "begin > end");
}

TEST_F(HostileFileTest, OverlappingTensors) {
  // a.weight moves to [8, 68), over b.bias at [60, 68).
  const std::string msg = OpenErrorWithA(R"("a.weight":{"dtype":"F32","shape":[3,5],"data_offsets":[8,68]})");
  EXPECT_MENTIONS(msg, "'a.weight'");
  EXPECT_MENTIONS(msg, "'b.bias'");
  EXPECT_MENTIONS(msg, "overlaps");
}

TEST_F(HostileFileTest, EmptyTensorInsideAnother) {
  const std::string msg = OpenErrorWithA(R"("a.weight":{"dtype":"F32","shape":[3,5],"data_offsets":[0,60]},)"
                                         R"("c":{"dtype":"F32","shape":[0],"data_offsets":[4,4]})");
  EXPECT_MENTIONS(msg, "'c'");
  EXPECT_MENTIONS(msg, "overlaps");
}

TEST_F(HostileFileTest, ShapeDoesNotMatchByteRange) {
  const std::string msg = OpenErrorWithA(R"("a.weight":{"dtype":"F32","shape":[3,4],"data_offsets":[0,60]})");
  EXPECT_MENTIONS(msg, "'a.weight'");
  EXPECT_MENTIONS(msg, "needs 48 bytes");
}

TEST_F(HostileFileTest, ShapeProductOverflows) {
  // 2^32 * 2^32 wraps to 0 in 64 bits; so does 2^62 * 4 bytes.
  std::string msg = OpenErrorWithA(
      R"("a.weight":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,0]})");
  EXPECT_MENTIONS(msg, "'a.weight'");
  EXPECT_MENTIONS(msg, "overflows");
  msg = OpenErrorWithA(R"("a.weight":{"dtype":"F32","shape":[4611686018427387904],"data_offsets":[0,0]})");
  EXPECT_MENTIONS(msg, "'a.weight'");
  EXPECT_MENTIONS(msg, "overflows");
}

TEST_F(HostileFileTest, UnknownDtype) {
  const std::string msg = OpenErrorWithA(R"("a.weight":{"dtype":"Q4_K","shape":[3,5],"data_offsets":[0,60]})");
  EXPECT_MENTIONS(msg, "'a.weight'");
  EXPECT_MENTIONS(msg, "unknown dtype \"Q4_K\"");
}

TEST_F(HostileFileTest, OtherSafetensorsDtypeIsListedButNotReadable) {
  // [3, 5] I32 is 60 bytes, like F32: the file is valid, the tensor cannot be read.
  const std::filesystem::path p = dir_ / "i32.safetensors";
  WriteBytes(p, EditHeader(good_, "\"dtype\":\"F32\"", "\"dtype\":\"I32\""));
  absl::StatusOr<std::unique_ptr<Checkpoint>> c = Checkpoint::Open(p);
  ASSERT_TRUE(c.ok()) << c.status();
  const TensorInfo* info = *(*c)->Info("a.weight");
  EXPECT_EQ(info->dtype_name, "I32");
  EXPECT_FALSE(info->readable);
  std::vector<float> out(15);
  for (const absl::Status& s : {(*c)->ReadRows("a.weight", 0, 3, DType::kF32, out.data()),
                                (*c)->ReadCols("a.weight", 0, 5, DType::kF32, out.data()),
                                (*c)->ReadF32("a.weight").status()}) {
    ASSERT_FALSE(s.ok());
    const std::string msg(s.message());
    EXPECT_MENTIONS(msg, p.string());
    EXPECT_MENTIONS(msg, "'a.weight'");
    EXPECT_MENTIONS(msg, "I32");
  }
  EXPECT_TRUE((*c)->ReadF32("b.bias").ok());  // the other tensor is fine
}

}  // namespace
}  // namespace tpserve
