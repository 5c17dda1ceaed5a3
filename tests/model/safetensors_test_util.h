// Helpers for the safetensors tests: fresh temp folders, seeded values, and byte
// surgery on files the writer made (edit the header JSON and fix the length prefix).
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "model/safetensors.h"

namespace tpserve::testing_util {

// A new empty folder under the gtest temp dir, unique per call.
inline std::filesystem::path FreshDir(const std::string& tag) {
  static std::atomic<int> counter{0};
  const ::testing::TestInfo* t = ::testing::UnitTest::GetInstance()->current_test_info();
  std::filesystem::path dir = std::filesystem::path(::testing::TempDir()) /
                              ("st_" + std::string(t ? t->name() : "x") + "_" + tag + "_" +
                               std::to_string(::getpid()) + "_" + std::to_string(counter++));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

// n seeded values in [-2, 2), never all zero.
inline std::vector<float> RandomValues(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// What reading `values` back as `out` yields after being stored as `stored`.
inline std::vector<uint8_t> Expected(const std::vector<float>& values, DType stored, DType out) {
  std::vector<uint8_t> mid(values.size() * DTypeSize(stored));
  ConvertDType(values.data(), DType::kF32, mid.data(), stored, values.size());
  std::vector<uint8_t> res(values.size() * DTypeSize(out));
  ConvertDType(mid.data(), stored, res.data(), out, values.size());
  return res;
}

inline std::vector<uint8_t> ReadBytes(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

inline void WriteBytes(const std::filesystem::path& p, const std::vector<uint8_t>& bytes) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

inline uint64_t HeaderLength(const std::vector<uint8_t>& file) {
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | file[static_cast<size_t>(i)];
  return n;
}

inline void SetHeaderLength(std::vector<uint8_t>& file, uint64_t n) {
  for (int i = 0; i < 8; ++i) file[static_cast<size_t>(i)] = static_cast<uint8_t>(n >> (8 * i));
}

inline std::string HeaderText(const std::vector<uint8_t>& file) {
  return std::string(file.begin() + 8, file.begin() + 8 + static_cast<std::ptrdiff_t>(HeaderLength(file)));
}

// Replaces the header JSON with `header` (any bytes), keeping the data section.
inline std::vector<uint8_t> WithHeader(const std::vector<uint8_t>& file, const std::string& header) {
  const size_t data_at = 8 + HeaderLength(file);
  // Sized once and copied into: GCC 12 at -O3 reads the growing inserts into an
  // 8-byte vector as out of bounds (-Warray-bounds, a false positive).
  std::vector<uint8_t> out(8 + header.size() + (file.size() - data_at));
  SetHeaderLength(out, header.size());
  std::copy(header.begin(), header.end(), out.begin() + 8);
  std::copy(file.begin() + static_cast<std::ptrdiff_t>(data_at), file.end(),
            out.begin() + 8 + static_cast<std::ptrdiff_t>(header.size()));
  return out;
}

// Replaces the first occurrence of `from` in the header (which must occur).
inline std::vector<uint8_t> EditHeader(const std::vector<uint8_t>& file, const std::string& from,
                                       const std::string& to) {
  std::string h = HeaderText(file);
  const size_t at = h.find(from);
  EXPECT_NE(at, std::string::npos) << "'" << from << "' not in header " << h;
  if (at != std::string::npos) h.replace(at, from.size(), to);
  return WithHeader(file, h);
}

// A writer-made file with tensors "a.weight" F32 [3, 5] and "b.bias" BF16 [4].
inline std::vector<uint8_t> GoodFile(const std::filesystem::path& dir) {
  SafetensorsWriter w;
  w.AddF32("a.weight", DType::kF32, {3, 5}, RandomValues(15, 1));
  w.AddF32("b.bias", DType::kBF16, {4}, RandomValues(4, 2));
  const std::filesystem::path p = dir / "good.safetensors";
  EXPECT_TRUE(w.Write(p).ok());
  return ReadBytes(p);
}

}  // namespace tpserve::testing_util
