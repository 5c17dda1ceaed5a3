// gpu_bench's `profile` section: one eager batch-1 decode step of a whole
// model, op by op, each timed with CUDA events on the backend's stream, next
// to the same step replayed as a CUDA graph. It needs no profiler: on this
// workplace's GPU machines Nsight Systems makes no reports and ncu and
// compute-sanitizer work on one of the two runtimes only
// (scripts/gpu-check.sh's preflight says which).
//
// The ops are the Backend calls of Model::Enqueue (each one kernel, but for
// the reference set's split attention and the host copies), recorded by a
// Backend that wraps the CUDA backend and brackets every op with two events.
// The step is enqueued whole behind a host function that holds the stream
// until the last op is queued, so the GPU runs the ops back to back, as a
// graph does, and host launch gaps stay out of the events (not under
// --smoke, where the emulated stream runs each op at its call).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bench/gpu/bench_util.h"
#include "comm/communicator.h"
#include "cuda/check.h"
#include "cuda/cuda_backend.h"
#include "worker/kv_cache.h"
#include "worker/model.h"

namespace tpserve::gpu_bench {
namespace {

// The CUDA backend with two events around each op while `timing` is on.
class TimedBackend final : public Backend {
 public:
  struct Span {
    std::string op;
    cudaEvent_t begin, end;
  };

  explicit TimedBackend(std::unique_ptr<Backend> inner) : inner_(std::move(inner)) {}
  ~TimedBackend() override { Clear(); }

  void set_timing(bool on) { timing_ = on; }
  const std::vector<Span>& spans() const { return spans_; }
  void Clear() {
    for (Span& s : spans_) {
      cudaEventDestroy(s.begin);
      cudaEventDestroy(s.end);
    }
    spans_.clear();
  }

  std::string name() const override { return inner_->name(); }
  Device device() const override { return inner_->device(); }
  DType compute_dtype() const override { return inner_->compute_dtype(); }
  using Backend::TryAllocate;
  absl::StatusOr<Buffer> TryAllocate(DType dtype, std::span<const int64_t> shape) override {
    return inner_->TryAllocate(dtype, shape);
  }
  void CopyFromHost(const void* src, DType src_dtype, Tensor dst) override { inner_->CopyFromHost(src, src_dtype, dst); }
  void CopyToHostF32(const Tensor& src, float* dst) override { inner_->CopyToHostF32(src, dst); }
  void Copy(const Tensor& src, Tensor dst) override { Timed("Copy", [&] { inner_->Copy(src, dst); }); }
  void Synchronize() override { inner_->Synchronize(); }
  void* stream() const override { return inner_->stream(); }
  absl::Status Reserve(const StepCapacity& capacity) override { return inner_->Reserve(capacity); }
  bool SupportsGraphs() const override { return inner_->SupportsGraphs(); }
  absl::Status BeginCapture() override { return inner_->BeginCapture(); }
  absl::StatusOr<std::unique_ptr<BackendGraph>> EndCapture() override { return inner_->EndCapture(); }
  absl::Status BeginStep(const StepMetadata& step, int64_t num_blocks, int32_t block_size,
                         int64_t max_position) override {
    return inner_->BeginStep(step, num_blocks, block_size, max_position);
  }
  void Embedding(const Tensor& table, int64_t vocab_start, Tensor out) override {
    Timed("Embedding", [&] { inner_->Embedding(table, vocab_start, out); });
  }
  void Linear(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor y) override {
    Timed(absl::StrCat("Linear ", x.row_width(), " -> ", w.dim(0)), [&] { inner_->Linear(x, w, bias, y); });
  }
  void RmsNorm(const Tensor& x, const Tensor& w, float eps, Tensor out) override {
    Timed("RmsNorm", [&] { inner_->RmsNorm(x, w, eps, out); });
  }
  void AddRmsNorm(Tensor x, Tensor residual, const Tensor& w, float eps) override {
    Timed("AddRmsNorm", [&] { inner_->AddRmsNorm(x, residual, w, eps); });
  }
  void QkNormRope(Tensor qkv, const AttentionShape& shape, const Tensor* q_norm, const Tensor* k_norm, float eps,
                  const Tensor& rope) override {
    Timed("QkNormRope", [&] { inner_->QkNormRope(qkv, shape, q_norm, k_norm, eps, rope); });
  }
  void SiluMul(const Tensor& gate_up, Tensor out) override { Timed("SiluMul", [&] { inner_->SiluMul(gate_up, out); }); }
  void LinearSiluMul(const Tensor& x, const Tensor& w, Tensor gate_up, Tensor out) override {
    Timed("LinearSiluMul", [&] { inner_->LinearSiluMul(x, w, gate_up, out); });
  }
  void StoreKv(const Tensor& qkv, const AttentionShape& shape, KvCacheLayer cache) override {
    Timed("StoreKv", [&] { inner_->StoreKv(qkv, shape, cache); });
  }
  void QkNormRopeStoreKv(Tensor qkv, const AttentionShape& shape, const Tensor* q_norm, const Tensor* k_norm,
                         float eps, const Tensor& rope, KvCacheLayer cache) override {
    Timed("QkNormRopeStoreKv", [&] { inner_->QkNormRopeStoreKv(qkv, shape, q_norm, k_norm, eps, rope, cache); });
  }
  void Attention(const Tensor& qkv, const AttentionShape& shape, KvCacheLayer cache, float scale,
                 Tensor out) override {
    Timed("Attention", [&] { inner_->Attention(qkv, shape, cache, scale, out); });
  }
  void GatherRows(const Tensor& x, Tensor out) override { Timed("GatherRows", [&] { inner_->GatherRows(x, out); }); }
  bool FusesLayerOps(int64_t num_tokens) const override { return inner_->FusesLayerOps(num_tokens); }
  void RmsNormQkvRopeStoreKv(const Tensor& x, const Tensor& norm, float eps, Tensor x_normed, const Tensor& w_qkv,
                             const Tensor* bias, Tensor qkv, const AttentionShape& shape, const Tensor* q_norm,
                             const Tensor* k_norm, const Tensor& rope, KvCacheLayer cache) override {
    Timed("RmsNormQkvRopeStoreKv", [&] {
      inner_->RmsNormQkvRopeStoreKv(x, norm, eps, x_normed, w_qkv, bias, qkv, shape, q_norm, k_norm, rope, cache);
    });
  }
  void RmsNormLinearSiluMul(const Tensor& x, const Tensor& norm, float eps, Tensor x_normed, const Tensor& w,
                            Tensor gate_up, Tensor out) override {
    Timed("RmsNormLinearSiluMul", [&] { inner_->RmsNormLinearSiluMul(x, norm, eps, x_normed, w, gate_up, out); });
  }
  void LinearAddResidual(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor y, Tensor residual) override {
    Timed(absl::StrCat("LinearAddResidual ", x.row_width(), " -> ", w.dim(0)),
          [&] { inner_->LinearAddResidual(x, w, bias, y, residual); });
  }

