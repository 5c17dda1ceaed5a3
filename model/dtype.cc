#include "model/dtype.h"

#include <cmath>

namespace tpserve {

size_t DTypeSize(DType dtype) {
  switch (dtype) {
    case DType::kF32: return 4;
    case DType::kF16: return 2;
    case DType::kBF16: return 2;
  }
  return 0;
}

std::string_view DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kF32: return "F32";
    case DType::kF16: return "F16";
    case DType::kBF16: return "BF16";
  }
  return "?";
}

std::optional<DType> DTypeFromName(std::string_view name) {
  if (name == "F32") return DType::kF32;
  if (name == "F16") return DType::kF16;
  if (name == "BF16") return DType::kBF16;
  return std::nullopt;
}

float F16ToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  float magnitude;
  if (exp == 0) {
    magnitude = std::ldexp(static_cast<float>(mant), -24);  // zero or subnormal
  } else if (exp == 31) {
    magnitude = mant ? NAN : INFINITY;
  } else {
    magnitude = std::ldexp(static_cast<float>(mant | 0x400u), static_cast<int>(exp) - 25);
  }
  uint32_t u;
  std::memcpy(&u, &magnitude, sizeof u);
  u |= sign;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

uint16_t FloatToF16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const float a = std::fabs(f);
  if (std::isnan(f)) return sign | 0x7e00u;
  if (a >= 65520.0f) return sign | 0x7c00u;  // rounds to infinity
  if (a < std::ldexp(1.0f, -14)) {
    // Subnormal: value = m * 2^-24, round to nearest even.
    const float m = std::nearbyint(a * std::ldexp(1.0f, 24));
    return sign | static_cast<uint16_t>(m);
  }
  int e;
  const float frac = std::frexp(a, &e);  // a = frac * 2^e, frac in [0.5, 1)
  float m = std::nearbyint((frac * 2.0f - 1.0f) * 1024.0f);
  int exp = e - 1 + 15;
  if (m >= 1024.0f) {
    m = 0.0f;
    ++exp;
  }
  if (exp >= 31) return sign | 0x7c00u;
  return sign | static_cast<uint16_t>((exp << 10) | static_cast<int>(m));
}

void ConvertDType(const void* src, DType from, void* dst, DType to, size_t n) {
  if (from == to) {
    std::memcpy(dst, src, n * DTypeSize(from));
    return;
  }
  auto load = [&](size_t i) -> float {
    switch (from) {
      case DType::kF32: return static_cast<const float*>(src)[i];
      case DType::kF16: return F16ToFloat(static_cast<const uint16_t*>(src)[i]);
      case DType::kBF16: return Bf16ToFloat(static_cast<const uint16_t*>(src)[i]);
    }
    return 0.0f;
  };
  for (size_t i = 0; i < n; ++i) {
    const float v = load(i);
    switch (to) {
      case DType::kF32: static_cast<float*>(dst)[i] = v; break;
      case DType::kF16: static_cast<uint16_t*>(dst)[i] = FloatToF16(v); break;
      case DType::kBF16: static_cast<uint16_t*>(dst)[i] = FloatToBf16(v); break;
    }
  }
}

}  // namespace tpserve
