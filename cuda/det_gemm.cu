#include "cuda/det_gemm.cuh"
#include "cuda/mma.cuh"
#include "cuda/reduce.cuh"
#include "cuda/simt.cuh"
#include "cuda/vec.cuh"

namespace tpserve::cuda {
namespace {

using bf16 = __nv_bfloat16;

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * kWarpSize;
constexpr int kBM = 64;  // rows per block: 4 m16 tiles
constexpr int kMTiles = kBM / 16;
constexpr int kBN = kWarps * 8;  // columns per block: one n8 tile per warp
constexpr int kBK = 64;          // K per stage: 4 k16 steps
constexpr int kPad = 8;          // bf16 per shared row beyond the data: rows stay 16-byte aligned, banks rotate
constexpr int kPiecesPerRow = kBK / kBf16PerVec;
constexpr int kXPieces = kBM * kPiecesPerRow / kThreads;  // 16-byte pieces of x a thread moves per stage
constexpr int kWPieces = kBN * kPiecesPerRow / kThreads;  // ... and of w
static_assert(kBM * kPiecesPerRow % kThreads == 0 && kBN * kPiecesPerRow % kThreads == 0, "whole pieces");

// One stage of x and w in shared memory as bf16 bits, [row][k] as in memory.
struct Stage {
  alignas(16) uint16_t x[kBM][kBK + kPad];
  alignas(16) uint16_t w[kBN][kBK + kPad];
};

// A thread's pieces of the next stage, in flight from global memory.
struct StageLoads {
  uint4 x[kXPieces];
  uint4 w[kWPieces];
};

struct GemmArgs {
  const bf16* x;     // [M, K]
  const bf16* w;     // [N, K]
  const bf16* bias;  // [N] or null
  bf16* y;           // [M, N]
  int64_t M, N, K;
  bool vec;          // K % 8 == 0 and x, w 16-byte aligned: whole pieces are one 16-byte load
};


// Elements k .. k + 7 of `row` (K long) as one piece; zeros past K.
__device__ inline uint4 LoadPiece(const bf16* row, int64_t k, int64_t K, bool vec) {
  if (vec && k + kBf16PerVec <= K) return LoadBf16x8(row + k, 0);
  uint32_t e[kBf16PerVec];
#pragma unroll
  for (int j = 0; j < kBf16PerVec; ++j) e[j] = k + j < K ? __bfloat16_as_ushort(row[k + j]) : 0u;
  return uint4{e[0] | e[1] << 16, e[2] | e[3] << 16, e[4] | e[5] << 16, e[6] | e[7] << 16};
}

// The thread's pieces of the stage at k0: x rows m0 .., w rows n0 ..; rows
// past M or N are zeros (their outputs are never stored).
__device__ void LoadStage(const GemmArgs& a, int64_t m0, int64_t n0, int64_t k0, StageLoads& in) {
#pragma unroll
  for (int i = 0; i < kXPieces; ++i) {
    const int c = threadIdx.x + i * kThreads, r = c / kPiecesPerRow;
    const int64_t k = k0 + (c % kPiecesPerRow) * kBf16PerVec;
    in.x[i] = m0 + r < a.M && k < a.K ? LoadPiece(a.x + (m0 + r) * a.K, k, a.K, a.vec) : uint4{0u, 0u, 0u, 0u};
  }
#pragma unroll
  for (int i = 0; i < kWPieces; ++i) {
    const int c = threadIdx.x + i * kThreads, r = c / kPiecesPerRow;
    const int64_t k = k0 + (c % kPiecesPerRow) * kBf16PerVec;
    in.w[i] = n0 + r < a.N && k < a.K ? LoadPiece(a.w + (n0 + r) * a.K, k, a.K, a.vec) : uint4{0u, 0u, 0u, 0u};
  }
}

__device__ void StoreStage(const StageLoads& in, Stage& st) {
#pragma unroll
  for (int i = 0; i < kXPieces; ++i) {
    const int c = threadIdx.x + i * kThreads;
    StoreBits(&st.x[c / kPiecesPerRow][(c % kPiecesPerRow) * kBf16PerVec], in.x[i]);
  }
#pragma unroll
  for (int i = 0; i < kWPieces; ++i) {
    const int c = threadIdx.x + i * kThreads;
    StoreBits(&st.w[c / kPiecesPerRow][(c % kPiecesPerRow) * kBf16PerVec], in.w[i]);
  }
}

// The stage's 4 k16 steps, in k order, into the warp's accumulators: m16
// tile mt (rows 16mt .. of the block) × the warp's 8 columns, for the
// `m_tiles` tiles that hold rows. mma.cuh's fragment layout: A = x rows, B =
// w rows (column n of B is row n of w, contiguous in k).
__device__ void MultiplyStage(const Stage& st, int m_tiles, float (&acc)[kMTiles][4]) {
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize, g = lane / 4, t = lane % 4;
#pragma unroll
  for (int kk = 0; kk < kBK / 16; ++kk) {
    const int k = kk * 16 + 2 * t;
    const uint32_t b[2] = {Load32(&st.w[warp * 8 + g][k]), Load32(&st.w[warp * 8 + g][k + 8])};
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt) {
      if (mt >= m_tiles) break;  // uniform over the block
      const int r = mt * 16 + g;
      const uint32_t a[4] = {Load32(&st.x[r][k]), Load32(&st.x[r + 8][k]), Load32(&st.x[r][k + 8]),
                             Load32(&st.x[r + 8][k + 8])};
      MmaBf16M16N8K16(acc[mt], a, b, acc[mt]);
    }
  }
}

// grid: x = column block (kBN columns), y = row block (kBM rows).
__global__ void __launch_bounds__(kThreads) DetGemmKernel(GemmArgs a) {
  TPSERVE_SHARED(Stage, st);
  const int64_t n0 = int64_t{blockIdx.x} * kBN, m0 = int64_t{blockIdx.y} * kBM;
  const int64_t rows = a.M - m0 < kBM ? a.M - m0 : kBM;
  const int m_tiles = static_cast<int>((rows + 15) / 16);
  float acc[kMTiles][4];
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) acc[mt][0] = acc[mt][1] = acc[mt][2] = acc[mt][3] = 0.f;

