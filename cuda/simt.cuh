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
//   TPSERVE_LAUNCH_PDL(grid, block, shared_bytes, stream, programmatic, kernel)(args...)
//                                         the same launch through cudaLaunchKernelEx; with
//                                         `programmatic` it may start before the previous
//                                         kernel in the stream has finished (below)
//   TPSERVE_GRID_DEPENDENCY_WAIT()        griddepcontrol.wait
//   TPSERVE_GRID_DEPENDENTS_LAUNCH()      griddepcontrol.launch_dependents
// and uses CUDA's own names for the rest: threadIdx, blockIdx, blockDim,
// gridDim, __syncthreads, __syncwarp, __shfl{,_xor,_up,_down}_sync,
// __ballot_sync, __any_sync, __all_sync, atomicAdd / atomicOr / atomicMax,
// __expf, rsqrtf, __uint_as_float, min / max and cuda_bf16.h's conversions.
//
// Programmatic dependent launch (PDL, sm_90 and later): a launch with
// cudaLaunchAttributeProgrammaticStreamSerialization may begin while the
// previous kernel of the stream is still running, once every block of that
// one has run TPSERVE_GRID_DEPENDENTS_LAUNCH() or exited. Its threads must run
// TPSERVE_GRID_DEPENDENCY_WAIT() before any read or write of global memory
// that another kernel writes or reads (activations, not weights): the wait
// returns when the previous grid has completed and its writes are visible.
// The rule here: a kernel launched with TPSERVE_LAUNCH_PDL waits before it
// touches anything but weights, the step's uploaded metadata and earlier
// steps' KV cache (most at their very top; the GEMV first asks L2 for its first
// weight vectors, cuda/gemv.cu, and decode attention for its first keys,
// cuda/decode_attention.cu), then lets its own dependents launch. Below sm_90 both are nothing and
// the attribute is not set (the backend passes programmatic = false there).
// Stream capture records the launch as a programmatic graph edge (CUDA 12.3+).
// Unverified without a GPU: that the overlap pays (bench/gpu/gpu_bench.cc's
// `pdl` rows time decode with TPSERVE_PDL on and off).
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

namespace tpserve::cuda {

// What TPSERVE_LAUNCH_PDL returns: called with the kernel's arguments. A
// failed launch leaves its error for cudaGetLastError, as <<<>>> does.
template <typename... Params>
struct PdlLauncher {
  void (*kernel)(Params...);
  dim3 grid, block;
  size_t shared_bytes;
  cudaStream_t stream;
  bool programmatic;
  template <typename... Args>
  void operator()(Args... args) const {
    cudaLaunchAttribute attribute[1];
    attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attribute[0].val.programmaticStreamSerializationAllowed = programmatic ? 1 : 0;
    cudaLaunchConfig_t config = {};
    config.gridDim = grid;
    config.blockDim = block;
    config.dynamicSmemBytes = shared_bytes;
    config.stream = stream;
    config.attrs = attribute;
    config.numAttrs = 1;
    (void)cudaLaunchKernelEx(&config, kernel, static_cast<Params>(args)...);
  }
};

template <typename... Params>
PdlLauncher<Params...> MakePdlLauncher(void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared_bytes,
                                       cudaStream_t stream, bool programmatic) {
  return {kernel, grid, block, shared_bytes, stream, programmatic};
}

}  // namespace tpserve::cuda

#define TPSERVE_LAUNCH_PDL(grid, block, shared_bytes, stream, programmatic, ...) \
  ::tpserve::cuda::MakePdlLauncher(&__VA_ARGS__, (grid), (block), (shared_bytes), (stream), (programmatic))
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define TPSERVE_GRID_DEPENDENCY_WAIT() asm volatile("griddepcontrol.wait;" ::: "memory")
#define TPSERVE_GRID_DEPENDENTS_LAUNCH() asm volatile("griddepcontrol.launch_dependents;" ::: "memory")
#else
#define TPSERVE_GRID_DEPENDENCY_WAIT() ((void)0)
#define TPSERVE_GRID_DEPENDENTS_LAUNCH() ((void)0)
#endif

#elif defined(TPSERVE_CUDA_EMU)

#include "cuda/emu/simt.h"

#else
#error "cuda/simt.cuh: compile kernels with nvcc, or as host C++ with TPSERVE_CUDA_EMU (cuda/emu/)"
#endif
