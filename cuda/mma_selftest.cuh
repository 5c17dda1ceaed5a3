// One warp's m16n8k16 bf16 mma (cuda/mma.cuh) on matrices in device memory,
// each element loaded into and stored from the fragment layout mma.cuh
// documents. The tests (tests/cuda/mma_test.cc) compare it with a plain matmul:
// in the emulator it checks the emulation, on a GPU the real instruction, so a
// layout mistake in either shows up as a wrong element.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

namespace tpserve::cuda {

// D = A · B + C with one warp. a: [16, 16] bf16 row-major; b: [16, 8] bf16
// row-major (K × N); c, d: [16, 8] fp32 row-major (device pointers).
cudaError_t LaunchMmaSelfTest(const __nv_bfloat16* a, const __nv_bfloat16* b, const float* c, float* d,
                              cudaStream_t stream);

}  // namespace tpserve::cuda
