#include "cuda/cuda_sampler.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "base/check.h"
#include "base/status_macros.h"
#include "cuda/check.h"
#include "cuda/cuda_graph.h"
#include "cuda/device_info.h"
#include "cuda/sampling.cuh"
#include "cuda/sampling_sliced.cuh"
#include "cuda/sampling_inputs.h"
#include "cuda/token_mask.cuh"
#include "sampling/token_mask.h"

namespace tpserve::cuda {
namespace {

[[noreturn]] void Misuse(const std::string& what) { TPSERVE_FATAL("CudaSampler::Sample: ", what); }

// `count` T on the device and their pinned host mirror; the first error
// (the host array is not allocated when the device one failed).
template <typename T>
cudaError_t AllocMirrored(T** device, T** host, int64_t count) {
  const size_t bytes = sizeof(T) * static_cast<size_t>(count);
  const cudaError_t err = cudaMalloc(reinterpret_cast<void**>(device), bytes);
  return err != cudaSuccess ? err : cudaMallocHost(reinterpret_cast<void**>(host), bytes);
}

// The launch would fail (too much shared memory) if the row's bitmask did not
// fit what the device gives the kernel: say so at start-up, not at a step.
absl::Status CheckSharedMemoryFits(int64_t vocab_size) {
  size_t limit = 0;
  if (const cudaError_t e = SampleRowsMaxDynamicShared(&limit); e != cudaSuccess) {
    cudaGetLastError();
    return absl::InternalError(absl::StrCat("CudaSampler: cudaFuncGetAttributes(SampleRowsKernel) failed: ",
                                            cudaGetErrorString(e)));
  }
  const size_t need = SampleRowsSharedBytes(vocab_size);
  if (need > limit) {
    return absl::InvalidArgumentError(absl::StrCat(
        "CudaSampler: vocab_size = ", vocab_size, " needs ", need,
        " bytes of shared memory per row for its penalty bitmask, but the sampling kernel may use only ",
        limit, " on this device; this vocabulary cannot be sampled on the GPU"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<CudaSampler>> CudaSampler::Create(const Options& options,
                                                                 cudaStream_t stream) {
  if (options.max_seqs < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "CudaSampler: max_seqs = ", options.max_seqs, " must be at least 1"));
  }
  if (options.vocab_size < 1 || options.vocab_size > kMaxSampleVocab) {
    return absl::InvalidArgumentError(absl::StrCat(
        "CudaSampler: vocab_size = ", options.vocab_size, " must be in [1, ", kMaxSampleVocab,
        "] (the per-row penalty bitmask lives in shared memory: 48 KiB a block, less the kernel's own "
        "arrays; cuda/sampling.cuh)"));
  }
  if (options.max_logprobs < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "CudaSampler: max_logprobs = ", options.max_logprobs, " must be >= 0"));
  }
  if (options.penalty_entries < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "CudaSampler: penalty_entries = ", options.penalty_entries, " must be >= 0 (0: default)"));
  }
  if (absl::Status fits = CheckSharedMemoryFits(options.vocab_size); !fits.ok()) return fits;
  Options resolved = options;
  if (resolved.sm_count <= 0) {
    int device = 0;
    if (const cudaError_t e = cudaGetDevice(&device); e != cudaSuccess) {
      cudaGetLastError();
      return absl::UnavailableError(absl::StrCat("CudaSampler: cudaGetDevice failed: ", cudaGetErrorString(e)));
    }
    TPSERVE_ASSIGN_OR_RETURN(const DeviceInfo info, QueryDevice(device));
    resolved.sm_count = info.multiprocessors;
  }
  std::unique_ptr<CudaSampler> sampler(new CudaSampler(resolved, stream));
  if (absl::Status status = sampler->Allocate(); !status.ok()) return status;
  return sampler;
}

