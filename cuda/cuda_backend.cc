#include "cuda/cuda_backend.h"

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backend/op_checks.h"
#include "backend/step_validation.h"
#include "base/check.h"
#include "cuda/attention.cuh"
#include "cuda/check.h"
#include "cuda/cuda_graph.h"
#include "cuda/decode_attention.cuh"
#include "cuda/decode_plan.h"
#include "cuda/det_attention.cuh"
#include "cuda/det_gemm.cuh"
#include "cuda/device_info.h"
#include "cuda/embedding.cuh"
#include "cuda/gather_rows.cuh"
#include "cuda/gemv.cuh"
#include "cuda/kv_store.cuh"
#include "cuda/prefill_attention.cuh"
#include "cuda/prefill_tiles.h"
#include "cuda/qk_norm_rope.cuh"
#include "cuda/rmsnorm.cuh"
#include "cuda/silu_mul.cuh"
#include "cuda/step_layout.h"

namespace tpserve {
namespace {

using bf16 = __nv_bfloat16;

constexpr OperandKind kCudaBf16{"CudaBackend", Device::kCuda, DType::kBF16};

// Shape mismatches are programming errors (backend.h): op_checks.h ends the
// process naming the op and the shapes. The operands are bf16 CUDA tensors.
void Expect(bool ok, const char* op, const auto&... what) { CheckOp(kCudaBf16, ok, op, what...); }
void ExpectRows(const char* op, const char* name, const Tensor& t, int64_t rows, int64_t cols) {
  CheckRows(kCudaBf16, op, name, t, rows, cols);
}
void ExpectVector(const char* op, const char* name, const Tensor& t, int64_t n) { CheckVector(kCudaBf16, op, name, t, n); }

// A kernel launch's error is a programming error here (shapes were checked).
void Launched(const char* op, cudaError_t err) {
  CheckOp(kCudaBf16, err == cudaSuccess, op, "kernel launch failed: ", cudaGetErrorString(err));
  TPSERVE_SYNC_CHECK();
}

bf16* Bf(const Tensor& t) { return static_cast<bf16*>(t.data); }

// cuBLAS workspace set at Reserve (cuBLAS recommends 32 MiB on Hopper).
constexpr size_t kCublasWorkspaceBytes = size_t{32} << 20;

class CudaBackend final : public Backend {
 public:
  CudaBackend(int device, const CudaBackendOptions& options)
      : device_(device),
        kernels_(options.kernels),
        deterministic_(options.deterministic),
        det_partition_keys_(options.deterministic_partition_keys > 0 ? options.deterministic_partition_keys
                                                                     : cuda::kDetPartitionKeys),
        fuse_layers_(options.fuse_layer_ops && options.kernels == cuda::KernelSet::kFast && !options.deterministic) {
    TPSERVE_CHECK(det_partition_keys_ % cuda::kDetKeyTile == 0, "CudaBackend: deterministic_partition_keys ",
                  det_partition_keys_, " must be a multiple of ", cuda::kDetKeyTile);
    CUDA_CHECK(cudaSetDevice(device_));
    CUDA_CHECK(cudaStreamCreate(&stream_));
    CUDA_CHECK(cudaEventCreateWithFlags(&upload_done_, cudaEventDisableTiming));
    CUBLAS_CHECK(cublasCreate(&cublas_));
    CUBLAS_CHECK(cublasSetStream(cublas_, stream_));
    const absl::StatusOr<cuda::DeviceInfo> info = cuda::QueryDevice(device_);
    TPSERVE_CHECK(info.ok(), "CudaBackend: ", info.status().ToString());
    multiprocessors_ = info->multiprocessors;
    programmatic_ = options.programmatic_launch && kernels_ == cuda::KernelSet::kFast && info->compute_major >= 9;
  }
  ~CudaBackend() override {
    cudaStreamSynchronize(stream_);
    cublasDestroy(cublas_);
    if (step_device_) cudaFree(step_device_);
    if (step_host_) cudaFreeHost(step_host_);
    if (cublas_workspace_) cudaFree(cublas_workspace_);
    if (attention_workspace_) cudaFree(attention_workspace_);
    if (decode_arrivals_) cudaFree(decode_arrivals_);
    if (qk_arrivals_) cudaFree(qk_arrivals_);
    cudaEventDestroy(upload_done_);
    cudaStreamDestroy(stream_);
  }

  std::string name() const override {
    return absl::StrCat("cuda:", device_, kernels_ == cuda::KernelSet::kFast ? "" : " (reference kernels)",
                        deterministic_ ? " (deterministic)" : "");
  }
  Device device() const override { return Device::kCuda; }
  DType compute_dtype() const override { return DType::kBF16; }

  using Backend::TryAllocate;
  absl::StatusOr<Buffer> TryAllocate(DType dtype, std::span<const int64_t> shape) override {
    NotCapturing("Allocate");
    Tensor t = Tensor::Describe(dtype, Device::kCuda, shape, "CudaBackend::Allocate");
    const size_t bytes = std::max<size_t>(t.nbytes(), 1);
    void* ptr = nullptr;
    if (const cudaError_t err = cudaMalloc(&ptr, bytes); err != cudaSuccess) {
      return AllocationFailed(t, bytes, err);
    }
    CUDA_CHECK(cudaMemsetAsync(ptr, 0, bytes, stream_));  // zeroed, as the CPU backend's calloc
    t.data = ptr;
    return Buffer(t, [](void* p) { cudaFree(p); });
  }

  void CopyFromHost(const void* src, DType src_dtype, Tensor dst) override {
    NotCapturing("CopyFromHost");
    ExpectDeviceAny("CopyFromHost", "dst", dst);
    if (dst.numel() == 0) return;
    Expect(src != nullptr, "CopyFromHost", "src is null for dst ", dst.ShapeString());
    const size_t n = static_cast<size_t>(dst.numel());
    const void* host = src;
    if (src_dtype != dst.dtype) {  // convert on the host, then one copy
      staging_.resize(dst.nbytes());
      ConvertDType(src, src_dtype, staging_.data(), dst.dtype, n);
      host = staging_.data();
    }
    CUDA_CHECK(cudaMemcpyAsync(dst.data, host, dst.nbytes(), cudaMemcpyHostToDevice, stream_));
    // The caller's memory (and staging_) may change as soon as we return.
    CUDA_CHECK(cudaStreamSynchronize(stream_));
  }

  void CopyToHostF32(const Tensor& src, float* dst) override {
    NotCapturing("CopyToHostF32");
    ExpectDeviceAny("CopyToHostF32", "src", src);
    if (src.numel() == 0) return;
    if (src.dtype == DType::kF32) {
      CUDA_CHECK(cudaMemcpyAsync(dst, src.data, src.nbytes(), cudaMemcpyDeviceToHost, stream_));
      CUDA_CHECK(cudaStreamSynchronize(stream_));
      return;
    }
    staging_.resize(src.nbytes());
    CUDA_CHECK(cudaMemcpyAsync(staging_.data(), src.data, src.nbytes(), cudaMemcpyDeviceToHost, stream_));
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    ConvertDType(staging_.data(), src.dtype, dst, DType::kF32, static_cast<size_t>(src.numel()));
  }

  void Copy(const Tensor& src, Tensor dst) override {
    Expect(src.device == Device::kCuda && dst.device == Device::kCuda && src.dtype == dst.dtype &&
               src.numel() == dst.numel(),
           "Copy", "src ", src.ShapeString(), " ", std::string(DTypeName(src.dtype)), " and dst ",
           dst.ShapeString(), " ", std::string(DTypeName(dst.dtype)),
           " must be CUDA tensors of the same dtype and size");
    if (src.numel() == 0 || src.data == dst.data) return;
    CUDA_CHECK(cudaMemcpyAsync(dst.data, src.data, src.nbytes(), cudaMemcpyDeviceToDevice, stream_));
  }

