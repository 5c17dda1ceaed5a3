// SafetensorsWriter: builds one .safetensors file in memory and writes it atomically.
//
// Output layout (what Hugging Face writes):
//   [8 bytes: header length N, u64 little-endian]
//   [N bytes: JSON header, padded with spaces so that 8 + N is a multiple of 8]
//   [data: each tensor's bytes in insertion order, back to back]
// The header maps each name to {"dtype", "shape", "data_offsets": [begin, end]} with
// offsets relative to the start of the data, plus "__metadata__": {"format": "pt"}.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <set>

#include "absl/strings/str_cat.h"
#include "model/safetensors.h"
#include "nlohmann/json.hpp"

namespace tpserve {
namespace {

// Element count of `shape`, or nullopt when a dimension is negative or the count
// (times 4 bytes) would overflow.
std::optional<uint64_t> CheckedNumel(const std::vector<int64_t>& shape) {
  uint64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) return std::nullopt;
    if (__builtin_mul_overflow(n, static_cast<uint64_t>(d), &n)) return std::nullopt;
  }
  if (n > (uint64_t{1} << 60)) return std::nullopt;
  return n;
}

std::string ShapeString(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) absl::StrAppend(&s, i ? ", " : "", shape[i]);
  return s + "]";
}

// Writes all of `bytes` to fd; returns errno on failure, 0 on success.
int WriteAll(int fd, const uint8_t* bytes, size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(fd, bytes, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    bytes += w;
    n -= static_cast<size_t>(w);
  }
  return 0;
}

}  // namespace

void SafetensorsWriter::Add(std::string name, DType dtype, std::vector<int64_t> shape,
                            const void* data) {
  const std::optional<uint64_t> numel = CheckedNumel(shape);
  if (!numel) {
    if (add_error_.empty()) {
      add_error_ = absl::StrCat("tensor '", name, "' has an invalid shape ", ShapeString(shape),
                                " (negative or too large dimension)");
    }
    return;
  }
  const size_t nbytes = *numel * DTypeSize(dtype);
  Pending p{std::move(name), dtype, std::move(shape), std::vector<uint8_t>(nbytes)};
  if (nbytes > 0) std::memcpy(p.bytes.data(), data, nbytes);
  data_bytes_ += nbytes;
  tensors_.push_back(std::move(p));
}

void SafetensorsWriter::AddF32(std::string name, DType dtype, std::vector<int64_t> shape,
                               std::span<const float> values) {
  const std::optional<uint64_t> numel = CheckedNumel(shape);
  if (!numel || *numel != values.size()) {
    if (add_error_.empty()) {
      add_error_ = absl::StrCat("tensor '", name, "': shape ", ShapeString(shape), " does not match the ",
                                values.size(), " values given");
    }
    return;
  }
  std::vector<uint8_t> converted(values.size() * DTypeSize(dtype));
  if (!values.empty()) ConvertDType(values.data(), DType::kF32, converted.data(), dtype, values.size());
  Add(std::move(name), dtype, std::move(shape), converted.data());
}

absl::Status SafetensorsWriter::Write(const std::filesystem::path& path) const {
  if (!add_error_.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(path.string(), ": not written: ", add_error_));
  }
  // Header. ordered_json keeps insertion order, so the header reads like the data.
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  header["__metadata__"] = {{"format", "pt"}};
  std::set<std::string_view> seen;
  uint64_t offset = 0;
  for (const Pending& t : tensors_) {
    if (t.name == "__metadata__" || !seen.insert(t.name).second) {
      return absl::InvalidArgumentError(absl::StrCat(
          path.string(), ": not written: tensor name '", t.name, "' is used twice or reserved"));
    }
    header[t.name] = {{"dtype", DTypeName(t.dtype)},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + t.bytes.size()}}};
    offset += t.bytes.size();
  }
  std::string json = header.dump();
  json.append((8 - json.size() % 8) % 8, ' ');
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(static_cast<uint64_t>(json.size()) >> (8 * i));

  // Temporary file next to the target, then rename: readers never see half a file.
  const std::filesystem::path tmp = path.string() + absl::StrCat(".partial.", ::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    return absl::InternalError(absl::StrCat("cannot create ", tmp.string(), ": ", std::strerror(errno),
                                            "; check that the folder exists and is writable"));
  }
  int err = WriteAll(fd, len, sizeof len);
  if (!err) err = WriteAll(fd, reinterpret_cast<const uint8_t*>(json.data()), json.size());
  for (const Pending& t : tensors_) {
    if (!err) err = WriteAll(fd, t.bytes.data(), t.bytes.size());
  }
  if (::close(fd) != 0 && !err) err = errno;
  if (!err && std::rename(tmp.c_str(), path.c_str()) != 0) err = errno;
  if (err) {
    std::error_code ignored;
    std::filesystem::remove(tmp, ignored);
    return absl::InternalError(absl::StrCat("cannot write ", path.string(), ": ", std::strerror(err),
                                            " (nothing was written; check free disk space)"));
  }
  return absl::OkStatus();
}

}  // namespace tpserve
