// Backend: the tensors and fused operations the decoder is written against.
//
// The CPU backend (fp32, plain loops + BLAS GEMM) is always built and is the
// oracle; the CUDA backend (bf16 weights and activations, fp32 accumulation)
// implements the same interface and is checked against it op by op.
//
// Conventions
// * Shapes are in the comments: T new tokens in the step, S sequences,
//   D hidden size, F (local) intermediate size, Hq / Hkv local query / KV heads,
//   hd head dim, Vs local vocab shard rows.
// * Ops run on the backend's stream in issue order; inputs and outputs live on
//   the backend's device and have its compute_dtype() unless stated otherwise.
// * Ops never allocate. A shape mismatch is a programming error and aborts with
//   the op's name and the shapes; anything a caller's data can get wrong (block
//   ids, slots, positions) is checked in BeginStep and returned as a Status.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "backend/step.h"
#include "backend/tensor.h"

namespace tpserve {

// Local (this rank's) attention geometry. The fused qkv activation of a token is
//   [q: Hq * hd | k: Hkv * hd | v: Hkv * hd].
struct AttentionShape {
  int32_t num_heads = 0;     // Hq
  int32_t num_kv_heads = 0;  // Hkv (Hq % Hkv == 0)
  int32_t head_dim = 0;      // hd (even)
  int64_t qkv_width() const { return int64_t{num_heads + 2 * num_kv_heads} * head_dim; }
};

// One layer's slice of the paged KV cache on this rank.
struct KvCacheLayer {
  Tensor k;  // [num_blocks, block_size, Hkv, hd]
  Tensor v;  // [num_blocks, block_size, Hkv, hd]
};

// Upper bounds of every step a backend will be given, known once the model and
// the KV cache geometry are (StepRunner and the offline engine call Reserve
// after allocating the cache). Backends size their per-step buffers from it
// (step metadata, attention workspace) so the step loop never allocates, and
// so buffers captured in a CUDA graph never move.
struct StepCapacity {
  int64_t max_tokens = 0;   // T of any step
  int64_t max_seqs = 0;     // S of any step
  int64_t max_context = 0;  // longest sequence: seq_lens <= this (the RoPE table's length)
  int32_t block_size = 0;   // tokens per KV block
  // This rank's attention geometry, for the attention workspace (the CUDA
  // backend's split decode attention). 0 = unknown: decode attention then
  // runs without a workspace (one block per token and head group).
  int32_t max_query_heads = 0;  // local Hq of any layer
  int32_t max_head_dim = 0;     // hd of any layer
  int32_t max_blocks_per_seq() const {
    return block_size > 0 ? static_cast<int32_t>((max_context + block_size - 1) / block_size) : 0;
  }
};

// A captured sequence of ops (Backend::EndCapture). Replay enqueues it on the
// backend's stream and returns without waiting.
class BackendGraph {
 public:
  virtual ~BackendGraph() = default;
  virtual void Replay() = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;

  virtual std::string name() const = 0;    // "cpu", "cuda:0"
  virtual Device device() const = 0;
  virtual DType compute_dtype() const = 0;  // weights and activations: kF32 (CPU), kBF16 (CUDA)

  // ---- memory ----
  // A new buffer of `shape` in `dtype` on this backend's device, zero-filled
  // (callers such as the KV cache rely on it: an unwritten slot holds 0, never
  // NaN garbage). RESOURCE_EXHAUSTED naming the bytes asked and the bytes free
  // when the device cannot hold it; the backend is usable afterwards. Where the
  // size comes from the user (the KV cache), handle that status.
  virtual absl::StatusOr<Buffer> TryAllocate(DType dtype, std::span<const int64_t> shape) = 0;
  absl::StatusOr<Buffer> TryAllocate(DType dtype, std::initializer_list<int64_t> shape) {
    return TryAllocate(dtype, std::span<const int64_t>(shape.begin(), shape.size()));
  }
  // TryAllocate for buffers whose size the code fixes (weights, activations):
  // running out of memory ends the process with TryAllocate's message.
  Buffer Allocate(DType dtype, std::span<const int64_t> shape);
  Buffer Allocate(DType dtype, std::initializer_list<int64_t> shape) {
    return Allocate(dtype, std::span<const int64_t>(shape.begin(), shape.size()));
  }
  // Copies dst.numel() elements of `src_dtype` from host memory into dst,
  // converting to dst.dtype.
  virtual void CopyFromHost(const void* src, DType src_dtype, Tensor dst) = 0;
  // Copies src to host memory as float32 (src.numel() elements).
  virtual void CopyToHostF32(const Tensor& src, float* dst) = 0;
  // dst = src (same shape and dtype, both on this device).
  virtual void Copy(const Tensor& src, Tensor dst) = 0;
  virtual void Synchronize() = 0;
  // The stream every op is enqueued on (a cudaStream_t on CUDA; nullptr on the
  // CPU), for work that must be ordered with the ops: NCCL collectives, sampling.
  virtual void* stream() const { return nullptr; }