absl::Status CudaSampler::Allocate() {
  const int64_t rows = options_.max_seqs;
  top_stride_ = std::max(options_.max_logprobs, 1);
  entry_capacity_ = options_.penalty_entries > 0 ? options_.penalty_entries : rows * 1024;
  cudaError_t err = cudaSuccess;
  auto step = [&](cudaError_t e) {
    if (err == cudaSuccess) err = e;
  };
  row_index_offset_ = 16;
  params_offset_ = (row_index_offset_ + sizeof(int32_t) * static_cast<size_t>(rows) + 15) / 16 * 16;
  static_assert(alignof(sampling::RowParams) <= 16);
  step(AllocMirrored(&d_upload_, &h_upload_, static_cast<int64_t>(ParamsEnd(rows))));
  if (err == cudaSuccess) {
    d_live_rows_ = reinterpret_cast<int32_t*>(d_upload_);
    h_live_rows_ = reinterpret_cast<int32_t*>(h_upload_);
    d_row_index_ = reinterpret_cast<int32_t*>(d_upload_ + row_index_offset_);
    h_row_index_ = reinterpret_cast<int32_t*>(h_upload_ + row_index_offset_);
    d_params_ = reinterpret_cast<sampling::RowParams*>(d_upload_ + params_offset_);
    h_params_ = reinterpret_cast<sampling::RowParams*>(h_upload_ + params_offset_);
  }
  step(AllocMirrored(&d_offsets_, &h_offsets_, rows + 1));
  step(AllocMirrored(&d_entries_, &h_entries_, entry_capacity_));
  step(AllocMirrored(&d_top_, &h_top_, rows * top_stride_));
  step(AllocMirrored(&d_results_, &h_results_, rows));
  // The sliced path takes the calls whose plan gives every row at least two slices.
  if (options_.kernels == KernelSet::kFast && options_.vocab_size <= kMaxSlicedVocab) {
    const int32_t vocab = static_cast<int32_t>(options_.vocab_size);
    for (int64_t r = 1; r <= rows && PlanSlices(r, vocab, options_.sm_count).slices >= 2; ++r) {
      sliced_rows_cap_ = r;
      sliced_workspace_bytes_ = std::max(
          sliced_workspace_bytes_, SlicedSampleWorkspaceBytes(r, PlanSlices(r, vocab, options_.sm_count).slices));
    }
    if (sliced_rows_cap_ > 0) {
      step(cudaMalloc(&d_sliced_workspace_, sliced_workspace_bytes_));
      // The last stage's per-row arrival counters start at zero, once: every
      // call (eager or a graph replay) leaves them zero (SlicedSampleArgs::workspace).
      // On stream_, so every launch there comes after it.
      if (err == cudaSuccess) {
        step(cudaMemsetAsync(d_sliced_workspace_, 0, SlicedSampleCounterBytes(sliced_rows_cap_), stream_));
      }
    }
  }
  if (err != cudaSuccess) {
    (void)cudaGetLastError();  // an allocation error is not sticky: clear it for later calls
    return absl::ResourceExhaustedError(absl::StrCat(
        "CudaSampler: allocating buffers for ", rows, " rows and ", entry_capacity_,
        " penalty entries failed (", cudaGetErrorString(err),
        "); lower max_num_seqs or gpu_memory_utilization"));
  }
  return absl::OkStatus();
}

CudaSampler::~CudaSampler() {
  // Frees whatever was allocated; errors here cannot be acted on.
  batch_graphs_.clear();  // the graphs reference the buffers below
  cudaFree(d_upload_);
  cudaFreeHost(h_upload_);
  cudaFree(d_offsets_);
  cudaFree(d_entries_);
  cudaFree(d_top_);
  cudaFree(d_results_);
  cudaFree(d_sliced_workspace_);
  cudaFreeHost(h_offsets_);
  cudaFreeHost(h_entries_);
  cudaFreeHost(h_top_);
  cudaFreeHost(h_results_);
  cudaFree(d_mask_rows_);
  cudaFree(d_mask_words_);
}

void CudaSampler::ReservePenaltyEntries(int64_t count) {
  if (count <= entry_capacity_) return;
  const int64_t capacity = std::max(count, entry_capacity_ * 2);
  // The previous Sample synchronised the stream: nothing still reads the old buffers.
  CUDA_CHECK(cudaFree(d_entries_));
  CUDA_CHECK(cudaFreeHost(h_entries_));
  d_entries_ = nullptr;
  h_entries_ = nullptr;
  CUDA_CHECK(AllocMirrored(&d_entries_, &h_entries_, capacity));
  entry_capacity_ = capacity;
}

