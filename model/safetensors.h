// Reading safetensors checkpoints: one file or a sharded set with
// model.safetensors.index.json. Files are mmapped; a rank reads only its shard
// (a row or column range of a 2-D tensor) and never materialises the whole tensor.
//
// File format: [u64 little-endian header length N][N bytes JSON header][data].
// The header maps tensor names to {"dtype", "shape", "data_offsets": [begin, end]}
// (offsets relative to the start of the data) plus an optional "__metadata__".
// Every way a file can be broken or hostile is an error naming the file and the
// tensor: truncated file, header length past the end, invalid JSON, offsets outside
// the data or overlapping, shape x dtype size != byte range, unknown dtype.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "model/dtype.h"

namespace tpserve {

// One header entry. A header may list any safetensors dtype (I64, U8, F64, ...; a
// real checkpoint can carry one); only F32/F16/BF16 tensors can be read, the others
// have readable == false and `dtype` is meaningless for them.
struct TensorInfo {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;  // row-major
  uint64_t begin = 0;          // byte offset of the first element, relative to the data section
  uint64_t end = 0;            // one past the last byte
  std::string dtype_name;      // as spelled in the header: "BF16", "I64", ...
  size_t element_size = 0;     // bytes per element of dtype_name
  bool readable = true;        // dtype_name is F32, F16 or BF16
  int64_t numel() const;
};

// Headers longer than this are rejected (the reference implementation's limit).
inline constexpr uint64_t kMaxSafetensorsHeaderBytes = 100'000'000;

// Parses and validates a whole safetensors file image (header + data).
// `file_name` is only used in error messages. Never reads outside `file`.
// Returns the tensors sorted by `begin` (the order of their bytes in the file);
// every [begin, end) lies inside the data section and no two overlap.
absl::StatusOr<std::vector<TensorInfo>> ParseSafetensorsHeader(std::span<const uint8_t> file,
                                                               std::string_view file_name);

// One mmapped .safetensors file.
class SafetensorsFile {
 public:
  static absl::StatusOr<std::unique_ptr<SafetensorsFile>> Open(const std::filesystem::path& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::filesystem::path& path() const { return path_; }
  const TensorInfo* Find(std::string_view name) const;  // nullptr when absent
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  // The tensor's raw bytes inside the mapping (valid while this object lives).
  std::span<const uint8_t> Bytes(const TensorInfo& info) const;
  // Lets the kernel take back the mapped pages covering `bytes` (a range inside
  // this mapping) once they have been copied out: they leave this process's
  // resident set (a later read faults them in again from the page cache). Keeps
  // a rank's RSS near its shard even when a column slice touches every row.
  void DropPages(std::span<const uint8_t> bytes) const;

 private:
  SafetensorsFile() = default;
  std::filesystem::path path_;
  const uint8_t* map_ = nullptr;
  size_t map_size_ = 0;
  size_t data_offset_ = 0;  // 8 + header length
  std::vector<TensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> index_;
};

// All tensors of a checkpoint folder: model.safetensors, or (when that is absent, as
// Hugging Face transformers decides) the files named by model.safetensors.index.json
// ("weight_map": tensor -> file name in the folder); only the tensors the index lists
// are visible. A tensor listed in the index but missing from its file, a missing or
// broken shard, or a file name leading out of the folder is an error at Open. Open
// also accepts the path of one .safetensors file. Reads check dtype (F32/F16/BF16
// only) and ranges and never touch bytes outside the requested slice.
class Checkpoint {
 public:
  static absl::StatusOr<std::unique_ptr<Checkpoint>> Open(const std::filesystem::path& dir);

  bool Has(std::string_view name) const;
  // Metadata; NotFound naming the tensor and the folder when absent.
  absl::StatusOr<const TensorInfo*> Info(std::string_view name) const;
  std::vector<std::string> TensorNames() const;  // sorted

  // Reads rows [row_begin, row_begin + row_count) of a tensor viewed as
  // [shape[0], prod(shape[1:])] (a 1-D tensor is [shape[0], 1]) into `out`,
  // converting to `out_dtype`. `out` holds row_count * row_width elements.
  absl::Status ReadRows(std::string_view name, int64_t row_begin, int64_t row_count,
                        DType out_dtype, void* out) const;
  // Reads columns [col_begin, col_begin + col_count) of a 2-D tensor [rows, cols]
  // into `out` as [rows, col_count], converting to `out_dtype`.
  absl::Status ReadCols(std::string_view name, int64_t col_begin, int64_t col_count,
                        DType out_dtype, void* out) const;
  // The whole tensor as float32.
  absl::StatusOr<std::vector<float>> ReadF32(std::string_view name) const;

 private:
  struct Entry {
    const SafetensorsFile* file;
    const TensorInfo* info;
  };
  // A tensor whose dtype can be read, and how errors about it begin
  // ("<file>: tensor '<name>'").
  struct Readable {
    const SafetensorsFile* file;
    const TensorInfo* info;
    std::string where;
  };
  absl::StatusOr<Entry> Lookup(std::string_view name) const;
  // Lookup, and INVALID_ARGUMENT unless the tensor's dtype can be read.
  absl::StatusOr<Readable> LookupReadable(std::string_view name) const;
  std::filesystem::path dir_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, Entry, std::less<>> tensors_;
};

// Writes one .safetensors file (used by tpserve-make-model and tests).
class SafetensorsWriter {
 public:
  // `data` holds numel(shape) elements of `dtype`; it is copied.
  void Add(std::string name, DType dtype, std::vector<int64_t> shape, const void* data);
  // Convenience: converts float32 values to `dtype`.
  void AddF32(std::string name, DType dtype, std::vector<int64_t> shape, std::span<const float> values);
  absl::Status Write(const std::filesystem::path& path) const;
  // Total data bytes added so far (for splitting into shards).
  uint64_t data_bytes() const { return data_bytes_; }
  // Layout written: [u64 LE header length N][N bytes JSON, space-padded so N % 8 == 0]
  // [tensor bytes in insertion order, back to back]. The header carries
  // "__metadata__": {"format": "pt"}. Written to a temporary file in the same folder
  // and renamed, so a failed Write leaves no partial file at `path`. A bad Add
  // (negative dim, duplicate name, wrong value count) is reported by Write.

 private:
  struct Pending {
    std::string name;
    DType dtype;
    std::vector<int64_t> shape;
    std::vector<uint8_t> bytes;
  };
  std::vector<Pending> tensors_;
  uint64_t data_bytes_ = 0;
  std::string add_error_;  // first problem found by Add/AddF32, reported by Write
};

}  // namespace tpserve
