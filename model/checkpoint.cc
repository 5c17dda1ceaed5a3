// Checkpoint: the tensors of a Hugging Face checkpoint folder, one file or sharded.
//
//   DIR/model.safetensors                      single file, every tensor in it
//   DIR/model.safetensors.index.json           {"weight_map": {tensor: "model-0000i-of-0000n.safetensors"}}
//   DIR/model-0000i-of-0000n.safetensors       the shards the index names
//
// Reads go straight from the mmapped files into the caller's buffer with dtype
// conversion; a row or column slice touches only the bytes of that slice.
#include <algorithm>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "model/safetensors.h"
#include "nlohmann/json.hpp"

namespace tpserve {
namespace {

constexpr const char* kIndexName = "model.safetensors.index.json";
constexpr const char* kSingleName = "model.safetensors";

// ConvertDType reads typed pointers, so a source that is not aligned to its element
// size (possible in a hand-made file: nothing forces 8 + N to be a multiple of 4)
// goes through an aligned staging buffer.
void ConvertFromMapping(const uint8_t* src, DType from, void* dst, DType to, size_t n) {
  if (n == 0) return;  // an empty slice may come with a null `dst`
  const size_t from_size = DTypeSize(from);
  if (reinterpret_cast<uintptr_t>(src) % from_size == 0) {
    ConvertDType(src, from, dst, to, n);
    return;
  }
  alignas(8) uint8_t staging[4096];
  const size_t chunk = sizeof staging / from_size;
  uint8_t* out = static_cast<uint8_t*>(dst);
  for (size_t i = 0; i < n; i += chunk) {
    const size_t m = std::min(chunk, n - i);
    std::memcpy(staging, src + i * from_size, m * from_size);
    ConvertDType(staging, from, out + i * DTypeSize(to), to, m);
  }
}

// Index file names must be plain names in the folder: no paths out of it.
bool IsPlainFileName(const std::string& name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos &&
         name.find('\0') == std::string::npos;
}

std::string ShapeString(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) absl::StrAppend(&s, i ? ", " : "", shape[i]);
  return s + "]";
}

// A read of [begin, begin + count) of the `limit` rows (or columns) `what`:
// OUT_OF_RANGE outside them, INVALID_ARGUMENT when `null_out` (no output
// buffer for a non-empty read).
absl::Status CheckSlice(const std::string& where, const std::vector<int64_t>& shape, const char* what,
                        int64_t begin, int64_t count, int64_t limit, bool null_out) {
  if (begin < 0 || count < 0 || begin > limit || count > limit - begin) {
    return absl::OutOfRangeError(absl::StrCat(where, " with shape ", ShapeString(shape), ": ", what,
                                              " [", begin, ", ", begin, " + ", count,
                                              ") are outside its ", limit, " ", what));
  }
  if (null_out) return absl::InvalidArgumentError(absl::StrCat(where, ": output buffer is null"));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Checkpoint>> Checkpoint::Open(const std::filesystem::path& dir) {
  auto ckpt = std::unique_ptr<Checkpoint>(new Checkpoint());
  ckpt->dir_ = dir;
  std::error_code ec;
  const std::filesystem::path index_path = dir / kIndexName;

  if (std::filesystem::is_regular_file(dir, ec)) {
    // A single .safetensors file given directly.
    absl::StatusOr<std::unique_ptr<SafetensorsFile>> file = SafetensorsFile::Open(dir);
    if (!file.ok()) return file.status();
    ckpt->files_.push_back(std::move(*file));
  } else if (std::filesystem::exists(dir / kSingleName, ec)) {
    absl::StatusOr<std::unique_ptr<SafetensorsFile>> file = SafetensorsFile::Open(dir / kSingleName);
    if (!file.ok()) return file.status();
    ckpt->files_.push_back(std::move(*file));
  } else if (std::filesystem::exists(index_path, ec)) {
    std::ifstream in(index_path, std::ios::binary);
    if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", index_path.string()));
    std::stringstream text;
    text << in.rdbuf();
    const nlohmann::json index = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
    if (index.is_discarded()) {
      return absl::InvalidArgumentError(absl::StrCat(index_path.string(), ": not valid JSON; re-download it"));
    }
    if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object()) {
      return absl::InvalidArgumentError(
          absl::StrCat(index_path.string(), ": needs a \"weight_map\" object {tensor name: file name}"));
    }
    std::map<std::string, SafetensorsFile*> by_name;  // shard file name -> opened file
    for (const auto& [tensor, file_json] : index["weight_map"].items()) {
      if (!file_json.is_string() || !IsPlainFileName(file_json.get<std::string>())) {
        return absl::InvalidArgumentError(absl::StrCat(index_path.string(), ": weight_map entry for tensor '",
                                                       tensor, "' is not a file name in ", dir.string()));
      }
      const std::string file_name = file_json.get<std::string>();
      auto it = by_name.find(file_name);
      if (it == by_name.end()) {
        absl::StatusOr<std::unique_ptr<SafetensorsFile>> file = SafetensorsFile::Open(dir / file_name);
        if (!file.ok()) {
          return absl::Status(file.status().code(),
                              absl::StrCat(index_path.string(), " maps tensor '", tensor, "' to ", file_name,
                                           ": ", file.status().message()));
        }
        ckpt->files_.push_back(std::move(*file));
        it = by_name.emplace(file_name, ckpt->files_.back().get()).first;
      }
      const TensorInfo* info = it->second->Find(tensor);
      if (info == nullptr) {
        return absl::NotFoundError(absl::StrCat(index_path.string(), " lists tensor '", tensor, "' in ",
                                                it->second->path().string(),
                                                " but that file does not contain it; the checkpoint is "
                                                "incomplete or mixed up (re-download it)"));
      }
      ckpt->tensors_.emplace(tensor, Entry{it->second, info});
    }
    return ckpt;
  } else {
    return absl::NotFoundError(absl::StrCat("no ", kSingleName, " or ", kIndexName, " in ", dir.string(),
                                            "; pass a Hugging Face checkpoint folder"));
  }
  for (const TensorInfo& info : ckpt->files_[0]->tensors()) {
    ckpt->tensors_.emplace(info.name, Entry{ckpt->files_[0].get(), &info});
  }
  return ckpt;
}

bool Checkpoint::Has(std::string_view name) const { return tensors_.find(name) != tensors_.end(); }

absl::StatusOr<Checkpoint::Entry> Checkpoint::Lookup(std::string_view name) const {
  const auto it = tensors_.find(name);
  if (it == tensors_.end()) {
    return absl::NotFoundError(absl::StrCat("tensor '", std::string(name), "' is not in the checkpoint ", dir_.string()));
  }
  return it->second;
}

absl::StatusOr<Checkpoint::Readable> Checkpoint::LookupReadable(std::string_view name) const {
  absl::StatusOr<Entry> e = Lookup(name);
  if (!e.ok()) return e.status();
  Readable r{e->file, e->info,
             absl::StrCat(e->file->path().string(), ": tensor '", std::string(name), "'")};
  if (!r.info->readable) {
    return absl::InvalidArgumentError(absl::StrCat(
        r.where, " has dtype ", r.info->dtype_name, "; only F32, F16 and BF16 tensors can be read"));
  }
  return r;
}

absl::StatusOr<const TensorInfo*> Checkpoint::Info(std::string_view name) const {
  absl::StatusOr<Entry> e = Lookup(name);
  if (!e.ok()) return e.status();
  return e->info;
}

std::vector<std::string> Checkpoint::TensorNames() const {
  std::vector<std::string> names;
  names.reserve(tensors_.size());
  for (const auto& [name, entry] : tensors_) names.push_back(name);
  return names;  // std::map iterates in sorted order
}

absl::Status Checkpoint::ReadRows(std::string_view name, int64_t row_begin, int64_t row_count,
                                  DType out_dtype, void* out) const {
  absl::StatusOr<Readable> e = LookupReadable(name);
  if (!e.ok()) return e.status();
  const TensorInfo& info = *e->info;
  // View as [rows, width]: rows = shape[0], width = prod(shape[1:]); a scalar is [1, 1].
  const int64_t rows = info.shape.empty() ? 1 : info.shape[0];
  const int64_t width = rows == 0 ? 0 : info.numel() / rows;
  if (absl::Status s = CheckSlice(e->where, info.shape, "rows", row_begin, row_count, rows,
                                  out == nullptr && row_count * width > 0);
      !s.ok()) {
    return s;
  }
  const size_t esize = DTypeSize(info.dtype);
  const uint8_t* src = e->file->Bytes(info).data() + static_cast<size_t>(row_begin * width) * esize;
  const size_t n = static_cast<size_t>(row_count * width);
  ConvertFromMapping(src, info.dtype, out, out_dtype, n);
  e->file->DropPages(std::span<const uint8_t>(src, n * esize));
  return absl::OkStatus();
}

absl::Status Checkpoint::ReadCols(std::string_view name, int64_t col_begin, int64_t col_count,
                                  DType out_dtype, void* out) const {
  absl::StatusOr<Readable> e = LookupReadable(name);
  if (!e.ok()) return e.status();
  const TensorInfo& info = *e->info;
  if (info.shape.size() != 2) {
    return absl::InvalidArgumentError(absl::StrCat(e->where, " has shape ", ShapeString(info.shape),
                                                   "; ReadCols needs a 2-D tensor (use ReadRows)"));
  }
  // [rows, cols] -> out [rows, col_count]: one strided copy per row.
  const int64_t rows = info.shape[0], cols = info.shape[1];
  if (absl::Status s = CheckSlice(e->where, info.shape, "columns", col_begin, col_count, cols,
                                  out == nullptr && rows * col_count > 0);
      !s.ok()) {
    return s;
  }
  const size_t in_size = DTypeSize(info.dtype), out_size = DTypeSize(out_dtype);
  const uint8_t* base = e->file->Bytes(info).data();
  uint8_t* dst = static_cast<uint8_t*>(out);
  for (int64_t r = 0; r < rows; ++r) {
    ConvertFromMapping(base + static_cast<size_t>(r * cols + col_begin) * in_size, info.dtype,
                       dst + static_cast<size_t>(r * col_count) * out_size, out_dtype,
                       static_cast<size_t>(col_count));
  }
  if (rows > 0 && col_count > 0) {  // the strided read touched every row's pages
    const uint8_t* first = base + static_cast<size_t>(col_begin) * in_size;
    const uint8_t* last = base + static_cast<size_t>((rows - 1) * cols + col_begin + col_count) * in_size;
    e->file->DropPages(std::span<const uint8_t>(first, static_cast<size_t>(last - first)));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<float>> Checkpoint::ReadF32(std::string_view name) const {
  absl::StatusOr<Entry> e = Lookup(name);
  if (!e.ok()) return e.status();
  const TensorInfo& info = *e->info;
  if (!info.readable) return ReadRows(name, 0, 0, DType::kF32, nullptr);  // the dtype error
  std::vector<float> values(static_cast<size_t>(info.numel()));
  const int64_t rows = info.shape.empty() ? 1 : info.shape[0];
  absl::Status s = ReadRows(name, 0, rows, DType::kF32, values.data());
  if (!s.ok()) return s;
  return values;
}

}  // namespace tpserve