  void Synchronize() override {
    NotCapturing("Synchronize");
    CUDA_CHECK(cudaStreamSynchronize(stream_));
  }
  void* stream() const override { return stream_; }

  absl::Status Reserve(const StepCapacity& capacity) override {
    NotCapturing("Reserve");
    if (capacity.max_tokens <= 0 || capacity.max_seqs <= 0 || capacity.max_context <= 0 ||
        capacity.block_size <= 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "CudaBackend::Reserve: every field of StepCapacity must be positive (max_tokens ",
          capacity.max_tokens, ", max_seqs ", capacity.max_seqs, ", max_context ", capacity.max_context,
          ", block_size ", capacity.block_size, ")"));
    }
    capacity_ = capacity;
    if (absl::Status st = ReserveStepBuffers(); !st.ok()) return st;
    if (absl::Status st = ReserveFusionCounters(); !st.ok()) return st;
    return ReserveAttentionWorkspace();
  }

  absl::Status BeginStep(const StepMetadata& step, int64_t num_blocks, int32_t block_size,
                         int64_t max_position) override;

  bool SupportsGraphs() const override { return true; }
  absl::Status BeginCapture() override {
    if (capturing_) return absl::FailedPreconditionError("CudaBackend::BeginCapture: a capture is already open");
    if (!step_reserved_) {
      return absl::FailedPreconditionError(
          "CudaBackend::BeginCapture: call Reserve first, so the step buffers a graph reads never move");
    }
    if (absl::Status st = cuda::BeginStreamCapture(stream_); !st.ok()) return st;
    capturing_ = true;
    return absl::OkStatus();
  }
  absl::StatusOr<std::unique_ptr<BackendGraph>> EndCapture() override {
    if (!capturing_) return absl::FailedPreconditionError("CudaBackend::EndCapture: no capture is open");
    capturing_ = false;
    return cuda::EndStreamCapture(stream_);
  }

  void Embedding(const Tensor& table, int64_t vocab_start, Tensor out) override {
    const Step& s = CurrentStep("Embedding");
    const int64_t D = out.row_width();
    ExpectRows("Embedding", "out", out, s.num_tokens, D);
    ExpectRows("Embedding", "table", table, table.dim(0), D);
    Launched("Embedding", cuda::LaunchEmbedding(s.token_ids, s.num_tokens, Bf(table), table.dim(0), D,
                                                vocab_start, Bf(out), stream_));
  }

  void Linear(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor y) override {
    const int64_t M = x.dim(0), K = x.row_width(), N = w.dim(0);
    CheckLinear(kCudaBf16, x, w, bias, y);
    Expect(M <= 0x7fffffff && N <= 0x7fffffff && K <= 0x7fffffff, "Linear", "dimensions beyond int32");
    if (M == 0 || N == 0) return;
    if (deterministic_) {  // one path for every M (cuda/det_gemm.cuh)
      Launched("Linear", cuda::LaunchDetGemm(Bf(x), Bf(w), bias ? Bf(*bias) : nullptr, M, N, K, Bf(y), stream_));
      return;
    }
    if (kernels_ == cuda::KernelSet::kFast && cuda::GemvSupports(x.data, w.data, M, N, K)) {
      Launched("Linear", cuda::LaunchGemv(Bf(x), Bf(w), bias ? Bf(*bias) : nullptr, M, N, K, Bf(y),
                                          cuda::PlanGemv(N, K, multiprocessors_), stream_, programmatic_));
      return;
    }
    CublasLinear(x, w, 0.f, y);
    if (bias) Launched("Linear", cuda::LaunchAddBias(Bf(y), Bf(*bias), M, N, stream_));
  }

  void RmsNorm(const Tensor& x, const Tensor& w, float eps, Tensor out) override {
    const int64_t M = x.dim(0), D = x.row_width();
    ExpectRows("RmsNorm", "x", x, M, D);
    ExpectRows("RmsNorm", "out", out, M, D);
    ExpectVector("RmsNorm", "w", w, D);
    if (kernels_ == cuda::KernelSet::kFast && cuda::RmsNormVecSupports(D, x.data, w.data, out.data)) {
      Launched("RmsNorm", cuda::LaunchRmsNormVec(Bf(x), Bf(w), eps, M, D, Bf(out), stream_, programmatic_));
      return;
    }
    Launched("RmsNorm", cuda::LaunchRmsNorm(Bf(x), Bf(w), eps, M, D, Bf(out), stream_));
  }

  void AddRmsNorm(Tensor x, Tensor residual, const Tensor& w, float eps) override {
    const int64_t M = x.dim(0), D = x.row_width();
    ExpectRows("AddRmsNorm", "x", x, M, D);
    ExpectRows("AddRmsNorm", "residual", residual, M, D);
    ExpectVector("AddRmsNorm", "w", w, D);
    Expect(x.data != residual.data || M * D == 0, "AddRmsNorm", "x must not alias residual");
    if (kernels_ == cuda::KernelSet::kFast && cuda::RmsNormVecSupports(D, x.data, residual.data, w.data)) {
      Launched("AddRmsNorm",
               cuda::LaunchAddRmsNormVec(Bf(x), Bf(residual), Bf(w), eps, M, D, stream_, programmatic_));
      return;
    }
    Launched("AddRmsNorm", cuda::LaunchAddRmsNorm(Bf(x), Bf(residual), Bf(w), eps, M, D, stream_));
  }

  void QkNormRope(Tensor qkv, const AttentionShape& shape, const Tensor* q_norm,
                  const Tensor* k_norm, float eps, const Tensor& rope) override {
    const Step& s = CurrentStep("QkNormRope");
    CheckQkNormRope("QkNormRope", qkv, shape, q_norm, k_norm, rope, s);
    Launched("QkNormRope",
             cuda::LaunchQkNormRope(Bf(qkv), s.num_tokens, s.positions, shape.num_heads,
                                    shape.num_kv_heads, shape.head_dim, q_norm ? Bf(*q_norm) : nullptr,
                                    k_norm ? Bf(*k_norm) : nullptr, eps, rope.ptr<float>(), stream_));
  }

  void SiluMul(const Tensor& gate_up, Tensor out) override {
    const int64_t M = gate_up.dim(0), F = out.row_width();
    ExpectRows("SiluMul", "gate_up", gate_up, M, 2 * F);
    ExpectRows("SiluMul", "out", out, M, F);
    Launched("SiluMul", cuda::LaunchSiluMul(Bf(gate_up), M, F, Bf(out), stream_));
  }

  // The fast set at M <= 8 rows: one GEMV whose blocks pair gate row f with up
  // row F + f (cuda/gemv.cuh), gate_up left unwritten; otherwise the two ops.
  void LinearSiluMul(const Tensor& x, const Tensor& w, Tensor gate_up, Tensor out) override {
    const int64_t M = x.dim(0), K = x.row_width(), F = out.row_width();
    CheckLinear(kCudaBf16, x, w, nullptr, gate_up);
    ExpectRows("LinearSiluMul", "out", out, M, F);
    Expect(w.dim(0) == 2 * F, "LinearSiluMul", "w_gate_up ", w.ShapeString(), " must have 2F = ", 2 * F,
           " rows for out ", out.ShapeString());
    if (deterministic_ || kernels_ != cuda::KernelSet::kFast || !cuda::GemvSupports(x.data, w.data, M, 2 * F, K)) {
      Backend::LinearSiluMul(x, w, gate_up, out);  // Linear (the deterministic GEMM there), then SiluMul
      return;
    }
    Launched("LinearSiluMul", cuda::LaunchGemvSiluMul(Bf(x), Bf(w), M, F, K, Bf(out),
                                                      cuda::PlanGemvSiluMul(F, K, multiprocessors_), stream_,
                                                      programmatic_));
  }