  // ---- capacity ----
  // Sizes the per-step buffers for `capacity` (see StepCapacity). Optional:
  // a backend that was not told grows its buffers when a step needs more.
  // INVALID_ARGUMENT for a non-positive field; RESOURCE_EXHAUSTED when the
  // device cannot hold the buffers.
  virtual absl::Status Reserve(const StepCapacity& capacity) {
    (void)capacity;
    return absl::OkStatus();
  }

  // ---- CUDA graphs ----
  // A backend that supports graphs records the ops enqueued between
  // BeginCapture and EndCapture (on the calling thread) instead of running
  // them, and returns them as a graph that Replay runs again on the backend's
  // stream, with the same pointers and the same by-value arguments. Inside a
  // capture only the ops below "ops on the current step" may run: BeginStep,
  // Allocate, the host copies and Synchronize abort. A graph reads the step
  // metadata from the buffers that Reserve fixed, so Replay computes the step
  // of the latest BeginStep, which must have the captured step's sizes (T, S,
  // max_blocks_per_seq). Defaults: not supported (the CPU backend).
  virtual bool SupportsGraphs() const { return false; }
  // FAILED_PRECONDITION when graphs are not supported, Reserve has not run, or
  // a capture is already open.
  virtual absl::Status BeginCapture() {
    return absl::FailedPreconditionError(name() + " does not support graph capture");
  }
  // Ends the capture and instantiates the graph. INTERNAL when the capture was
  // invalidated (something not capturable ran inside it); the backend is then
  // usable again eagerly.
  virtual absl::StatusOr<std::unique_ptr<BackendGraph>> EndCapture() {
    return absl::FailedPreconditionError(name() + " does not support graph capture");
  }

  // ---- step ----
  // Validates the step against the KV cache geometry (block ids in [0,
  // num_blocks), slots in range or -1, positions below the RoPE table, offsets
  // consistent) and makes it current for the ops below until the next call.
  virtual absl::Status BeginStep(const StepMetadata& step, int64_t num_blocks, int32_t block_size,
                                 int64_t max_position) = 0;

  // ---- ops on the current step ----
  // out[t] = table[token_ids[t] - vocab_start] when the id falls in this shard
  // [vocab_start, vocab_start + Vs), else zeros (the all-reduce fills it in).
  virtual void Embedding(const Tensor& table /*[Vs, D]*/, int64_t vocab_start,
                         Tensor out /*[T, D]*/) = 0;

  // y = x · wᵀ (+ bias). Any M (also rows of a gathered [S, D] tensor).
  virtual void Linear(const Tensor& x /*[M, K]*/, const Tensor& w /*[N, K]*/,
                      const Tensor* bias /*[N] or nullptr*/, Tensor y /*[M, N]*/) = 0;

  // out = x / sqrt(mean(x²) + eps) * w, row by row (statistics in fp32).
  virtual void RmsNorm(const Tensor& x /*[M, D]*/, const Tensor& w /*[D]*/, float eps,
                       Tensor out /*[M, D]*/) = 0;

  // Fused residual add + RMSNorm: residual += x; x = RmsNorm(residual) * w.
  virtual void AddRmsNorm(Tensor x /*[M, D] in: sublayer output, out: normalised*/,
                          Tensor residual /*[M, D] in/out*/, const Tensor& w /*[D]*/,
                          float eps) = 0;

  // In place on the q and k parts of qkv: optional per-head RMSNorm (Qwen3;
  // q_norm / k_norm are [hd] weights, nullptr for none), then RoPE in the
  // rotate-half layout (pairs i and i + hd/2) at each token's position, from
  //   rope: [max_position, hd] float32, row p = [cos(p·f_0..f_{hd/2-1}) | sin(...)].
  virtual void QkNormRope(Tensor qkv /*[T, (Hq + 2 Hkv) · hd]*/, const AttentionShape& shape,
                          const Tensor* q_norm, const Tensor* k_norm, float eps,
                          const Tensor& rope /*[max_position, hd] f32*/) = 0;

  // out = silu(gate) * up, with gate_up = [gate | up] along the last dim.
  virtual void SiluMul(const Tensor& gate_up /*[M, 2F]*/, Tensor out /*[M, F]*/) = 0;

  // Linear (no bias), then SiluMul: the first half of the MLP,
  //   gate_up = x · w_gate_upᵀ;  out = silu(gate) * up,
  // with w_gate_up = [gate rows; up rows] (a rank's MergedColumnParallelLinear
  // shard: gate row f pairs with up row F + f). gate_up is the caller's scratch
  // for the product; a backend that fuses the two ops (the CUDA backend's fast
  // set at a few rows) may leave it unwritten. The results are those of the two ops.
  virtual void LinearSiluMul(const Tensor& x /*[M, K]*/, const Tensor& w_gate_up /*[2F, K]*/,
                             Tensor gate_up /*[M, 2F] scratch*/, Tensor out /*[M, F]*/) {
    Linear(x, w_gate_up, nullptr, gate_up);
    SiluMul(gate_up, out);
  }