void CudaSampler::CheckSampleArgs(const Tensor& gathered, int64_t vocab_size, size_t num_seqs,
                                  int64_t rows) const {
  if (rows > options_.max_seqs) {
    Misuse(absl::StrCat(rows, " rows exceed max_seqs = ", options_.max_seqs,
                        "; create the sampler with the scheduler's max_num_seqs"));
  }
  if (gathered.device != Device::kCuda || gathered.ndim != 3 ||
      (gathered.dtype != DType::kBF16 && gathered.dtype != DType::kF32)) {
    Misuse(absl::StrCat("gathered must be a [tp, S, Vs] bf16 or f32 CUDA tensor, got ",
                        gathered.ShapeString(), " ", std::string(DTypeName(gathered.dtype))));
  }
  const int64_t tp = gathered.dim(0), shard_vocab = gathered.dim(2);
  if (gathered.dim(1) < static_cast<int64_t>(num_seqs) || vocab_size < 1 || vocab_size > options_.vocab_size ||
      vocab_size > tp * shard_vocab) {
    Misuse(absl::StrCat("gathered ", gathered.ShapeString(), " does not hold ", num_seqs,
                        " rows of vocab_size ", vocab_size, " (the sampler holds up to ",
                        options_.vocab_size, ")"));
  }
}

int64_t CudaSampler::StageRows(std::span<SequenceSamplingState* const> seqs,
                               const std::vector<int64_t>& picked, int64_t vocab_size) {
  const int64_t rows = static_cast<int64_t>(picked.size());
  staging_.clear();
  for (int64_t s = 0; s < rows; ++s) {
    SequenceSamplingState& seq = *seqs[static_cast<size_t>(picked[static_cast<size_t>(s)])];
    h_row_index_[s] = static_cast<int32_t>(picked[static_cast<size_t>(s)]);
    if (seq.params().logprobs > options_.max_logprobs) {
      Misuse(absl::StrCat("a request asks for ", seq.params().logprobs,
                          " log-probs, more than max_logprobs = ", options_.max_logprobs,
                          "; the coordinator's max_logprobs must not exceed the sampler's"));
    }
    h_offsets_[s] = static_cast<int32_t>(staging_.size());
    const sampling::RowEntries entries =
        sampling::AppendRowEntries(seq, static_cast<int32_t>(vocab_size), staging_);
    h_params_[s] = sampling::MakeRowParams(seq.params(), seq.NextUniform());
    h_params_[s].allowed_only = entries.allowed_only ? 1 : 0;
  }
  const int64_t num_entries = static_cast<int64_t>(staging_.size());
  h_offsets_[rows] = static_cast<int32_t>(num_entries);
  ReservePenaltyEntries(num_entries);
  if (num_entries > 0) {
    std::memcpy(h_entries_, staging_.data(), sizeof(sampling::PenaltyEntry) * num_entries);
  }
  return num_entries;
}

void CudaSampler::UploadSliced(int64_t rows) {
  CUDA_CHECK(cudaMemcpyAsync(d_upload_ + row_index_offset_, h_upload_ + row_index_offset_,
                             ParamsEnd(rows) - row_index_offset_, cudaMemcpyHostToDevice, stream_));
}

void CudaSampler::Upload(int64_t rows, int64_t num_entries) {
  UploadSliced(rows);
  CUDA_CHECK(cudaMemcpyAsync(d_offsets_, h_offsets_, sizeof(int32_t) * (rows + 1),
                             cudaMemcpyHostToDevice, stream_));
  if (num_entries > 0) {
    CUDA_CHECK(cudaMemcpyAsync(d_entries_, h_entries_, sizeof(sampling::PenaltyEntry) * num_entries,
                               cudaMemcpyHostToDevice, stream_));
  }
}