  void StoreKv(const Tensor& qkv, const AttentionShape& shape, KvCacheLayer cache) override {
    const Step& s = CurrentStep("StoreKv");
    ExpectShape("StoreKv", shape);
    ExpectRows("StoreKv", "qkv", qkv, s.num_tokens, shape.qkv_width());
    ExpectCache("StoreKv", cache, shape, s);
    Launched("StoreKv", cuda::LaunchStoreKv(Bf(qkv), s.num_tokens, s.slot_mapping, shape.num_heads,
                                            shape.num_kv_heads, shape.head_dim, Bf(cache.k),
                                            Bf(cache.v), stream_));
  }

  // The fast kernel set fuses the two ops (cuda/qk_norm_rope.cuh); the
  // reference set runs them one after the other, as Backend's default does.
  void QkNormRopeStoreKv(Tensor qkv, const AttentionShape& shape, const Tensor* q_norm, const Tensor* k_norm,
                         float eps, const Tensor& rope, KvCacheLayer cache) override {
    if (kernels_ == cuda::KernelSet::kReference) {
      QkNormRope(qkv, shape, q_norm, k_norm, eps, rope);
      StoreKv(qkv, shape, cache);
      return;
    }
    const Step& s = CurrentStep("QkNormRopeStoreKv");
    CheckQkNormRope("QkNormRopeStoreKv", qkv, shape, q_norm, k_norm, rope, s);
    ExpectCache("QkNormRopeStoreKv", cache, shape, s);
    Launched("QkNormRopeStoreKv",
             cuda::LaunchQkNormRopeStoreKv(Bf(qkv), s.num_tokens, s.positions, s.slot_mapping, shape.num_heads,
                                           shape.num_kv_heads, shape.head_dim, q_norm ? Bf(*q_norm) : nullptr,
                                           k_norm ? Bf(*k_norm) : nullptr, eps, rope.ptr<float>(), Bf(cache.k),
                                           Bf(cache.v), stream_, programmatic_));
  }

  void Attention(const Tensor& qkv, const AttentionShape& shape, KvCacheLayer cache, float scale,
                 Tensor out) override {
    const Step& s = CurrentStep("Attention");
    ExpectShape("Attention", shape);
    Expect(shape.head_dim <= cuda::kMaxAttentionHeadDim, "Attention", "head_dim ", shape.head_dim,
           " is above the kernel's ", cuda::kMaxAttentionHeadDim);
    ExpectRows("Attention", "qkv", qkv, s.num_tokens, shape.qkv_width());
    ExpectRows("Attention", "out", out, s.num_tokens, int64_t{shape.num_heads} * shape.head_dim);
    ExpectCache("Attention", cache, shape, s);
    cuda::PagedAttentionArgs a;
    a.qkv = Bf(qkv);
    a.num_tokens = s.num_tokens;
    a.token_seq = s.token_seq;
    a.positions = s.positions;
    a.block_tables = s.block_tables;
    a.max_blocks_per_seq = s.max_blocks_per_seq;
    a.block_size = s.block_size;
    a.num_heads = shape.num_heads;
    a.num_kv_heads = shape.num_kv_heads;
    a.head_dim = shape.head_dim;
    a.scale = scale;
    a.k_cache = Bf(cache.k);
    a.v_cache = Bf(cache.v);
    a.out = Bf(out);
    const int64_t first_decode = s.num_tokens - s.num_decode_tokens;
    if (deterministic_) {
      AttendDeterministic(a, first_decode);
      return;
    }
    if (AttendDecodeRows(a, first_decode)) {  // the fast decode kernel took the decode rows
      // The prefill rows of a mixed step (most prefill steps under continuous
      // batching): the tensor-core prefill kernel where it covers them, else
      // the reference kernel.
      if (first_decode > 0 && !AttendPrefillRows(a, first_decode)) {
        a.num_tokens = first_decode;
        Launched("Attention", cuda::LaunchPagedAttention(a, stream_));
      }
      return;
    }
    // Reference kernels. Decode rows (the last num_decode_tokens, one query row each) take the
    // split path (cuda/attention.cuh) when Reserve left a workspace that holds
    // them; prefill rows, and every row without one, the single kernel. The
    // choice depends only on sizes that stay fixed between a graph's capture
    // and its replays (T, the decode count, the shape, the reserved capacity).
    cuda::SplitDecodeArgs split;
    split.first_token = first_decode;
    split.max_partitions = attention_partitions_;
    split.workspace = attention_workspace_;
    split.workspace_floats = attention_workspace_floats_;
    const bool use_split =
        s.num_decode_tokens > 0 && attention_workspace_ != nullptr &&
        cuda::SplitDecodeWorkspaceFloats(s.num_decode_tokens, shape.num_heads, shape.head_dim,
                                         attention_partitions_) <= attention_workspace_floats_ &&
        // BeginStep holds reserved steps to max_blocks_per_seq, so this holds then.
        int64_t{s.max_token_position} < int64_t{attention_partitions_} * split.partition_size;
    const bool prefill_done = AttendPrefillRows(a, first_decode);
    if (!use_split) {
      Launched("Attention", cuda::LaunchPagedAttention(prefill_done ? RowsFrom(a, first_decode) : a, stream_));
      return;
    }
    if (!prefill_done) {
      a.num_tokens = first_decode;  // the prefill rows
      Launched("Attention", cuda::LaunchPagedAttention(a, stream_));
      a.num_tokens = s.num_tokens;
    }
    Launched("Attention", cuda::LaunchSplitDecodeAttention(a, split, stream_));
  }

  // The prefill rows [0, first_decode) through the tensor-core prefill kernel
  // (cuda/prefill_attention.cuh) over the tiles BeginStep planned, under the
  // fast kernel set and a head dim it covers; false when it left them to the
  // reference kernel. Prefill steps run eagerly (graphs hold decode steps
  // only, where first_decode is 0), so the grid may follow the step.
  bool AttendPrefillRows(const cuda::PagedAttentionArgs& a, int64_t first_decode) {
    if (kernels_ != cuda::KernelSet::kFast || first_decode == 0 || !cuda::PrefillAttentionCovers(a.head_dim)) {
      return false;
    }
    Launched("Attention", cuda::LaunchPrefillAttention(a, step_.prefill_tiles, step_.num_prefill_tiles, stream_));
    return true;
  }

  // `a` for its rows [first, num_tokens) only (the kernels index rows from 0).
  static cuda::PagedAttentionArgs RowsFrom(cuda::PagedAttentionArgs a, int64_t first) {
    const int64_t width = int64_t{a.num_heads + 2 * a.num_kv_heads} * a.head_dim;
    a.qkv += first * width;
    a.token_seq += first;
    a.positions += first;
    a.out += first * int64_t{a.num_heads} * a.head_dim;
    a.num_tokens -= first;
    return a;
  }

  // ---- fused decoder layers (Backend::FusesLayerOps, cuda/cuda_backend.h) ----

  bool FusesLayerOps(int64_t num_tokens) const override {
    return fuse_layers_ && step_reserved_ && qk_arrivals_ != nullptr && num_tokens >= 1 &&
           num_tokens <= cuda::kGemvMaxRows;
  }

