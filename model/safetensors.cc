// Safetensors header parsing and validation, and the mmapped SafetensorsFile.
//
// File image: [u64 LE N][N bytes JSON header][data section: file.size() - 8 - N bytes].
// The parser trusts nothing in the image: every offset, shape and dtype is checked
// against the data section before a TensorInfo is returned, so SafetensorsFile::Bytes
// can hand out spans without further checks.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "model/safetensors.h"
#include "nlohmann/json.hpp"

namespace tpserve {
namespace {

using nlohmann::json;

// Every dtype name the safetensors format defines, with its element size in bytes.
struct KnownDType {
  std::string_view name;
  size_t size;
};
constexpr KnownDType kKnownDTypes[] = {
    {"BOOL", 1}, {"U8", 1},      {"I8", 1},      {"F8_E5M2", 1}, {"F8_E4M3", 1},
    {"F8_E8M0", 1}, {"I16", 2},  {"U16", 2},     {"F16", 2},     {"BF16", 2},
    {"I32", 4},  {"U32", 4},     {"F32", 4},     {"F64", 8},     {"I64", 8},
    {"U64", 8},
};

// Deepest JSON nesting we accept. Real headers nest 3 levels; the limit keeps
// recursive code (nlohmann's dump, comparisons) far from the stack's end.
constexpr int kMaxJsonDepth = 64;

// Maximum nesting of [ and { outside strings. Works on invalid JSON too.
int JsonDepth(std::string_view text) {
  int depth = 0, max_depth = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      max_depth = std::max(max_depth, ++depth);
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return max_depth;
}

// A JSON value as a non-negative integer that fits in int64, or nullopt.
std::optional<uint64_t> AsCount(const json& v) {
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (u <= static_cast<uint64_t>(INT64_MAX)) return u;
  } else if (v.is_number_integer()) {
    const int64_t i = v.get<int64_t>();
    if (i >= 0) return static_cast<uint64_t>(i);
  }
  return std::nullopt;
}

std::string Brief(const json& v) {
  std::string s = v.dump(-1, ' ', true, json::error_handler_t::replace);
  if (s.size() > 60) s = s.substr(0, 57) + "...";
  return s;
}

// Parses one header entry (everything but the data-section bounds and overlaps).
absl::StatusOr<TensorInfo> ParseEntry(const std::string& name, const json& entry,
                                      const std::string& where) {
  auto bad = [&](const std::string& what) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": tensor '", name, "': ", what,
                                                   "; the file is corrupt or not safetensors"));
  };
  if (!entry.is_object()) return bad(absl::StrCat("entry is ", Brief(entry), ", not an object"));
  TensorInfo info;
  info.name = name;

  const auto dtype_it = entry.find("dtype");
  if (dtype_it == entry.end()) return bad("missing \"dtype\"");
  if (!dtype_it->is_string()) return bad(absl::StrCat("\"dtype\" is ", Brief(*dtype_it), ", not a string"));
  info.dtype_name = dtype_it->get<std::string>();
  for (const KnownDType& k : kKnownDTypes) {
    if (k.name == info.dtype_name) info.element_size = k.size;
  }
  if (info.element_size == 0) {
    return bad(absl::StrCat("unknown dtype ", Brief(*dtype_it),
                            " (safetensors dtypes: BOOL, U8, I8, F8_*, I16, U16, F16, BF16, "
                            "I32, U32, F32, F64, I64, U64)"));
  }
  const std::optional<DType> dtype = DTypeFromName(info.dtype_name);
  info.readable = dtype.has_value();
  info.dtype = dtype.value_or(DType::kF32);

  const auto shape_it = entry.find("shape");
  if (shape_it == entry.end()) return bad("missing \"shape\"");
  if (!shape_it->is_array()) return bad(absl::StrCat("\"shape\" is ", Brief(*shape_it), ", not an array"));
  uint64_t numel = 1;
  for (const json& d : *shape_it) {
    const std::optional<uint64_t> dim = AsCount(d);
    if (!dim) return bad(absl::StrCat("\"shape\" ", Brief(*shape_it), " has a dimension that is not a non-negative integer"));
    info.shape.push_back(static_cast<int64_t>(*dim));
    if (__builtin_mul_overflow(numel, *dim, &numel)) return bad(absl::StrCat("\"shape\" ", Brief(*shape_it), " overflows"));
  }
  uint64_t nbytes = 0;
  if (__builtin_mul_overflow(numel, static_cast<uint64_t>(info.element_size), &nbytes)) {
    return bad(absl::StrCat("\"shape\" ", Brief(*shape_it), " overflows"));
  }

  const auto off_it = entry.find("data_offsets");
  if (off_it == entry.end()) return bad("missing \"data_offsets\"");
  std::optional<uint64_t> begin, end;
  if (off_it->is_array() && off_it->size() == 2) {
    begin = AsCount((*off_it)[0]);
    end = AsCount((*off_it)[1]);
  }
  if (!begin || !end) {
    return bad(absl::StrCat("\"data_offsets\" is ", Brief(*off_it), ", not [begin, end] with non-negative integers"));
  }
  if (*begin > *end) return bad(absl::StrCat("\"data_offsets\" ", Brief(*off_it), " has begin > end"));
  info.begin = *begin;
  info.end = *end;
  if (info.end - info.begin != nbytes) {
    return bad(absl::StrCat("shape ", Brief(*shape_it), " x ", info.dtype_name, " (", info.element_size,
                            " bytes) needs ", nbytes, " bytes but \"data_offsets\" ", Brief(*off_it),
                            " spans ", info.end - info.begin));
  }
  return info;
}

}  // namespace

