// Tensor-core instructions as inline functions, for kernels written through
// cuda/simt.cuh: inline PTX under nvcc (sm_80 and later), an exact emulation
// of the instruction's fragment layout under TPSERVE_CUDA_EMU.
//
// MmaBf16M16N8K16(d, a, b, c): the warp's
//   mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32  D = A · B + C
// with A [16, 16] bf16 (row-major), B [16, 8] bf16 (K × N, "col": each column
// of B is contiguous in k), C and D [16, 8] fp32. Each lane holds a fragment;
// with g = lane / 4 (groupID) and t = lane % 4 (threadID_in_group), as the PTX
// ISA's "Matrix Fragments for mma.m16n8k16 with floating point type" lays
// them out:
//   a[0] = A[g    ][2t, 2t+1]      a[1] = A[g + 8][2t, 2t+1]
//   a[2] = A[g    ][2t+8, 2t+9]    a[3] = A[g + 8][2t+8, 2t+9]
//   b[0] = B[2t, 2t+1  ][g]        b[1] = B[2t+8, 2t+9][g]
//   c[0], c[1] = C[g][2t], C[g][2t+1]    c[2], c[3] = C[g + 8][2t], C[g + 8][2t+1]
// Each a/b register packs two bf16, the lower index in the low 16 bits
// (PackBf16x2). D has C's layout. All 32 lanes must execute the call together
// (the emulator fails a launch where they do not).
//
// tests/cuda_emu/mma_test.cc holds the emulation to a plain matmul with a
// layout that would catch a transposed or swapped fragment;
// tests/cuda/mma_test.cc (label gpu) holds the real instruction to the same
// expectation.
#pragma once

#include <math_constants.h>

#include <cstdint>
#include <cstring>

#include "cuda/simt.cuh"

namespace tpserve::cuda {

// Two bf16 in one 32-bit register: `lo` in bits 0..15, `hi` in bits 16..31.
__host__ __device__ inline uint32_t PackBf16x2(__nv_bfloat16 lo, __nv_bfloat16 hi) {
  const uint32_t l = static_cast<__nv_bfloat16_raw>(lo).x, h = static_cast<__nv_bfloat16_raw>(hi).x;
  return l | h << 16;
}
__host__ __device__ inline uint32_t PackFloatsBf16x2(float lo, float hi) {
  return PackBf16x2(__float2bfloat16(lo), __float2bfloat16(hi));
}

#if defined(__CUDACC__)

__device__ inline void MmaBf16M16N8K16(float d[4], const uint32_t a[4], const uint32_t b[2], const float c[4]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]), "f"(c[2]),
        "f"(c[3]));
#else
  __trap();  // cmake/TpserveCuda.cmake builds sm_80 and sm_90 only
#endif
}

#else  // TPSERVE_CUDA_EMU

namespace mma_emu {

struct Fragments {
  uint32_t a[4];
  uint32_t b[2];
  float c[4];
};

inline float Bf16Bits(uint32_t reg, int half) {
  __nv_bfloat16_raw raw;
  raw.x = static_cast<unsigned short>(half ? reg >> 16 : reg & 0xffffu);
  return __bfloat162float(__nv_bfloat16(raw));
}

// The 32 lanes' fragments → the whole A, B and C, then D = A · B + C in fp32
// (bf16 products are exact in fp32), scattered back in C's layout.
inline void Run(const void* const* in, void* const* out) {
  float A[16][16], B[16][8], C[16][8];
  for (int lane = 0; lane < 32; ++lane) {
    const Fragments& f = *static_cast<const Fragments*>(in[lane]);
    const int g = lane / 4, t = lane % 4;
    for (int h = 0; h < 2; ++h) {
      A[g][2 * t + h] = Bf16Bits(f.a[0], h);
      A[g + 8][2 * t + h] = Bf16Bits(f.a[1], h);
      A[g][2 * t + 8 + h] = Bf16Bits(f.a[2], h);
      A[g + 8][2 * t + 8 + h] = Bf16Bits(f.a[3], h);
      B[2 * t + h][g] = Bf16Bits(f.b[0], h);
      B[2 * t + 8 + h][g] = Bf16Bits(f.b[1], h);
      C[g][2 * t + h] = f.c[h];
      C[g + 8][2 * t + h] = f.c[2 + h];
    }
  }
  for (int lane = 0; lane < 32; ++lane) {
    float* d = static_cast<float*>(out[lane]);
    const int g = lane / 4, t = lane % 4;
    for (int i = 0; i < 4; ++i) {
      const int row = g + (i >= 2 ? 8 : 0), col = 2 * t + (i & 1);
      float acc = C[row][col];
      for (int k = 0; k < 16; ++k) acc += A[row][k] * B[k][col];
      d[i] = acc;
    }
  }
}

}  // namespace mma_emu

inline void MmaBf16M16N8K16(float d[4], const uint32_t a[4], const uint32_t b[2], const float c[4],
                            std::source_location site = std::source_location::current()) {
  mma_emu::Fragments in;
  std::memcpy(in.a, a, sizeof(in.a));
  std::memcpy(in.b, b, sizeof(in.b));
  std::memcpy(in.c, c, sizeof(in.c));
  float result[4];
  emu::WarpCollective(&in, result, &mma_emu::Run, site);
  std::memcpy(d, result, sizeof(result));  // d may alias c
}

#endif

// ---- Rows of a C fragment, and the online softmax over them ----
// Row g (and g + 8) of a C/D fragment lives on the 4 lanes 4g .. 4g + 3.

// Max and sum of v over the 4 lanes that hold a row; each of them gets it.
__device__ inline float FragmentRowMax(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ inline float FragmentRowSum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

// One online-softmax step of a row whose new scores have the max `tile_max`
// (over the row's 4 lanes; −∞ when none is visible): raises `running_max`,
// and returns the max to subtract from the new scores (0 while the row has
// seen no visible key, so e^(−∞ − 0) = 0 and nothing is NaN) and the factor
// for what the row accumulated so far (e^(old max − new max); 0 on the first
// visible tile).
struct RowRescale {
  float use_max;
  float correction;
};
__device__ inline RowRescale RaiseRowMax(float& running_max, float tile_max) {
  const float new_max = fmaxf(running_max, tile_max);
  const float use_max = new_max == -CUDART_INF_F ? 0.f : new_max;
  const RowRescale r{use_max, __expf(running_max - use_max)};
  running_max = new_max;
  return r;
}

}  // namespace tpserve::cuda