  // One GEMV (LaunchRmsNormGemvQkRope) where it takes the shapes and the
  // unfused ops would run the vector RmsNorm, the GEMV and the fused q/k
  // kernel; else those ops (Backend's default).
  void RmsNormQkvRopeStoreKv(const Tensor& x, const Tensor& norm, float eps, Tensor x_normed, const Tensor& w_qkv,
                             const Tensor* bias, Tensor qkv, const AttentionShape& shape, const Tensor* q_norm,
                             const Tensor* k_norm, const Tensor& rope, KvCacheLayer cache) override {
    const Step& s = CurrentStep("RmsNormQkvRopeStoreKv");
    const int64_t M = x.dim(0), K = x.row_width(), N = w_qkv.dim(0);
    ExpectRows("RmsNormQkvRopeStoreKv", "x", x, M, K);
    ExpectRows("RmsNormQkvRopeStoreKv", "x_normed", x_normed, M, K);
    ExpectVector("RmsNormQkvRopeStoreKv", "norm", norm, K);
    CheckLinear(kCudaBf16, x_normed, w_qkv, bias, qkv);
    CheckQkNormRope("RmsNormQkvRopeStoreKv", qkv, shape, q_norm, k_norm, rope, s);
    ExpectCache("RmsNormQkvRopeStoreKv", cache, shape, s);
    const cuda::GemvPlan plan = cuda::PlanGemv(N, K, multiprocessors_);
    const bool fused = fuse_layers_ && qk_arrivals_ != nullptr &&
                       shape.num_heads + shape.num_kv_heads <= qk_arrival_heads_ &&
                       cuda::GemvSupports(x.data, w_qkv.data, M, N, K) &&
                       cuda::GemvSupports(x_normed.data, w_qkv.data, M, N, K) &&
                       cuda::RmsNormVecSupports(K, x.data, norm.data, x_normed.data) &&
                       shape.head_dim % plan.cols_per_block == 0 && shape.head_dim / 2 <= cuda::kGemvThreads;
    if (!fused) {
      Backend::RmsNormQkvRopeStoreKv(x, norm, eps, x_normed, w_qkv, bias, qkv, shape, q_norm, k_norm, rope, cache);
      return;
    }
    cuda::GemvQkRope qk;
    qk.num_heads = shape.num_heads;
    qk.num_kv_heads = shape.num_kv_heads;
    qk.head_dim = shape.head_dim;
    qk.positions = s.positions;
    qk.slot_mapping = s.slot_mapping;
    qk.q_norm = q_norm ? Bf(*q_norm) : nullptr;
    qk.k_norm = k_norm ? Bf(*k_norm) : nullptr;
    qk.eps = eps;
    qk.rope = rope.ptr<float>();
    qk.k_cache = Bf(cache.k);
    qk.v_cache = Bf(cache.v);
    qk.arrivals = qk_arrivals_;
    Launched("RmsNormQkvRopeStoreKv",
             cuda::LaunchRmsNormGemvQkRope(Bf(x), Bf(norm), eps, Bf(w_qkv), bias ? Bf(*bias) : nullptr, M, N, K,
                                           Bf(qkv), qk, plan, stream_, programmatic_));
  }

  // One GEMV (LaunchRmsNormGemvSiluMul) where the unfused ops would run the
  // vector RmsNorm and the GEMV with the SiLU-mul epilogue; else those ops.
  void RmsNormLinearSiluMul(const Tensor& x, const Tensor& norm, float eps, Tensor x_normed, const Tensor& w,
                            Tensor gate_up, Tensor out) override {
    const int64_t M = x.dim(0), K = x.row_width(), F = out.row_width();
    ExpectRows("RmsNormLinearSiluMul", "x", x, M, K);
    ExpectRows("RmsNormLinearSiluMul", "x_normed", x_normed, M, K);
    ExpectVector("RmsNormLinearSiluMul", "norm", norm, K);
    CheckLinear(kCudaBf16, x_normed, w, nullptr, gate_up);
    ExpectRows("RmsNormLinearSiluMul", "out", out, M, F);
    Expect(w.dim(0) == 2 * F, "RmsNormLinearSiluMul", "w_gate_up ", w.ShapeString(), " must have 2F = ", 2 * F,
           " rows for out ", out.ShapeString());
    const bool fused = fuse_layers_ && cuda::GemvSupports(x.data, w.data, M, 2 * F, K) &&
                       cuda::GemvSupports(x_normed.data, w.data, M, 2 * F, K) &&
                       cuda::RmsNormVecSupports(K, x.data, norm.data, x_normed.data);
    if (!fused) {
      Backend::RmsNormLinearSiluMul(x, norm, eps, x_normed, w, gate_up, out);
      return;
    }
    Launched("RmsNormLinearSiluMul",
             cuda::LaunchRmsNormGemvSiluMul(Bf(x), Bf(norm), eps, Bf(w), M, F, K, Bf(out),
                                            cuda::PlanGemvSiluMul(F, K, multiprocessors_), stream_, programmatic_));
  }

  // The fast set at M <= 8 rows: the GEMV with the residual add in its
  // epilogue (LaunchGemvAddResidual), y unwritten: the bits of Linear then
  // AddRmsNorm's add. Otherwise one cuBLAS GEMM accumulating into the residual
  // (beta = 1) and the bias added after: one rounding fewer than the two ops,
  // so within bf16 rounding of them, not bit for bit.
  void LinearAddResidual(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor y, Tensor residual) override {
    const int64_t M = x.dim(0), K = x.row_width(), N = w.dim(0);
    CheckLinear(kCudaBf16, x, w, bias, y);
    ExpectRows("LinearAddResidual", "residual", residual, M, N);
    Expect(M <= 0x7fffffff && N <= 0x7fffffff && K <= 0x7fffffff, "LinearAddResidual", "dimensions beyond int32");
    if (M == 0 || N == 0) return;
    if (deterministic_) {  // FusesLayerOps is false: the model never calls this
      Backend::LinearAddResidual(x, w, bias, y, residual);
      return;
    }
    if (kernels_ == cuda::KernelSet::kFast && cuda::GemvSupports(x.data, w.data, M, N, K)) {
      Launched("LinearAddResidual",
               cuda::LaunchGemvAddResidual(Bf(x), Bf(w), bias ? Bf(*bias) : nullptr, M, N, K, Bf(residual),
                                           cuda::PlanGemv(N, K, multiprocessors_), stream_, programmatic_));
      return;
    }
    CublasLinear(x, w, 1.f, residual);
    if (bias) Launched("LinearAddResidual", cuda::LaunchAddBias(Bf(residual), Bf(*bias), M, N, stream_));
  }

  void GatherRows(const Tensor& x, Tensor out) override {
    const Step& s = CurrentStep("GatherRows");
    const int64_t D = x.row_width();
    ExpectRows("GatherRows", "x", x, s.num_tokens, D);
    ExpectRows("GatherRows", "out", out, s.num_logits_rows, D);
    Launched("GatherRows",
             cuda::LaunchGatherRows(Bf(x), D, s.logits_indices, s.num_logits_rows, Bf(out), stream_, programmatic_));
  }

 private:
  // The current step: sizes on the host, arrays on the device (pointers into step_device_).
  struct Step {
    int64_t num_tokens = 0, num_seqs = 0, num_blocks = 0;
    int64_t num_logits_rows = 0;              // R: S, or more with verifying sequences (backend/step.h)
    int64_t num_decode_tokens = 0;            // the last rows: one per decode sequence
    int32_t block_size = 0, max_blocks_per_seq = 0, max_token_position = 0;
    const int32_t* token_ids = nullptr;       // [T]
    const int32_t* positions = nullptr;       // [T]
    const int64_t* slot_mapping = nullptr;    // [T]
    const int32_t* token_seq = nullptr;       // [T] sequence of each token
    const int32_t* block_tables = nullptr;    // [S, max_blocks_per_seq]
    const int32_t* logits_indices = nullptr;  // [R]
    const cuda::PrefillTile* prefill_tiles = nullptr;  // [num_prefill_tiles] (cuda/prefill_tiles.h)
    int64_t num_prefill_tiles = 0;
  };

