// The portability header of the kernels: one kernel source, two builds.
//
// Every .cu file in cuda/ includes this header and names through it what a
// kernel needs beyond plain C++:
//   TPSERVE_SHARED(T, name)               __shared__ T name;            (one per block)
//   TPSERVE_SHARED_ARRAY(T, name, n)      __shared__ T name[n];
//   TPSERVE_DYNAMIC_SHARED(T, name)       extern __shared__ T name[];   (size set by the launch)
//   TPSERVE_LAUNCH(kernel, grid, block, shared_bytes, stream)(args...)
//                                         kernel<<<grid, block, shared_bytes, stream>>>(args...)
//                                         (`kernel` may be a template with one argument)
// and uses CUDA's own names for the rest: threadIdx, blockIdx, blockDim,
// gridDim, __syncthreads, __syncwarp, __shfl{,_xor,_up,_down}_sync,
// __ballot_sync, __any_sync, __all_sync, atomicAdd / atomicOr / atomicMax,
// __expf, rsqrtf, __uint_as_float, min / max and cuda_bf16.h's conversions.
//
// Under nvcc this is plain CUDA. In the emulation build (TPSERVE_CUDA_EMU,
// tests only: cuda/emu/CMakeLists.txt) the host compiler builds the same file
// and the SIMT runner of cuda/emu/simt.h executes each launch on the CPU,
// checking barriers, shuffle masks and launch limits as it goes.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#if defined(__CUDACC__)

#define TPSERVE_SHARED(T, name) __shared__ T name
#define TPSERVE_SHARED_ARRAY(T, name, n) __shared__ T name[n]
#define TPSERVE_DYNAMIC_SHARED(T, name) extern __shared__ T name[]
#define TPSERVE_LAUNCH(kernel, grid, block, shared_bytes, stream) \
  kernel<<<(grid), (block), (shared_bytes), (stream)>>>

#elif defined(TPSERVE_CUDA_EMU)

#include "cuda/emu/simt.h"

#else
#error "cuda/simt.cuh: compile kernels with nvcc, or as host C++ with TPSERVE_CUDA_EMU (cuda/emu/)"
#endif
