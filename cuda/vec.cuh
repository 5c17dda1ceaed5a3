// 16-byte vector access to bf16 data: 8 elements per load or store (one
// uint4, a single 128-bit memory instruction on the GPU). The pointers must be
// 16-byte aligned; Aligned16 says whether they are. Include only from .cu files.
#pragma once

#include <cstdint>
#include <cstring>

#include "cuda/simt.cuh"

namespace tpserve::cuda {

inline constexpr int kBf16PerVec = 8;  // bf16 elements in one 16-byte vector

inline bool Aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// Bits moved between differently typed views of memory (the addresses are
// aligned to sizeof(T)): one access under nvcc, memcpy in the emulation's host
// build (no strict-aliasing assumptions).
template <typename T>
__device__ inline T LoadBits(const void* p) {
#if defined(__CUDACC__)
  return *static_cast<const T*>(p);
#else
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
#endif
}
template <typename T>
__device__ inline void StoreBits(void* p, const T& v) {
#if defined(__CUDACC__)
  *static_cast<T*>(p) = v;
#else
  std::memcpy(p, &v, sizeof(T));
#endif
}
__device__ inline uint32_t Load32(const void* p) { return LoadBits<uint32_t>(p); }

// The 8 bf16 of v (element 0 in the low half of v.x) as floats; exact.
__device__ __forceinline__ void UnpackBf16x8(const uint4& v, float (&f)[kBf16PerVec]) {
  const uint32_t words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    f[2 * i] = __uint_as_float(words[i] << 16);
    f[2 * i + 1] = __uint_as_float(words[i] & 0xffff0000u);
  }
}

// 8 floats rounded to bf16 (round to nearest even, as __float2bfloat16) in one vector.
__device__ __forceinline__ uint4 PackBf16x8(const float (&f)[kBf16PerVec]) {
  uint32_t words[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    words[i] = uint32_t{__bfloat16_as_ushort(__float2bfloat16(f[2 * i]))} |
               (uint32_t{__bfloat16_as_ushort(__float2bfloat16(f[2 * i + 1]))} << 16);
  }
  return uint4{words[0], words[1], words[2], words[3]};
}

// The emulation fails the launch on a vector address the GPU would fault on.
__device__ __forceinline__ void CheckVectorAddress(const void* p, const char* access) {
#if defined(TPSERVE_CUDA_EMU)
  if (!Aligned16(p)) ::tpserve::cuda::emu::Misaligned(p, 16, access);
#else
  (void)p;
  (void)access;
#endif
}

// The i-th 16-byte vector of p (elements 8i .. 8i+7).
__device__ __forceinline__ uint4 LoadBf16x8(const __nv_bfloat16* p, int64_t i) {
  CheckVectorAddress(p + kBf16PerVec * i, "a 16-byte load");
  return reinterpret_cast<const uint4*>(p)[i];
}
__device__ __forceinline__ void StoreBf16x8(__nv_bfloat16* p, int64_t i, const uint4& v) {
  CheckVectorAddress(p + kBf16PerVec * i, "a 16-byte store");
  reinterpret_cast<uint4*>(p)[i] = v;
}

// Asks L2 for the i-th 16-byte vector of p (its 128-byte line) without waiting
// or holding a register: for weights a kernel will read after a programmatic
// launch's wait (cuda/simt.cuh). The emulation touches the vector's first and
// last byte instead, so AddressSanitizer checks the address as a load would.
__device__ __forceinline__ void PrefetchL2Bf16x8(const __nv_bfloat16* p, int64_t i) {
#if defined(__CUDA_ARCH__)
  asm volatile("prefetch.global.L2 [%0];" ::"l"(p + kBf16PerVec * i));
#elif defined(TPSERVE_CUDA_EMU)
  const volatile char* bytes = reinterpret_cast<const volatile char*>(p + kBf16PerVec * i);
  (void)bytes[0];
  (void)bytes[15];
#else
  (void)p;
  (void)i;
#endif
}

}  // namespace tpserve::cuda