  // Host synchronisation, allocation and a new step cannot be captured.
  void NotCapturing(const char* op) const {
    Expect(!capturing_, op, "cannot run while a CUDA graph is being captured (only the ops of a "
           "step may run between BeginCapture and EndCapture)");
  }
  const Step& CurrentStep(const char* op) const {
    Expect(has_step_, op, "no current step: call BeginStep first (and check its Status)");
    return step_;
  }
  // A failed cudaMalloc as a Status: RESOURCE_EXHAUSTED (out of memory) or
  // INTERNAL, naming the bytes asked and free. Clears the sticky error so the
  // backend stays usable.
  absl::Status AllocationFailed(const Tensor& t, size_t bytes, cudaError_t err) const {
    (void)cudaGetLastError();
    size_t free_bytes = 0, total_bytes = 0;
    if (cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess) (void)cudaGetLastError();
    const std::string what = absl::StrCat(
        "CudaBackend::Allocate: cudaMalloc of ", bytes, " bytes for ", t.ShapeString(), " on device ",
        device_, " failed (", cudaGetErrorString(err), "); ", free_bytes, " of ", total_bytes,
        " bytes free");
    if (err != cudaErrorMemoryAllocation) return absl::InternalError(what);
    return absl::ResourceExhaustedError(
        absl::StrCat(what, "; ask for less (a lower --gpu-memory-utilization, fewer KV blocks)"));
  }
  static void ExpectDeviceAny(const char* op, const char* name, const Tensor& t) {
    Expect(t.device == Device::kCuda && (t.data || t.numel() == 0), op, name, " ", t.ShapeString(),
           " must be a CUDA tensor with data");
  }
  static void ExpectShape(const char* op, const AttentionShape& shape) {
    Expect(shape.num_heads > 0 && shape.num_kv_heads > 0 && shape.head_dim > 0 &&
               shape.head_dim % 2 == 0 && shape.num_heads % shape.num_kv_heads == 0,
           op, "bad AttentionShape Hq=", shape.num_heads, " Hkv=", shape.num_kv_heads,
           " hd=", shape.head_dim);
  }
  // QkNormRope's operands against the step (the fused op checks the same).
  static void CheckQkNormRope(const char* op, const Tensor& qkv, const AttentionShape& shape, const Tensor* q_norm,
                              const Tensor* k_norm, const Tensor& rope, const Step& s) {
    const int64_t hd = shape.head_dim;
    ExpectShape(op, shape);
    Expect(hd <= cuda::kMaxRopeHeadDim, op, "head_dim ", hd, " is above the kernel's ", cuda::kMaxRopeHeadDim);
    ExpectRows(op, "qkv", qkv, s.num_tokens, shape.qkv_width());
    CheckOperand({kCudaBf16.backend, Device::kCuda, DType::kF32}, op, "rope", rope);
    Expect(rope.ndim == 2 && rope.dim(1) == hd, op, "rope is ", rope.ShapeString(), ", expected [max_position, ",
           hd, "]");
    if (q_norm) ExpectVector(op, "q_norm", *q_norm, hd);
    if (k_norm) ExpectVector(op, "k_norm", *k_norm, hd);
    Expect(s.num_tokens == 0 || s.max_token_position < rope.dim(0), op, "position ", s.max_token_position,
           " is beyond the rope table ", rope.ShapeString(), "; pass BeginStep the table's length as max_position");
  }
  // The cache tensors must match the geometry BeginStep validated against.
  static void ExpectCache(const char* op, const KvCacheLayer& cache, const AttentionShape& shape,
                          const Step& s) {
    for (const Tensor* t : {&cache.k, &cache.v}) {
      CheckOperand(kCudaBf16, op, t == &cache.k ? "cache.k" : "cache.v", *t);
      Expect(t->ndim == 4 && t->dim(0) == s.num_blocks && t->dim(1) == s.block_size &&
                 t->dim(2) == shape.num_kv_heads && t->dim(3) == shape.head_dim,
             op, "cache ", t->ShapeString(), " must be [num_blocks=", s.num_blocks,
             ", block_size=", s.block_size, ", Hkv=", shape.num_kv_heads, ", hd=", shape.head_dim,
             "] as given to BeginStep");
    }
  }

  // Fast decode attention (cuda/decode_attention.cuh) of rows [first_decode,
  // T) under KernelSet::kFast; false (nothing launched) when the reference
  // kernels take them: the reference set, no decode rows, or a shape the fast
  // kernel does not cover.
  bool AttendDecodeRows(const cuda::PagedAttentionArgs& a, int64_t first_decode);
  // Deterministic mode: every row through cuda/det_attention.cuh (the
  // reference kernel for shapes it does not cover).
  void AttendDeterministic(const cuda::PagedAttentionArgs& a, int64_t first_decode);

  // y = x · wᵀ + beta · y through cuBLAS (fp32 accumulation, one rounding to bf16).
  void CublasLinear(const Tensor& x, const Tensor& w, float beta, Tensor y) {
    const int64_t M = x.dim(0), K = x.row_width(), N = w.dim(0);
    // Row-major y[M, N] = x[M, K] · w[N, K]ᵀ is column-major yᵀ[N, M] = w · xᵀ:
    // cuBLAS sees w as a column-major [K, N] (ld K) and transposes it, x as a
    // column-major [K, M] (ld K), and writes yᵀ as a column-major [N, M] (ld N).
    const float alpha = 1.f;
    CUBLAS_CHECK(cublasGemmEx(cublas_, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(N),
                              static_cast<int>(M), static_cast<int>(K), &alpha, w.data, CUDA_R_16BF,
                              static_cast<int>(K), x.data, CUDA_R_16BF, static_cast<int>(K), &beta,
                              y.data, CUDA_R_16BF, static_cast<int>(N), CUBLAS_COMPUTE_32F,
                              CUBLAS_GEMM_DEFAULT));
  }

  // Reserve's parts: the step metadata buffers, the attention workspace and
  // the fused QKV GEMV's counters, sized for capacity_.
  absl::Status ReserveStepBuffers();
  absl::Status ReserveFusionCounters();
  // BeginStep's copies of a step packed into step_host_ (the token arrays
  // already there) to step_device_.
  void UploadStep(const StepMetadata& step, const cuda::StepLayout& layout, const cuda::StepUpload& upload,
                  int64_t prefill_tiles);
  absl::Status ReserveAttentionWorkspace();

  int device_;
  cuda::KernelSet kernels_;  // which kernels the ops launch (cuda/kernel_set.h)
  bool deterministic_;       // batch-invariant Linear and Attention (cuda_backend.h)
  int det_partition_keys_;   // keys per deterministic attention partition
  bool fuse_layers_;         // FusesLayerOps may say yes (fast set only, not deterministic)
  int multiprocessors_ = 0;  // the device's SMs, for grid planning (cuda/gemv_plan.h, cuda/decode_plan.h)
  bool programmatic_ = false;  // PDL launches of the fast decode-path kernels (fast set, sm_90+)
  StepCapacity capacity_;  // from Reserve; zeros until then
  cudaStream_t stream_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  std::vector<unsigned char> staging_;  // host conversions in CopyFromHost / CopyToHostF32

