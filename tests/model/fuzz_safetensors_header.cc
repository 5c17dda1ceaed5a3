// libFuzzer target: ParseSafetensorsHeader on arbitrary file images.
// Built only with -DTPSERVE_FUZZ=ON by clang (scripts/fuzz.sh), with ASan + UBSan.
// Besides "no crash, no out-of-bounds read", it checks what the parser promises:
// every returned tensor lies inside the data section, sizes match, none overlap.
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "model/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> file(data, size);
  absl::StatusOr<std::vector<tpserve::TensorInfo>> tensors = tpserve::ParseSafetensorsHeader(file, "fuzz");
  if (!tensors.ok()) {
    // An error must name the file.
    if (tensors.status().message().find("fuzz") == absl::string_view::npos) std::abort();
    return 0;
  }
  uint64_t header_len = 0;
  std::memcpy(&header_len, data, 8);  // little-endian host
  const uint64_t data_size = size - 8 - header_len;
  uint64_t prev_end = 0;
  volatile uint8_t sink = 0;
  for (const tpserve::TensorInfo& t : *tensors) {
    if (t.begin > t.end || t.end > data_size || t.begin < prev_end) std::abort();
    uint64_t bytes = t.element_size;
    for (int64_t d : t.shape) {
      if (d < 0) std::abort();
      bytes *= static_cast<uint64_t>(d);
    }
    if (bytes != t.end - t.begin) std::abort();
    prev_end = t.end > prev_end ? t.end : prev_end;
    // Touch the first and last byte so ASan sees any escape from the buffer.
    if (t.end > t.begin) sink = sink + data[8 + header_len + t.begin] + data[8 + header_len + t.end - 1];
  }
  return 0;
}