void CudaSampler::LaunchRows(const Tensor& gathered, int64_t vocab_size, int64_t rows) {
  SampleRowsArgs args;
  args.gathered = gathered.data;
  args.bf16 = gathered.dtype == DType::kBF16;
  args.tp = static_cast<int32_t>(gathered.dim(0));
  args.rows = static_cast<int32_t>(rows);
  args.layout_rows = static_cast<int32_t>(gathered.dim(1));
  args.row_index = d_row_index_;
  args.shard_vocab = static_cast<int32_t>(gathered.dim(2));
  args.vocab = static_cast<int32_t>(vocab_size);
  args.params = d_params_;
  args.entry_offsets = d_offsets_;
  args.entries = d_entries_;
  args.top_stride = top_stride_;
  args.top = d_top_;
  args.results = d_results_;
  CUDA_CHECK(LaunchSampleRows(args, stream_));
  TPSERVE_SYNC_CHECK();
}

bool CudaSampler::StagedRowsCovered(int64_t rows) const {
  for (int64_t s = 0; s < rows; ++s) {
    if (!SlicedSamplerCovers(h_params_[s], 0)) return false;
  }
  return true;
}

bool CudaSampler::UseSliced(int64_t vocab_size, int64_t rows, int64_t num_entries) const {
  if (rows > sliced_rows_cap_ || num_entries > 0 || vocab_size > kMaxSlicedVocab || !StagedRowsCovered(rows)) {
    return false;
  }
  return PlanSlices(rows, static_cast<int32_t>(vocab_size), options_.sm_count).slices >= 2;
}

SlicedSampleArgs CudaSampler::SlicedArgs(const Tensor& gathered, int64_t vocab_size, int64_t rows) const {
  SlicedSampleArgs args;
  args.gathered = gathered.data;
  args.bf16 = gathered.dtype == DType::kBF16;
  args.rows = static_cast<int32_t>(rows);
  args.layout_rows = static_cast<int32_t>(gathered.dim(1));
  args.row_index = d_row_index_;
  args.shard_vocab = static_cast<int32_t>(gathered.dim(2));
  args.vocab = static_cast<int32_t>(vocab_size);
  args.params = d_params_;
  args.plan = PlanSlices(rows, args.vocab, options_.sm_count);
  args.workspace = d_sliced_workspace_;
  args.workspace_bytes = sliced_workspace_bytes_;
  args.results = d_results_;
  return args;
}

void CudaSampler::LaunchSliced(const Tensor& gathered, int64_t vocab_size, int64_t rows) {
  SlicedSampleArgs args = SlicedArgs(gathered, vocab_size, rows);
  args.stages = PlanSliceStages(h_params_, rows, args.vocab);
  CUDA_CHECK(LaunchSlicedSample(args, stream_));
  TPSERVE_SYNC_CHECK();
  ++sliced_calls_;
}

void CudaSampler::Download(int64_t rows, bool any_top) {
  CUDA_CHECK(cudaMemcpyAsync(h_results_, d_results_, sizeof(sampling::RowResult) * rows,
                             cudaMemcpyDeviceToHost, stream_));
  if (any_top) {
    CUDA_CHECK(cudaMemcpyAsync(h_top_, d_top_, sizeof(sampling::TopLogprob) * rows * top_stride_,
                               cudaMemcpyDeviceToHost, stream_));
  }
}