  // Step metadata upload: packed on the host into pinned memory, one copy.
  cudaEvent_t upload_done_ = nullptr;  // the last upload has left step_host_
  unsigned char* step_host_ = nullptr;
  unsigned char* step_device_ = nullptr;
  size_t step_capacity_ = 0;  // bytes of each
  bool step_reserved_ = false;  // ReserveStepBuffers ran: fixed layout, BeginStep never reallocates
  bool has_step_ = false;
  bool capturing_ = false;        // between BeginCapture and EndCapture
  void* cublas_workspace_ = nullptr;  // kCublasWorkspaceBytes, so captured GEMMs never allocate
  Step step_;

  // Split decode attention (ReserveAttentionWorkspace); none until Reserve.
  float* attention_workspace_ = nullptr;
  size_t attention_workspace_floats_ = 0;
  // The fast decode kernel's arrival counters, [decode rows, Hkv <= Hq],
  // zeroed at Reserve and left zero by every launch (cuda/decode_attention.cuh).
  uint32_t* decode_arrivals_ = nullptr;
  // The fused QKV GEMV's arrival counters, one per q and k head (Hq + Hkv <=
  // 2 max_query_heads), zeroed at Reserve and left zero by every launch.
  uint32_t* qk_arrivals_ = nullptr;
  int32_t qk_arrival_heads_ = 0;
  int attention_partitions_ = 0;  // partitions of the longest reserved context
  int det_partitions_ = 0;        // deterministic mode's partitions of the longest reserved context
};

// The split decode attention's partials (cuda/attention.cuh) for the most
// decode tokens a step can hold (one per sequence), every local query head and
// the partitions of the longest context BeginStep accepts (max_blocks_per_seq
// blocks); under the fast kernels also as many as any plan of the fast decode
// kernel asks (cuda/decode_plan.h). Without the heads and head dim
// (StepCapacity's 0 = unknown) there is no workspace: decode attention runs
// the single reference kernel, or the fast one unsplit.
absl::Status CudaBackend::ReserveAttentionWorkspace() {
  if (capacity_.max_query_heads < 0 || capacity_.max_head_dim < 0 ||
      capacity_.max_head_dim > cuda::kMaxAttentionHeadDim) {
    return absl::InvalidArgumentError(absl::StrCat(
        "CudaBackend::Reserve: StepCapacity max_query_heads = ", capacity_.max_query_heads, " and max_head_dim = ",
        capacity_.max_head_dim, " must be in [0, ...) and [0, ", cuda::kMaxAttentionHeadDim,
        "] (0 = unknown, no attention workspace)"));
  }
  const int64_t context = int64_t{capacity_.max_blocks_per_seq()} * capacity_.block_size;
  const int64_t partitions = (context + cuda::kDecodePartitionSize - 1) / cuda::kDecodePartitionSize;
  if (partitions > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("CudaBackend::Reserve: max_context ", capacity_.max_context,
                                                   " is beyond the split decode attention's ",
                                                   65535 * int64_t{cuda::kDecodePartitionSize}, " tokens"));
  }
  const int64_t rows = std::min(capacity_.max_seqs, capacity_.max_tokens);
  size_t floats = capacity_.max_query_heads > 0 && capacity_.max_head_dim > 0
      ? cuda::SplitDecodeWorkspaceFloats(rows, capacity_.max_query_heads, capacity_.max_head_dim,
                                         static_cast<int>(partitions))
      : 0;
  const int64_t det_partitions = (context + det_partition_keys_ - 1) / det_partition_keys_;
  if (deterministic_ && det_partitions > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("CudaBackend::Reserve: max_context ", capacity_.max_context,
                                                   " is beyond the deterministic attention's ",
                                                   65535 * int64_t{det_partition_keys_}, " tokens"));
  }
  if (floats > 0 && deterministic_) {  // one unnormalised partial row per (token, head, partition)
    floats = std::max(floats, cuda::SplitDecodeWorkspaceFloats(rows, capacity_.max_query_heads, capacity_.max_head_dim,
                                                                static_cast<int>(det_partitions)));
  }
  if (floats > 0 && kernels_ == cuda::KernelSet::kFast) {  // one partial row per (token, head, split)
    const int64_t partials = cuda::DecodeWorkspacePartials(rows, context, multiprocessors_);
    floats = std::max(floats, cuda::SplitDecodeWorkspaceFloats(partials, capacity_.max_query_heads,
                                                               capacity_.max_head_dim, 1));
  }
  if (attention_workspace_ || decode_arrivals_) {
    CUDA_CHECK(cudaStreamSynchronize(stream_));  // earlier steps may still read them
    if (attention_workspace_) CUDA_CHECK(cudaFree(attention_workspace_));
    if (decode_arrivals_) CUDA_CHECK(cudaFree(decode_arrivals_));
  }
  attention_workspace_ = nullptr;
  decode_arrivals_ = nullptr;
  attention_workspace_floats_ = 0;
  attention_partitions_ = 0;
  det_partitions_ = 0;
  if (floats == 0) return absl::OkStatus();
  void* ws = nullptr;
  if (cudaError_t err = cudaMalloc(&ws, floats * sizeof(float)); err != cudaSuccess) {
    cudaGetLastError();
    return absl::ResourceExhaustedError(absl::StrCat(
        "CudaBackend::Reserve: cudaMalloc of ", floats * sizeof(float), " bytes of split decode attention "
        "workspace (", rows, " decode tokens x ", capacity_.max_query_heads, " heads x ", partitions,
        " partitions of ", cuda::kDecodePartitionSize, " tokens x (", capacity_.max_head_dim, " + 2) floats) failed: ",
        cudaGetErrorString(err), "; lower --max-num-seqs or --max-model-len"));
  }
  if (kernels_ == cuda::KernelSet::kFast) {  // one counter per (decode row, KV head), zero between launches
    const size_t bytes = static_cast<size_t>(rows) * static_cast<size_t>(capacity_.max_query_heads) * sizeof(uint32_t);
    void* counters = nullptr;
    if (cudaError_t err = cudaMalloc(&counters, bytes); err != cudaSuccess) {
      cudaGetLastError();
      cudaFree(ws);
      return absl::ResourceExhaustedError(absl::StrCat("CudaBackend::Reserve: cudaMalloc of ", bytes,
                                                       " bytes of decode attention counters failed: ",
                                                       cudaGetErrorString(err)));
    }
    CUDA_CHECK(cudaMemsetAsync(counters, 0, bytes, stream_));
    decode_arrivals_ = static_cast<uint32_t*>(counters);
  }
  attention_workspace_ = static_cast<float*>(ws);
  attention_workspace_floats_ = floats;
  attention_partitions_ = static_cast<int>(partitions);
  det_partitions_ = static_cast<int>(det_partitions);
  return absl::OkStatus();
}

