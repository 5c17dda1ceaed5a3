// TPSERVE_HOST_DEVICE: __host__ __device__ under nvcc, nothing in host C++.
// For the planning and merge math that kernels and CPU tests share
// (attention_merge.h, decode_plan.h, gemv_plan.h, prefill_tiles.h); plain C++
// otherwise, so those headers need no CUDA to include.
#pragma once

#if defined(__CUDACC__)
#define TPSERVE_HOST_DEVICE __host__ __device__
#else
#define TPSERVE_HOST_DEVICE
#endif
