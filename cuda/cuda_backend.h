// CudaBackend: Backend (backend/backend.h) on one CUDA device.
//
// bf16 weights, activations and KV cache; fp32 accumulation in cuBLAS GEMMs
// (CUBLAS_COMPUTE_32F), fp32 norm statistics and softmax in the kernels of
// cuda/. Every op is enqueued on the backend's one stream and returns without
// waiting; Synchronize, CopyToHostF32 and CopyFromHost wait for it.
//
// The stream is a blocking stream (cudaStreamCreate), so the legacy default
// stream that the host-staging gloo communicator copies on (comm/device_copy.h)
// is ordered after the ops enqueued here.
//
// Memory: Allocate is a plain cudaMalloc per buffer (zero-filled, like the CPU
// backend's calloc); TryAllocate returns RESOURCE_EXHAUSTED with the bytes
// asked and cudaMemGetInfo's free bytes when cudaMalloc runs out, and clears
// the error. Model and KvCache allocate once at load, so the step loop does
// not allocate.
// BeginStep uploads the step's metadata into one device buffer, laid out for
// the step's own tokens and sequences so that what it copies follows the step
// (cuda/step_layout.h): after Reserve a buffer sized by the StepCapacity
// (never reallocated, so CUDA graphs captured over it stay valid: a step's
// arrays sit where any step of its sizes puts them; a larger step is
// INVALID_ARGUMENT), before it one that grows (rarely, doubling) when a step
// needs more. Of the block table it copies only the columns the step's
// sequences use, at the table's row stride: columns beyond hold what an
// earlier step left, and no kernel reads them.
//
// Kernel sets (cuda/kernel_set.h): under kFast, Linear with M <= 8 rows (decode
// of a few sequences) runs the bf16 GEMV of cuda/gemv.cuh, LinearSiluMul the
// GEMV with the SiLU-and-mul epilogue (one launch, no [M, 2F] activation), and
// RmsNorm / AddRmsNorm the 16-byte vector kernels, when the shapes and
// alignment allow; everything else, and everything under kReference, runs
// cuBLAS and the reference kernels (LinearSiluMul as Linear then SiluMul).
//
// Fused decoder layers (Backend::FusesLayerOps): under kFast, after Reserve,
// a step of at most kGemvMaxRows tokens runs each layer in five launches: the
// input norm, QKV projection, q/k norm, RoPE and K/V store in one GEMV
// (LaunchRmsNormGemvQkRope), the decode attention (its partials merged in the
// kernel), o_proj with the residual add in its epilogue, the post-attention
// norm with gate/up + SiLU, and down with the residual add (cuda/gemv.cuh):
// the bits of the unfused fast ops. `fuse_layer_ops` false keeps them apart
// (tests and gpu_bench compare the two).
//
// Deterministic mode (CudaBackendOptions::deterministic; --deterministic,
// off by default): every op computes a row from that row alone, in one order
// of operations, so a sequence's logits are the same bits whatever else is in
// its steps, however its prompt was chunked, whether its prefix came from the
// prefix cache or a recompute, and whether a CUDA graph ran the step
// (docs/architecture.md, "The CUDA backend's deterministic mode"). Linear is
// the tensor-core GEMM of cuda/det_gemm.cuh for every M (no GEMV, no cuBLAS,
// no split-K); LinearSiluMul is that Linear then SiluMul; the decoder layers
// are not fused; Attention runs every row, prefill and decode, through
// cuda/det_attention.cuh (512-key partitions merged in order, split across
// blocks for decode rows after Reserve); the norms, RoPE, the K/V store, the
// embedding and the gather are per-row kernels in either set. The all-reduce
// and the sampler are the rank's (rank/rank_start.h:
// cuda/rank_order_all_reduce.h, and the one-block-per-row sampler).
//
// CUDA graphs (Backend::BeginCapture / EndCapture, cuda/cuda_graph.h): the
// stream is captured in thread-local mode; Allocate, the host copies,
// Synchronize, Reserve and BeginStep abort while a capture is open.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "backend/backend.h"
#include "cuda/kernel_set.h"

namespace tpserve {

// The CUDA backend on `device` (an index into the visible devices), launching
// `kernels` (cuda/kernel_set.h: the fast set, or the reference set that every
// fast kernel is tested against). `programmatic_launch`: the fast set's
// decode-path kernels (the GEMVs, the vector RmsNorms, the fused q/k norm +
// RoPE + KV store, the fast decode attention) launch with PDL on a device of
// compute capability 9 or more (cuda/simt.cuh; TPSERVE_PDL in
// cuda/kernel_set.h); ignored under the reference set. Aborts with the CUDA
// error when the device cannot be used; callers check cuda::DeviceCount()
// first to give users a clear message. `fuse_layer_ops`: FusesLayerOps may
// be true (fast set only; above).
std::unique_ptr<Backend> MakeCudaBackend(int device = 0, cuda::KernelSet kernels = cuda::KernelSet::kFast,
                                         bool programmatic_launch = true, bool fuse_layer_ops = true);

struct CudaBackendOptions {
  cuda::KernelSet kernels = cuda::KernelSet::kFast;
  bool programmatic_launch = true;
  bool fuse_layer_ops = true;  // ignored (off) in deterministic mode
  // Batch-invariant kernels (above); with either kernel set, which then
  // supplies only the per-row ops.
  bool deterministic = false;
  // Keys per attention partition in deterministic mode; 0: 512
  // (cuda::kDetPartitionKeys). A fixed constant of the backend: tests shrink
  // it (a positive multiple of 16) to reach several partitions at small
  // contexts.
  int deterministic_partition_keys = 0;
};
std::unique_ptr<Backend> MakeCudaBackend(int device, const CudaBackendOptions& options);

}  // namespace tpserve