// Prefill rows through the uploaded 64-row tiles, in order; decode rows split
// across blocks when the workspace holds their partials (the grid from the
// reserved context while a graph is captured, so that it serves every replay;
// from the step's longest context otherwise), in order when not. Both ways
// give the same bits (cuda/det_attention.cuh), so the choice may follow the
// step.
void CudaBackend::AttendDeterministic(const cuda::PagedAttentionArgs& a, int64_t first_decode) {
  if (!cuda::DetAttentionCovers(a.head_dim, a.num_heads, a.num_kv_heads)) {
    Launched("Attention", cuda::LaunchPagedAttention(a, stream_));  // a function of each row alone too
    return;
  }
  cuda::DetAttentionRows rows;
  rows.partition_keys = det_partition_keys_;
  if (first_decode > 0) {
    rows.tiles = step_.prefill_tiles;
    rows.num_tiles = step_.num_prefill_tiles;
    rows.first_decode = a.num_tokens;  // no decode rows in this launch
    Launched("Attention", cuda::LaunchDetAttention(a, rows, stream_));
  }
  const int64_t decodes = a.num_tokens - first_decode;
  if (decodes == 0) return;
  rows = cuda::DetAttentionRows();
  rows.partition_keys = det_partition_keys_;
  rows.first_decode = first_decode;
  const int64_t partitions = capturing_ ? det_partitions_
                                        : (int64_t{step_.max_token_position} + det_partition_keys_) / det_partition_keys_;
  if (partitions > 1 && partitions <= det_partitions_ && attention_workspace_ != nullptr &&
      cuda::SplitDecodeWorkspaceFloats(decodes, a.num_heads, a.head_dim, static_cast<int>(partitions)) <=
          attention_workspace_floats_) {
    rows.max_partitions = static_cast<int>(partitions);
    rows.workspace = attention_workspace_;
    rows.workspace_floats = attention_workspace_floats_;
  }
  Launched("Attention", cuda::LaunchDetAttention(a, rows, stream_));
}

// One arrival counter per q and k head of any layer (Hq + Hkv <= 2 Hq), for
// the fused QKV GEMV's epilogue; none without the fast set's fusions or the
// head count (StepCapacity's 0 = unknown): FusesLayerOps is then false.
absl::Status CudaBackend::ReserveFusionCounters() {
  if (qk_arrivals_) {
    CUDA_CHECK(cudaStreamSynchronize(stream_));  // earlier steps may still count on them
    CUDA_CHECK(cudaFree(qk_arrivals_));
  }
  qk_arrivals_ = nullptr;
  qk_arrival_heads_ = 0;
  if (!fuse_layers_ || capacity_.max_query_heads <= 0) return absl::OkStatus();
  const int32_t heads = 2 * capacity_.max_query_heads;
  void* p = nullptr;
  if (cudaError_t err = cudaMalloc(&p, heads * sizeof(uint32_t)); err != cudaSuccess) {
    cudaGetLastError();
    return absl::ResourceExhaustedError(absl::StrCat("CudaBackend::Reserve: cudaMalloc of ", heads * sizeof(uint32_t),
                                                     " bytes of fused QKV counters failed: ", cudaGetErrorString(err)));
  }
  CUDA_CHECK(cudaMemsetAsync(p, 0, heads * sizeof(uint32_t), stream_));
  qk_arrivals_ = static_cast<uint32_t*>(p);
  qk_arrival_heads_ = heads;
  return absl::OkStatus();
}

// The plan's grid depends only on sizes fixed for a graph's bucket while one
// is captured (decode count, heads, the reserved context), on the step's
// longest context otherwise; the kernel reads each token's context on the
// device, so a captured launch serves every replay.
bool CudaBackend::AttendDecodeRows(const cuda::PagedAttentionArgs& a, int64_t first_decode) {
  const int64_t n = a.num_tokens - first_decode;
  if (kernels_ != cuda::KernelSet::kFast || n <= 0 || !cuda::FastDecodeCovers(a)) return false;
  const int64_t reserved = int64_t{capacity_.max_blocks_per_seq()} * capacity_.block_size;
  cuda::DecodePlanInput in;
  in.num_tokens = n;
  in.num_kv_heads = a.num_kv_heads;
  in.fixed_grid = capturing_;
  in.context = capturing_ && reserved > 0 ? reserved : int64_t{step_.max_token_position} + 1;
  in.sm_count = multiprocessors_;
  in.blocks_per_sm = cuda::FastDecodeBlocksPerSm(a.head_dim, a.num_heads / a.num_kv_heads);
  in.block_keys = cuda::FastDecodeBlockKeys(a.head_dim, a.num_heads / a.num_kv_heads);
  cuda::DecodePlan plan = cuda::PlanDecode(in);
  if (cuda::FastDecodeWorkspaceFloats(n, a.num_heads, a.head_dim, plan) > attention_workspace_floats_ ||
      decode_arrivals_ == nullptr) {
    plan.splits = 1;  // no (or too small a) workspace: one block per (token, KV head), no partials
  }
  Launched("Attention", cuda::LaunchFastDecodeAttention(a, first_decode, plan, attention_workspace_,
                                                        attention_workspace_floats_, decode_arrivals_, stream_,
                                                        programmatic_));
  return true;
}

// The query tiles of the step's prefill sequences (cuda/prefill_tiles.h) into
// `host` (the layout's tile region); how many. The layout holds the most a
// step of its size can have, so running out is a bug.
int64_t PlanStepPrefillTiles(const StepMetadata& step, const cuda::StepLayout& layout, unsigned char* host) {
  auto* tiles = reinterpret_cast<cuda::PrefillTile*>(host);
  const int64_t n = cuda::PlanPrefillTiles(step.query_start.data(), step.positions.data(), step.num_prefill_seqs,
                                           cuda::kPrefillTileRows, tiles, layout.max_tiles);
  TPSERVE_CHECK(n >= 0, "BeginStep: the prefill tiles of the step exceed the layout's ", layout.max_tiles);
  return n;
}

absl::Status CudaBackend::ReserveStepBuffers() {
  const cuda::StepLayout layout(static_cast<size_t>(capacity_.max_tokens), static_cast<size_t>(capacity_.max_seqs),
                          static_cast<size_t>(capacity_.max_blocks_per_seq()));
  // Earlier steps (or graphs) may still read the old buffers.
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  if (step_device_) CUDA_CHECK(cudaFree(step_device_));
  if (step_host_) CUDA_CHECK(cudaFreeHost(step_host_));
  step_device_ = step_host_ = nullptr;
  step_capacity_ = 0;
  step_reserved_ = has_step_ = false;
  void* d = nullptr;
  void* h = nullptr;
  if (cudaError_t err = cudaMalloc(&d, layout.total); err != cudaSuccess) {
    cudaGetLastError();
    return absl::ResourceExhaustedError(absl::StrCat(
        "CudaBackend::Reserve: cudaMalloc of ", layout.total, " bytes of step metadata for ",
        capacity_.max_tokens, " tokens, ", capacity_.max_seqs, " sequences and ", capacity_.max_blocks_per_seq(),
        " blocks per sequence failed: ", cudaGetErrorString(err),
        "; lower --max-num-batched-tokens, --max-num-seqs or --max-model-len"));
  }
  if (cudaError_t err = cudaMallocHost(&h, layout.total); err != cudaSuccess) {
    cudaGetLastError();
    cudaFree(d);
    return absl::ResourceExhaustedError(absl::StrCat("CudaBackend::Reserve: cudaMallocHost of ", layout.total,
                                                     " pinned bytes failed: ", cudaGetErrorString(err)));
  }
  step_device_ = static_cast<unsigned char*>(d);
  step_host_ = static_cast<unsigned char*>(h);
  step_capacity_ = layout.total;
  if (cublas_workspace_ == nullptr) {
    // cuBLAS's own workspace pool may allocate inside a capture; a fixed one never does.
    if (cudaError_t err = cudaMalloc(&cublas_workspace_, kCublasWorkspaceBytes); err != cudaSuccess) {
      cudaGetLastError();
      cublas_workspace_ = nullptr;
      return absl::ResourceExhaustedError(absl::StrCat("CudaBackend::Reserve: cudaMalloc of the ",
                                                       kCublasWorkspaceBytes, "-byte cuBLAS workspace failed: ",
                                                       cudaGetErrorString(err)));
    }
    CUBLAS_CHECK(cublasSetWorkspace(cublas_, cublas_workspace_, kCublasWorkspaceBytes));
  }
  step_reserved_ = true;
  return absl::OkStatus();
}