int64_t TensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

absl::StatusOr<std::vector<TensorInfo>> ParseSafetensorsHeader(std::span<const uint8_t> file,
                                                               std::string_view file_name) {
  const std::string where(file_name);
  auto bad = [&](const std::string& what) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": ", what));
  };
  if (file.size() < 8) {
    return bad(absl::StrCat("file is ", file.size(),
                            " bytes, shorter than the 8-byte header length; it is truncated or not safetensors"));
  }
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | file[static_cast<size_t>(i)];
  if (header_len > kMaxSafetensorsHeaderBytes) {
    return bad(absl::StrCat("header length ", header_len, " exceeds the ", kMaxSafetensorsHeaderBytes,
                            "-byte limit; the file is corrupt or not safetensors"));
  }
  if (header_len > file.size() - 8) {
    return bad(absl::StrCat("header length ", header_len, " runs past the end of the ", file.size(),
                            "-byte file; the file is truncated (re-download it)"));
  }
  const std::string_view text(reinterpret_cast<const char*>(file.data()) + 8, header_len);
  if (JsonDepth(text) > kMaxJsonDepth) {
    return bad(absl::StrCat("header JSON nests deeper than ", kMaxJsonDepth, " levels; the file is corrupt"));
  }
  const json header = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (header.is_discarded()) return bad("header is not valid JSON; the file is corrupt or not safetensors");
  if (!header.is_object()) return bad(absl::StrCat("header is ", Brief(header), ", not a JSON object"));

  const uint64_t data_size = file.size() - 8 - header_len;
  std::vector<TensorInfo> tensors;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object()) return bad("\"__metadata__\" is not a JSON object; the file is corrupt");
      continue;
    }
    absl::StatusOr<TensorInfo> info = ParseEntry(name, entry, where);
    if (!info.ok()) return info.status();
    if (info->end > data_size) {
      return bad(absl::StrCat("tensor '", name, "': data_offsets [", info->begin, ", ", info->end,
                              "] run past the ", data_size, "-byte data section; the file is truncated (re-download it)"));
    }
    tensors.push_back(std::move(*info));
  }

  // Sorted by position, each tensor must start at or after the furthest end so far.
  std::sort(tensors.begin(), tensors.end(), [](const TensorInfo& a, const TensorInfo& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  const TensorInfo* furthest = nullptr;
  for (const TensorInfo& t : tensors) {
    if (furthest && t.begin < furthest->end) {
      return bad(absl::StrCat("tensor '", t.name, "' [", t.begin, ", ", t.end, ") overlaps tensor '",
                              furthest->name, "' [", furthest->begin, ", ", furthest->end,
                              "); the file is corrupt"));
    }
    if (!furthest || t.end > furthest->end) furthest = &t;
  }
  return tensors;
}

absl::StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Open(const std::filesystem::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    const std::string msg = absl::StrCat("cannot open ", path.string(), ": ", std::strerror(err));
    return err == ENOENT ? absl::NotFoundError(msg) : absl::PermissionDeniedError(msg);
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return absl::InvalidArgumentError(absl::StrCat(path.string(), ": not a regular file"));
  }
  auto file = std::unique_ptr<SafetensorsFile>(new SafetensorsFile());
  file->path_ = path;
  file->map_size_ = static_cast<size_t>(st.st_size);
  if (file->map_size_ > 0) {
    void* map = ::mmap(nullptr, file->map_size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      return absl::ResourceExhaustedError(
          absl::StrCat("cannot mmap ", path.string(), " (", file->map_size_, " bytes): ", std::strerror(err)));
    }
    file->map_ = static_cast<const uint8_t*>(map);
  }
  ::close(fd);  // the mapping keeps the file alive

  const std::span<const uint8_t> image(file->map_, file->map_size_);
  absl::StatusOr<std::vector<TensorInfo>> tensors = ParseSafetensorsHeader(image, path.string());
  if (!tensors.ok()) return tensors.status();  // the destructor unmaps
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | image[static_cast<size_t>(i)];
  file->data_offset_ = static_cast<size_t>(8 + header_len);
  file->tensors_ = std::move(*tensors);
  for (size_t i = 0; i < file->tensors_.size(); ++i) file->index_.emplace(file->tensors_[i].name, i);
  return file;
}

SafetensorsFile::~SafetensorsFile() {
  if (map_ != nullptr) ::munmap(const_cast<uint8_t*>(map_), map_size_);
}

const TensorInfo* SafetensorsFile::Find(std::string_view name) const {
  const auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

std::span<const uint8_t> SafetensorsFile::Bytes(const TensorInfo& info) const {
  // Offsets were validated against the data section by ParseSafetensorsHeader.
  return {map_ + data_offset_ + info.begin, static_cast<size_t>(info.end - info.begin)};
}

}  // namespace tpserve

namespace tpserve {

void SafetensorsFile::DropPages(std::span<const uint8_t> bytes) const {
  if (bytes.empty() || map_ == nullptr) return;
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t map_begin = reinterpret_cast<uintptr_t>(map_);
  // Whole pages only, kept inside the mapping; neighbours' pages are simply
  // faulted in again if someone reads them.
  uintptr_t begin = reinterpret_cast<uintptr_t>(bytes.data()) & ~(page - 1);
  uintptr_t end = (reinterpret_cast<uintptr_t>(bytes.data()) + bytes.size() + page - 1) & ~(page - 1);
  begin = std::max(begin, map_begin);
  end = std::min(end, (map_begin + map_size_ + page - 1) & ~(page - 1));
  if (end > begin) madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
}

}  // namespace tpserve