  // Writes each new token's k and v (from qkv) to its slot; slot -1 is skipped.
  virtual void StoreKv(const Tensor& qkv /*[T, (Hq + 2 Hkv) · hd]*/, const AttentionShape& shape,
                       KvCacheLayer cache) = 0;

  // QkNormRope, then StoreKv, on the same qkv and cache: what a decoder layer
  // does before Attention. A backend may fuse the two into one pass (the CUDA
  // backend's fast kernel set does); the results are those of the two ops.
  virtual void QkNormRopeStoreKv(Tensor qkv /*[T, (Hq + 2 Hkv) · hd]*/, const AttentionShape& shape,
                                 const Tensor* q_norm, const Tensor* k_norm, float eps,
                                 const Tensor& rope /*[max_position, hd] f32*/, KvCacheLayer cache) {
    QkNormRope(qkv, shape, q_norm, k_norm, eps, rope);
    StoreKv(qkv, shape, cache);
  }

  // Causal attention of each new token over its sequence's whole context
  // (positions 0 .. seq_len - 1, read from the cache through the block tables;
  // StoreKv must have run for this step's tokens). GQA: query head h reads KV
  // head h / (Hq / Hkv). Softmax in fp32 with logits · scale.
  virtual void Attention(const Tensor& qkv /*[T, (Hq + 2 Hkv) · hd]*/, const AttentionShape& shape,
                         KvCacheLayer cache, float scale, Tensor out /*[T, Hq · hd]*/) = 0;

  // out[r] = x[logits_indices[r]]: the rows that reach the LM head (R = S
  // but for sequences verifying a speculative proposal, step.h).
  virtual void GatherRows(const Tensor& x /*[T, D]*/, Tensor out /*[R, D]*/) = 0;

  // ---- a decoder layer in fewer launches (optional) ----
  // A backend that can run the ops around a layer's projections fused says so
  // for a step of `num_tokens` tokens (the CUDA backend's fast set at the few
  // rows of its GEMV); the model then calls the three ops below in place of
  // the unfused sequence, at tp 1 with no intermediate hook (worker/model.h):
  // per layer RmsNormQkvRopeStoreKv, Attention, LinearAddResidual (o_proj),
  // RmsNormLinearSiluMul, LinearAddResidual (down). Each gives the results of
  // the ops it stands for, named below. Default: never.
  virtual bool FusesLayerOps(int64_t num_tokens) const {
    (void)num_tokens;
    return false;
  }

  // RmsNorm(x, norm, eps) into x_normed, Linear(x_normed, w_qkv, bias, qkv),
  // QkNormRopeStoreKv(qkv, shape, q_norm, k_norm, eps, rope, cache): a layer's
  // input norm, QKV projection, q/k norm, RoPE and K/V store (one eps for both
  // norms, as the model's). x_normed is scratch: a backend that fuses the ops
  // may leave it unwritten.
  virtual void RmsNormQkvRopeStoreKv(const Tensor& x /*[T, D]*/, const Tensor& norm /*[D]*/, float eps,
                                     Tensor x_normed /*[T, D] scratch*/, const Tensor& w_qkv /*[Nqkv, D]*/,
                                     const Tensor* bias /*[Nqkv] or nullptr*/, Tensor qkv /*[T, Nqkv]*/,
                                     const AttentionShape& shape, const Tensor* q_norm, const Tensor* k_norm,
                                     const Tensor& rope /*[max_position, hd] f32*/, KvCacheLayer cache) {
    RmsNorm(x, norm, eps, x_normed);
    Linear(x_normed, w_qkv, bias, qkv);
    QkNormRopeStoreKv(qkv, shape, q_norm, k_norm, eps, rope, cache);
  }

  // RmsNorm(x, norm, eps) into x_normed, then LinearSiluMul(x_normed,
  // w_gate_up, gate_up, out): the post-attention norm and the MLP's first
  // half. x_normed and gate_up are scratch.
  virtual void RmsNormLinearSiluMul(const Tensor& x /*[M, D]*/, const Tensor& norm /*[D]*/, float eps,
                                    Tensor x_normed /*[M, D] scratch*/, const Tensor& w_gate_up /*[2F, D]*/,
                                    Tensor gate_up /*[M, 2F] scratch*/, Tensor out /*[M, F]*/) {
    RmsNorm(x, norm, eps, x_normed);
    LinearSiluMul(x_normed, w_gate_up, gate_up, out);
  }

  // Linear(x, w, bias, y), then residual += y with y as stored (the residual
  // add of AddRmsNorm, without its norm): a row-parallel projection at tp 1
  // added into the residual stream. y is scratch. No default: the unfused
  // sequence adds inside AddRmsNorm, so only a backend whose FusesLayerOps is
  // ever true implements this (the default ends the process, naming it).
  virtual void LinearAddResidual(const Tensor& x /*[M, K]*/, const Tensor& w /*[N, K]*/,
                                 const Tensor* bias /*[N] or nullptr*/, Tensor y /*[M, N] scratch*/,
                                 Tensor residual /*[M, N] in/out*/);
};

}  // namespace tpserve