// The used block-table columns packed row after row at layout.tables, then
// the copies cuda/step_layout.h describes; upload_done_ marks when step_host_
// may be written again.
void CudaBackend::UploadStep(const StepMetadata& step, const cuda::StepLayout& layout,
                             const cuda::StepUpload& upload, int64_t prefill_tiles) {
  unsigned char* h = step_host_ + layout.tables;
  if (upload.row_bytes > 0) {
    for (size_t s = 0; s < upload.rows; ++s) {
      std::memcpy(h + s * upload.row_bytes, step.block_tables.data() + s * step.max_blocks_per_seq,
                  upload.row_bytes);
    }
  }
  if (upload.contiguous()) {
    if (upload.bytes() > 0) {
      CUDA_CHECK(cudaMemcpyAsync(step_device_, step_host_, upload.bytes(), cudaMemcpyHostToDevice, stream_));
    }
  } else {
    if (upload.prefix_bytes > 0) {
      CUDA_CHECK(cudaMemcpyAsync(step_device_, step_host_, upload.prefix_bytes, cudaMemcpyHostToDevice, stream_));
    }
    if (upload.row_bytes > 0 && upload.rows > 0) {
      CUDA_CHECK(cudaMemcpy2DAsync(step_device_ + layout.tables, upload.pitch_bytes, h, upload.row_bytes,
                                   upload.row_bytes, upload.rows, cudaMemcpyHostToDevice, stream_));
    }
  }
  if (prefill_tiles > 0) {  // a second copy, made only by steps with prefill rows (never by captured ones)
    CUDA_CHECK(cudaMemcpyAsync(step_device_ + layout.tiles, step_host_ + layout.tiles,
                               static_cast<size_t>(prefill_tiles) * sizeof(cuda::PrefillTile),
                               cudaMemcpyHostToDevice, stream_));
  }
  CUDA_CHECK(cudaEventRecord(upload_done_, stream_));
}

absl::Status CudaBackend::BeginStep(const StepMetadata& step, int64_t num_blocks, int32_t block_size,
                                    int64_t max_position) {
  NotCapturing("BeginStep");
  has_step_ = false;
  if (absl::Status status = ValidateStep(step, num_blocks, block_size, max_position); !status.ok()) {
    return status;
  }
  const size_t T = step.token_ids.size(), S = static_cast<size_t>(step.num_seqs());
  const size_t R = static_cast<size_t>(step.num_logits_rows());
  const size_t columns = static_cast<size_t>(step.max_blocks_per_seq);
  if (step_reserved_ && (static_cast<int64_t>(T) > capacity_.max_tokens ||
                         static_cast<int64_t>(S) > capacity_.max_seqs ||
                         static_cast<int64_t>(R) > capacity_.max_seqs ||
                         step.max_blocks_per_seq > capacity_.max_blocks_per_seq())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "BeginStep: a step of ", T, " tokens, ", S, " sequences, ", R, " logits rows and max_blocks_per_seq ",
        columns, " exceeds the capacity given to Reserve (", capacity_.max_tokens, " tokens, ", capacity_.max_seqs,
        " sequences or logits rows, ", capacity_.max_blocks_per_seq(), " blocks of ", capacity_.block_size,
        " tokens); split the step or Reserve more"));
  }
  // This step's own layout (cuda/step_layout.h), so the copies follow the
  // step. Reserved: in buffers sized for the capacity's layout, which holds
  // any step's, at addresses that depend on T, S and max_blocks_per_seq only
  // (what a graph's replays share with its capture). Otherwise in buffers
  // that grow.
  const cuda::StepLayout layout(T, S, columns, R);
  TPSERVE_CHECK(!step_reserved_ || layout.total <= step_capacity_, "BeginStep: the step's layout (", layout.total,
                " bytes) exceeds the reserved buffers (", step_capacity_, ")");
  const cuda::StepUpload upload =
      cuda::PlanStepUpload(layout, S, columns, cuda::UsedBlockColumns(step.seq_lens, block_size));

  if (step_host_) CUDA_CHECK(cudaEventSynchronize(upload_done_));  // step_host_ is free again
  if (!step_reserved_ && layout.total > step_capacity_) {
    // Ops of earlier steps may still read step_device_: wait before freeing it.
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    if (step_device_) CUDA_CHECK(cudaFree(step_device_));
    if (step_host_) CUDA_CHECK(cudaFreeHost(step_host_));
    step_capacity_ = std::max<size_t>(layout.total, 2 * step_capacity_);
    step_capacity_ = std::max<size_t>(step_capacity_, 64 << 10);
    void* d = nullptr;
    void* h = nullptr;
    CUDA_CHECK(cudaMalloc(&d, step_capacity_));
    CUDA_CHECK(cudaMallocHost(&h, step_capacity_));
    step_device_ = static_cast<unsigned char*>(d);
    step_host_ = static_cast<unsigned char*>(h);
  }
  unsigned char* h = step_host_;
  if (T > 0) {
    std::memcpy(h + layout.slots, step.slot_mapping.data(), T * sizeof(int64_t));
    std::memcpy(h + layout.ids, step.token_ids.data(), T * sizeof(int32_t));
    std::memcpy(h + layout.pos, step.positions.data(), T * sizeof(int32_t));
  }
  auto* token_seq = reinterpret_cast<int32_t*>(h + layout.seq);
  for (size_t s = 0; s < S; ++s) {
    for (int32_t t = step.query_start[s]; t < step.query_start[s + 1]; ++t) {
      token_seq[t] = static_cast<int32_t>(s);
    }
  }
  if (R > 0) std::memcpy(h + layout.logits, step.logits_indices.data(), R * sizeof(int32_t));
  const int64_t tiles = PlanStepPrefillTiles(step, layout, h + layout.tiles);
  UploadStep(step, layout, upload, tiles);

  unsigned char* d = step_device_;
  step_.num_tokens = static_cast<int64_t>(T);
  step_.num_seqs = static_cast<int64_t>(S);
  step_.num_logits_rows = static_cast<int64_t>(R);
  step_.num_blocks = num_blocks;
  step_.block_size = block_size;
  step_.max_blocks_per_seq = step.max_blocks_per_seq;
  step_.max_token_position = T > 0 ? *std::max_element(step.positions.begin(), step.positions.end()) : 0;
  step_.num_decode_tokens = step.num_decode_seqs;
  step_.slot_mapping = reinterpret_cast<const int64_t*>(d + layout.slots);
  step_.token_ids = reinterpret_cast<const int32_t*>(d + layout.ids);
  step_.positions = reinterpret_cast<const int32_t*>(d + layout.pos);
  step_.token_seq = reinterpret_cast<const int32_t*>(d + layout.seq);
  step_.block_tables = reinterpret_cast<const int32_t*>(d + layout.tables);
  step_.logits_indices = reinterpret_cast<const int32_t*>(d + layout.logits);
  step_.prefill_tiles = reinterpret_cast<const cuda::PrefillTile*>(d + layout.tiles);
  step_.num_prefill_tiles = tiles;
  has_step_ = true;
  return absl::OkStatus();
}

}  // namespace

std::unique_ptr<Backend> MakeCudaBackend(int device, cuda::KernelSet kernels, bool programmatic_launch,
                                         bool fuse_layer_ops) {
  CudaBackendOptions options;
  options.kernels = kernels;
  options.programmatic_launch = programmatic_launch;
  options.fuse_layer_ops = fuse_layer_ops;
  return MakeCudaBackend(device, options);
}

std::unique_ptr<Backend> MakeCudaBackend(int device, const CudaBackendOptions& options) {
  return std::make_unique<CudaBackend>(device, options);
}

}  // namespace tpserve
