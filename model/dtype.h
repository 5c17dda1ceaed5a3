// Element types of checkpoint tensors and conversions between them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

namespace tpserve {

enum class DType { kF32, kF16, kBF16 };

size_t DTypeSize(DType dtype);                              // bytes per element
std::string_view DTypeName(DType dtype);                    // safetensors spelling: "F32", "F16", "BF16"
std::optional<DType> DTypeFromName(std::string_view name);  // nullopt for anything else

// bf16 is the top half of an IEEE float32.
inline float Bf16ToFloat(uint16_t bits) {
  uint32_t u = static_cast<uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
// Round to nearest even; NaN stays NaN.
inline uint16_t FloatToBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
float F16ToFloat(uint16_t bits);
uint16_t FloatToF16(float f);

// Converts n elements of src (dtype `from`) to dst (dtype `to`). Same-type copies
// are memcpy. src and dst must not overlap.
void ConvertDType(const void* src, DType from, void* dst, DType to, size_t n);

}  // namespace tpserve