  // Stage s + 1's loads are in flight while stage s multiplies.
  StageLoads in;
  LoadStage(a, m0, n0, 0, in);
  for (int64_t k0 = 0; k0 < a.K; k0 += kBK) {
    StoreStage(in, st);
    __syncthreads();  // the stage is in shared memory
    if (k0 + kBK < a.K) LoadStage(a, m0, n0, k0 + kBK, in);
    MultiplyStage(st, m_tiles, acc);
    __syncthreads();  // every warp is done with the stage before the next overwrites it
  }

  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize, g = lane / 4, t = lane % 4;
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
    if (mt >= m_tiles) break;
#pragma unroll
    for (int i = 0; i < 4; ++i) {  // C fragment: rows g (i < 2) and g + 8, columns 2t and 2t + 1
      const int64_t m = m0 + mt * 16 + g + (i >= 2 ? 8 : 0), n = n0 + warp * 8 + 2 * t + (i & 1);
      if (m >= a.M || n >= a.N) continue;
      float v = acc[mt][i];
      if (a.bias != nullptr) v += __bfloat162float(a.bias[n]);
      a.y[m * a.N + n] = __float2bfloat16(v);
    }
  }
}

}  // namespace

cudaError_t LaunchDetGemm(const bf16* x, const bf16* w, const bf16* bias, int64_t M, int64_t N, int64_t K, bf16* y,
                          cudaStream_t stream) {
  if (M <= 0 || N <= 0 || K <= 0 || M > 0x7fffffff || N > 0x7fffffff || K > 0x7fffffff || x == nullptr ||
      w == nullptr || y == nullptr) {
    return cudaErrorInvalidValue;
  }
  const int64_t row_blocks = (M + kBM - 1) / kBM, col_blocks = (N + kBN - 1) / kBN;
  if (row_blocks > 65535) return cudaErrorInvalidValue;
  const GemmArgs args{x, w, bias, y, M, N, K, K % kBf16PerVec == 0 && Aligned16(x) && Aligned16(w)};
  const dim3 grid(static_cast<unsigned>(col_blocks), static_cast<unsigned>(row_blocks));
  TPSERVE_LAUNCH(DetGemmKernel, grid, kThreads, 0, stream)(args);
  return cudaGetLastError();
}

}  // namespace tpserve::cuda