absl::Status CudaSampler::PrepareBatch(const Tensor& gathered, int64_t vocab_size) {
  const int64_t rows = gathered.ndim == 3 ? gathered.dim(1) : 0;
  if (!options_.batch_graphs || rows < 1 || rows > sliced_rows_cap_ || vocab_size > kMaxSlicedVocab ||
      PlanSlices(rows, static_cast<int32_t>(vocab_size), options_.sm_count).slices < 2) {
    return absl::OkStatus();  // the eager path samples this layout
  }
  CheckSampleArgs(gathered, vocab_size, static_cast<size_t>(rows), rows);
  for (const BatchGraphs& batch : batch_graphs_) {  // a recapture of the decode graphs (e.g. a larger cache)
    if (batch.Holds(gathered, vocab_size)) return absl::OkStatus();
  }
  // Once eagerly with no live row (every block returns at once): the kernels
  // are loaded outside the capture.
  *h_live_rows_ = 0;
  CUDA_CHECK(cudaMemcpyAsync(d_live_rows_, h_live_rows_, sizeof(int32_t), cudaMemcpyHostToDevice, stream_));
  SlicedSampleArgs warm = SlicedArgs(gathered, vocab_size, rows);
  warm.stages = SliceStagesOf(kSliceStageSets - 1);
  warm.live_rows = d_live_rows_;
  CUDA_CHECK(LaunchSlicedSample(warm, stream_));
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  BatchGraphs batch;
  batch.data = gathered.data;
  batch.dtype = gathered.dtype;
  for (int d = 0; d < 3; ++d) batch.dims[d] = gathered.dim(d);
  batch.vocab_size = vocab_size;
  for (int32_t set = 0; set < kSliceStageSets; ++set) {
    TPSERVE_ASSIGN_OR_RETURN(batch.graphs[set], CaptureSliced(gathered, vocab_size, SliceStagesOf(set)));
  }
  batch_graphs_.push_back(std::move(batch));
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<BackendGraph>> CudaSampler::CaptureSliced(const Tensor& gathered,
                                                                       int64_t vocab_size,
                                                                       const SliceStages& stages) {
  const int64_t rows = gathered.dim(1);
  TPSERVE_RETURN_IF_ERROR(BeginStreamCapture(stream_));
  // One copy node: the live-row count, every row index and B rows' params.
  CUDA_CHECK(cudaMemcpyAsync(d_upload_, h_upload_, ParamsEnd(rows), cudaMemcpyHostToDevice, stream_));
  SlicedSampleArgs args = SlicedArgs(gathered, vocab_size, rows);
  args.stages = stages;
  args.live_rows = d_live_rows_;
  const cudaError_t launched = LaunchSlicedSample(args, stream_);
  Download(rows, /*any_top=*/false);
  absl::StatusOr<std::unique_ptr<BackendGraph>> graph = EndStreamCapture(stream_);
  if (launched != cudaSuccess) {
    return absl::InternalError(absl::StrCat("CudaSampler: capturing the sliced sampler for ", rows,
                                            " rows failed: ", cudaGetErrorString(launched)));
  }
  return graph;
}

BackendGraph* CudaSampler::GraphFor(const Tensor& gathered, int64_t vocab_size, int64_t rows,
                                    int64_t num_entries) const {
  if (batch_graphs_.empty() || num_entries > 0) return nullptr;
  for (const BatchGraphs& batch : batch_graphs_) {
    if (!batch.Holds(gathered, vocab_size)) continue;
    if (!StagedRowsCovered(rows)) return nullptr;
    return batch.graphs[PlanSliceStageSet(h_params_, rows, static_cast<int32_t>(vocab_size))].get();
  }
  return nullptr;
}

std::vector<SampledToken> CudaSampler::Sample(const Tensor& gathered, int64_t vocab_size,
                                              std::span<SequenceSamplingState* const> seqs) {
  // The rows to sample: k-th sampled row = gathered row picked[k].
  std::vector<int64_t> picked;
  for (size_t i = 0; i < seqs.size(); ++i) {
    if (seqs[i] != nullptr) picked.push_back(static_cast<int64_t>(i));
  }
  std::vector<SampledToken> result(seqs.size());  // token -1 where not sampled
  const int64_t rows = static_cast<int64_t>(picked.size());
  if (rows == 0) return result;
  CheckSampleArgs(gathered, vocab_size, seqs.size(), rows);

  // Rows: parameters, this token's uniform, penalty entries.
  const int64_t num_entries = StageRows(seqs, picked, vocab_size);
  if (BackendGraph* graph = GraphFor(gathered, vocab_size, rows, num_entries)) {
    *h_live_rows_ = static_cast<int32_t>(rows);  // read by the graph's copy when it runs
    graph->Replay();
    ++graph_calls_;
    ++sliced_calls_;
  } else {
    Upload(rows, num_entries);
    if (UseSliced(vocab_size, rows, num_entries)) {
      LaunchSliced(gathered, vocab_size, rows);
    } else {
      LaunchRows(gathered, vocab_size, rows);
    }
    const bool any_top = std::any_of(seqs.begin(), seqs.end(), [](const SequenceSamplingState* q) {
      return q != nullptr && q->params().logprobs > 0;
    });
    Download(rows, any_top);
  }
  CUDA_CHECK(cudaStreamSynchronize(stream_));

  for (int64_t s = 0; s < rows; ++s) {
    const size_t i = static_cast<size_t>(picked[static_cast<size_t>(s)]);
    const sampling::RowResult& r = h_results_[s];
    SampledToken& out = result[i];
    out.token = r.token;
    if (seqs[i]->params().logprobs >= 0) {
      out.logprob = r.logprob;
      const sampling::TopLogprob* top = h_top_ + s * top_stride_;
      for (int32_t k = 0; k < r.num_top; ++k) out.top.emplace_back(top[k].token, top[k].logprob);
    }
    seqs[i]->AppendOutput(out.token);
  }
  return result;
}

absl::Status CudaSampler::MaskRows(const Tensor& gathered, int64_t vocab_size, std::span<const int32_t> rows,
                                   std::span<const uint32_t> words) {
  if (rows.empty()) return absl::OkStatus();
  const int64_t per_row = TokenMaskWords(vocab_size);
  TPSERVE_CHECK(gathered.ndim == 3 && (gathered.dtype == DType::kBF16 || gathered.dtype == DType::kF32) &&
                    vocab_size <= gathered.dim(0) * gathered.dim(2) &&
                    std::ssize(words) == std::ssize(rows) * per_row,
                "CudaSampler::MaskRows: ", std::ssize(rows), " rows and ", words.size(), " mask words for V = ",
                vocab_size, " on logits of ", gathered.ndim, " dims");
  for (int32_t r : rows) TPSERVE_CHECK(r >= 0 && r < gathered.dim(1), "CudaSampler::MaskRows: row ", r);
  auto fail = [](cudaError_t e) {
    return absl::InternalError(absl::StrCat("CudaSampler::MaskRows: ", cudaGetErrorString(e)));
  };
  if (std::ssize(rows) > mask_rows_capacity_ || std::ssize(words) > mask_words_capacity_) {
    if (cudaError_t e = cudaStreamSynchronize(stream_); e != cudaSuccess) return fail(e);  // the old ones may be in use
    cudaFree(d_mask_rows_);
    cudaFree(d_mask_words_);
    d_mask_rows_ = nullptr, d_mask_words_ = nullptr;
    mask_rows_capacity_ = mask_words_capacity_ = 0;
    const int64_t capacity = std::max<int64_t>(std::ssize(rows), options_.max_seqs);
    if (cudaError_t e = cudaMalloc(reinterpret_cast<void**>(&d_mask_rows_), sizeof(int32_t) * capacity);
        e != cudaSuccess) {
      return fail(e);
    }
    if (cudaError_t e = cudaMalloc(reinterpret_cast<void**>(&d_mask_words_), sizeof(uint32_t) * capacity * per_row);
        e != cudaSuccess) {
      return fail(e);
    }
    mask_rows_capacity_ = capacity, mask_words_capacity_ = capacity * per_row;
  }
  // Pageable sources: the runtime has copied them when the call returns.
  if (cudaError_t e = cudaMemcpyAsync(d_mask_rows_, rows.data(), rows.size_bytes(), cudaMemcpyHostToDevice, stream_);
      e != cudaSuccess) {
    return fail(e);
  }
  if (cudaError_t e = cudaMemcpyAsync(d_mask_words_, words.data(), words.size_bytes(), cudaMemcpyHostToDevice, stream_);
      e != cudaSuccess) {
    return fail(e);
  }
  const MaskRowsArgs args{.gathered = gathered.data, .bf16 = gathered.dtype == DType::kBF16,
                          .layout_rows = static_cast<int32_t>(gathered.dim(1)),
                          .shard_vocab = static_cast<int32_t>(gathered.dim(2)),
                          .vocab = static_cast<int32_t>(vocab_size), .rows = static_cast<int32_t>(rows.size()),
                          .row_index = d_mask_rows_, .words = d_mask_words_,
                          .words_per_row = static_cast<int32_t>(per_row)};
  if (cudaError_t e = LaunchMaskRows(args, stream_); e != cudaSuccess) return fail(e);
  return absl::OkStatus();
}

}  // namespace tpserve::cuda