 private:
  template <typename Fn>
  void Timed(std::string op, Fn&& fn) {
    if (!timing_) {
      fn();
      return;
    }
    Span s{std::move(op), nullptr, nullptr};
    CUDA_CHECK(cudaEventCreate(&s.begin));
    CUDA_CHECK(cudaEventCreate(&s.end));
    const auto stream = static_cast<cudaStream_t>(inner_->stream());
    CUDA_CHECK(cudaEventRecord(s.begin, stream));
    fn();
    CUDA_CHECK(cudaEventRecord(s.end, stream));
    spans_.push_back(std::move(s));
  }

  std::unique_ptr<Backend> inner_;
  bool timing_ = false;
  std::vector<Span> spans_;
};

// Holds a stream at a host function until Open (or, as a guard against a
// hang, 10 s).
struct StreamGate {
  std::atomic<bool> open{false};
  static void Wait(void* self) {
    auto* gate = static_cast<StreamGate*>(self);
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!gate->open.load() && std::chrono::steady_clock::now() < until) std::this_thread::yield();
  }
};

}  // namespace

bool ProfileSection(const Sizes& z, const std::filesystem::path& dir, const std::string& name, std::ostream& table) {
  auto timed = std::make_unique<TimedBackend>(MakeCudaBackend(0, cuda::KernelSet::kFast));
  TimedBackend& backend = *timed;
  std::unique_ptr<Communicator> solo = MakeSoloCommunicator();
  const int32_t context = z.decode_prompt;
  ModelOptions options;
  options.max_num_tokens = 8;
  options.max_num_seqs = 1;
  options.max_position = 2 * context;
  absl::StatusOr<std::unique_ptr<Model>> loaded = Model::Load(dir, backend, *solo, options);
  if (!loaded.ok()) {
    table << "\nprofile: " << loaded.status().ToString() << "\n";
    return false;
  }
  Model& m = **loaded;
  const int64_t blocks = (2 * context + kBlockSize - 1) / kBlockSize;
  absl::StatusOr<KvCache> cache = KvCache::Allocate(backend, m.kv_cache_shape(blocks, kBlockSize));
  if (!cache.ok()) {
    table << "\nprofile: " << cache.status().ToString() << "\n";
    return false;
  }
  StepCapacity capacity;  // as the engine reserves
  capacity.max_tokens = options.max_num_tokens;
  capacity.max_seqs = options.max_num_seqs;
  capacity.max_context = m.max_position();
  capacity.block_size = kBlockSize;
  capacity.max_query_heads = m.attention_shape().num_heads;
  capacity.max_head_dim = m.attention_shape().head_dim;
  if (absl::Status st = backend.Reserve(capacity); !st.ok()) {
    table << "\nprofile: " << st.ToString() << "\n";
    return false;
  }
  StepBatch step;  // batch 1 at `context` keys, padded to the table width a graph uses
  if (absl::Status st = step.AssignPaddedDecode(BenchStep(1, 1, context).view(), 1, capacity.max_blocks_per_seq(),
                                                kBlockSize);
      !st.ok()) {
    table << "\nprofile: " << st.ToString() << "\n";
    return false;
  }
  const auto stream = static_cast<cudaStream_t>(backend.stream());
  const auto run_step = [&]() -> absl::Status {
    if (absl::Status st = m.BeginStep(step.view(), *cache); !st.ok()) return st;
    return m.Enqueue();
  };
  for (int i = 0; i < std::max(z.warmup, 1); ++i) {
    if (absl::Status st = run_step(); !st.ok()) {
      table << "\nprofile: " << st.ToString() << "\n";
      return false;
    }
  }
  backend.Synchronize();

  // The eager step, op by op, queued whole behind the gate.
  StreamGate gate;
  if (!z.smoke) CUDA_CHECK(cudaLaunchHostFunc(stream, &StreamGate::Wait, &gate));
  backend.set_timing(true);
  const absl::Status st = run_step();
  backend.set_timing(false);
  gate.open = true;
  backend.Synchronize();
  if (!st.ok()) {
    table << "\nprofile: " << st.ToString() << "\n";
    return false;
  }
  struct OpTotal {
    int calls = 0;
    double us = 0;
  };
  std::map<std::string, OpTotal> ops;
  std::vector<std::string> order;  // first call order
  double step_us = 0;
  const std::vector<TimedBackend::Span>& spans = backend.spans();
  for (const TimedBackend::Span& s : spans) {
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, s.begin, s.end));
    if (ops.find(s.op) == ops.end()) order.push_back(s.op);
    OpTotal& t = ops[s.op];
    ++t.calls;
    t.us += 1e3 * ms;
  }
  if (!spans.empty()) {
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, spans.front().begin, spans.back().end));
    step_us = 1e3 * ms;
  }

  // The same step as a graph, replayed.
  double graph_us = 0;
  if (absl::Status s2 = m.BeginStep(step.view(), *cache); !s2.ok()) {
    table << "\nprofile: " << s2.ToString() << "\n";
    return false;
  }
  if (absl::Status s2 = backend.BeginCapture(); !s2.ok()) {
    table << "\nprofile: " << s2.ToString() << "\n";
    return false;
  }
  const absl::Status enqueued = m.Enqueue();
  absl::StatusOr<std::unique_ptr<BackendGraph>> graph = backend.EndCapture();
  if (!enqueued.ok() || !graph.ok()) {
    table << "\nprofile: capture failed: " << (enqueued.ok() ? graph.status() : enqueued).ToString() << "\n";
    return false;
  }
  graph_us = 1e6 * TimeIt([&] { (*graph)->Replay(); }, z.warmup, z.smoke ? 1 : 200);

  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  table << "\n## Batch-1 decode step op by op (" << name << ", context " << context << ", " << prop.name
        << ")\n\nOne eager Model step on the fast set, each Backend op between two CUDA events, the step queued whole"
        << " behind a host function so the GPU runs the ops back to back" << (z.smoke ? " (not under --smoke)" : "")
        << "; then the same step captured as a CUDA graph and replayed. Ops: " << spans.size()
        << " (each one kernel launch; fused layers: " << (backend.FusesLayerOps(1) ? "on" : "off")
        << ").\n\n| op | calls | total us | us per call | share of the step |\n|---|---|---|---|---|\n";
  for (const std::string& op : order) {
    const OpTotal& t = ops[op];
    char line[256];
    std::snprintf(line, sizeof line, "| %s | %d | %.1f | %.2f | %.0f%% |\n", op.c_str(), t.calls, t.us,
                  t.us / t.calls, step_us > 0 ? 100 * t.us / step_us : 0.0);
    table << line;
  }
  char line[256];
  std::snprintf(line, sizeof line,
                "| **step, eager (first event to last)** | | %.1f | | |\n| **step, graph replay (mean)** | | %.1f | |"
                " |\n",
                step_us, graph_us);
  table << line;
  backend.Clear();
  return true;
}

}  // namespace tpserve::gpu_bench
