// DeviceSampler on the GPU: uploads each row's parameters, uniform and penalty
// entries, runs cuda/sampling.cuh's kernel on the gathered logits and reads
// back the tokens and log-probs.
//
// Randomness stays on the host: every sequence keeps its std::mt19937_64
// (SequenceSamplingState, seeded per request) and the host draws that
// sequence's one uniform per step and passes it to the kernel. So a seeded
// request samples the same tokens on the CPU and on the GPU, wherever its row is
// and whatever else is in the batch.
//
// Buffers (device and pinned host) are allocated once at construction for
// max_seqs rows, the vocabulary and max_logprobs; the penalty entries (one per
// distinct token a penalised sequence has seen) start at a capacity and grow,
// rarely, when a step needs more.
//
// Two kernels (Options::kernels): under the fast set, a call of at most
// SlicedRowsCap() rows, none with penalty entries or log-probs, runs the
// sliced sampler (cuda/sampling_sliced.cuh: several blocks per row, planned
// by cuda/sample_slices.h over the device's SMs); every other call, and every
// call under the reference set, runs the one-block-per-row kernel
// (cuda/sampling.cuh). Both give the host sampler's tokens (within rounding
// of a CDF boundary). Sample synchronises its stream once (it returns host
// tokens), so it is never called inside a capture.
//
// Decode-batch graphs (PrepareBatch). For each decode bucket B <=
// SlicedRowsCap() the sampler captures, on its stream, the sliced path over
// that bucket's fixed device logits as CUDA graphs: one H2D copy of the
// pinned upload block (live-row count, row index, params), the stages, and
// one D2H copy of the results into pinned memory (kernels + 2 nodes). A
// Sample call on those logits whose rows the sliced path covers (no penalty
// entries, no log-probs) then stages each row's RowParams (with its
// host-drawn uniform) into the pinned block, launches the graph (its captured
// copy reads the block at replay time), synchronises once and reads the
// tokens: no eager launch, one sync. Any other call on those logits
// (penalties, log-probs) runs the eager path below, the same code as always.
// Rows past the step's count are the bucket's padding: their blocks exit at
// once (SlicedSampleArgs::live_rows), and their result slots, copied back
// with the rest, are never read.
//
// Why a graph of its own, launched right after the forward's graph on the
// same stream, and not a tail of each bucket's decode graph: (1) the
// sampling states of sequences new in a step exist only once the step runner
// commits the plan, after the forward is enqueued, so the host stages the
// rows while the GPU runs the forward instead of before it; (2) a step that
// needs the row kernel keeps the forward graph and runs the eager sampler
// after it, with no second forward graph per bucket and nothing in
// DecodeGraphs that knows how sampling works; (3) the forward graphs stay
// the same on every tensor-parallel rank (only rank 0 samples). The cost is
// one more cudaGraphLaunch per step.
//
// Stage list: a captured list cannot depend on the rows' parameters. Each
// bucket has one graph per stage set (kSliceStageSets = 8: top-k's passes,
// top-p's, mass, each in or out; sampling_sliced.cuh), and a step replays the
// one PlanSliceStageSet picks for its rows: exactly the kernels an eager call
// runs (greedy 1, temperature only 2, temperature + top-p 4, top-k + top-p 7;
// the last stage's last block of each row draws), while inside a launch each
// stage still decides per row on the device (mixed rows). One graph of every
// stage (8 kernels; its stages decide per row as well) would cost a
// temperature + top-p step 4 launches of blocks that skip their work; 8 small
// graphs per bucket cost only capture time at warm-up. The sliced workspace's
// arrival counters are zeroed once, when it is allocated; every call and
// replay leaves them zero.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include <cuda_runtime_api.h>

#include "absl/status/statusor.h"
#include "backend/backend.h"
#include "cuda/kernel_set.h"
#include "cuda/sample_slices.h"
#include "cuda/sampling_sliced.cuh"
#include "sampling/sampling_row.h"
#include "sampling/device_sampler.h"

namespace tpserve::cuda {

class CudaSampler final : public DeviceSampler {
 public:
  struct Options {
    int32_t max_seqs = 256;     // rows per Sample call
    int64_t vocab_size = 0;     // V; every call's vocab_size is at most this
    int32_t max_logprobs = 20;  // the largest top-n a request may ask for (coordinator limit)
    int64_t penalty_entries = 0;  // initial capacity for a step; 0: max_seqs · 1024
    KernelSet kernels = KernelSet::kFast;  // kReference: always the row kernel
    int sm_count = 0;  // SMs the sliced path plans for; 0: the current device's
    bool batch_graphs = true;  // false: PrepareBatch captures nothing (eager after the forward; benchmarks)
  };

  // INVALID_ARGUMENT for options out of range, RESOURCE_EXHAUSTED when the
  // buffers do not fit. `stream` (the backend's stream()) must outlive this.
  static absl::StatusOr<std::unique_ptr<CudaSampler>> Create(const Options& options,
                                                             cudaStream_t stream);
  ~CudaSampler() override;
  CudaSampler(const CudaSampler&) = delete;
  CudaSampler& operator=(const CudaSampler&) = delete;

  // See DeviceSampler::Sample. gathered: [tp, S, Vs] bf16 or f32 on the device
  // of this sampler; seqs.size() <= S, at most max_seqs of them sampled,
  // vocab_size <= Options::vocab_size, every request's logprobs <= max_logprobs.
  std::vector<SampledToken> Sample(const Tensor& gathered, int64_t vocab_size,
                                   std::span<SequenceSamplingState* const> seqs) override;

  // See DeviceSampler::PrepareBatch: captures the decode-batch graphs for
  // logits laid out as `gathered` ([tp, B, Vs] on this sampler's device).
  // Nothing to capture (OK) when B > SlicedRowsCap(); INTERNAL when the runtime
  // refuses the capture (no graph is kept for that layout: eager as before).
  // Misuse (fatal) for a gathered/vocab_size that Sample would not take.
  absl::Status PrepareBatch(const Tensor& gathered, int64_t vocab_size) override;

  // See DeviceSampler::MaskRows: the masks to the device (from host memory,
  // on the stream) and one kernel (cuda/token_mask.cuh) over the masked rows
  // of `gathered`, in place. Grows its buffers (synchronously) when a call
  // has more rows than before. INTERNAL for a CUDA error.
  absl::Status MaskRows(const Tensor& gathered, int64_t vocab_size, std::span<const int32_t> rows,
                        std::span<const uint32_t> words) override;

  // The most rows a call may have to run the sliced path (0 under the reference set).
  int64_t SlicedRowsCap() const { return sliced_rows_cap_; }
  // Calls that ran the sliced path so far, eagerly or as a graph (for tests and benchmarks).
  int64_t sliced_calls() const { return sliced_calls_; }
  // Calls that ran as a decode-batch graph so far.
  int64_t graph_calls() const { return graph_calls_; }
  // Layouts PrepareBatch captured graphs for.
  int64_t prepared_batches() const { return static_cast<int64_t>(batch_graphs_.size()); }

 private:
  CudaSampler(const Options& options, cudaStream_t stream) : options_(options), stream_(stream) {}
  absl::Status Allocate();
  // Makes room for `count` penalty entries (device and pinned), synchronously.
  void ReservePenaltyEntries(int64_t count);

  // The steps of Sample, in order. Misuse (fatal) unless `rows` sampled rows of
  // the `num_seqs` in `gathered` fit this sampler.
  void CheckSampleArgs(const Tensor& gathered, int64_t vocab_size, size_t num_seqs, int64_t rows) const;
  // Fills the pinned mirrors for seqs[picked[k]] (row k), drawing each row's
  // uniform; returns the number of entries (penalties and token-level controls,
  // sampling_inputs.h: proportional to each row's own, never to the vocabulary).
  int64_t StageRows(std::span<SequenceSamplingState* const> seqs, const std::vector<int64_t>& picked,
                    int64_t vocab_size);
  // Queues the copies of the staged rows to the device: the sliced path's
  // part (row index, params: one copy of the upload block), then the row
  // kernel's (offsets, entries).
  void UploadSliced(int64_t rows);
  void Upload(int64_t rows, int64_t num_entries);
  // Queues the sampling kernel over `rows` rows of `gathered`.
  void LaunchRows(const Tensor& gathered, int64_t vocab_size, int64_t rows);
  // True when none of the `rows` staged rows asks for log-probs (SlicedSamplerCovers).
  bool StagedRowsCovered(int64_t rows) const;
  // True when the staged rows (no penalty entries) can run the sliced path.
  bool UseSliced(int64_t vocab_size, int64_t rows, int64_t num_entries) const;
  // The sliced sampler's arguments over `rows` rows of `gathered`, without stages.
  SlicedSampleArgs SlicedArgs(const Tensor& gathered, int64_t vocab_size, int64_t rows) const;
  // Queues the sliced sampler's stages over the staged rows.
  void LaunchSliced(const Tensor& gathered, int64_t vocab_size, int64_t rows);
  // Queues the copies of the results (and the top log-probs when any_top) back.
  void Download(int64_t rows, bool any_top);

  // A layout PrepareBatch captured, and its graphs.
  struct BatchGraphs {
    const void* data = nullptr;  // the gathered logits' address, dtype and [tp, B, Vs]
    DType dtype = DType::kBF16;
    int64_t dims[3] = {};
    int64_t vocab_size = 0;
    std::unique_ptr<BackendGraph> graphs[kSliceStageSets];  // [set]: SliceStagesOf(set)
    bool Holds(const Tensor& gathered, int64_t vocab) const {
      return data == gathered.data && dtype == gathered.dtype && vocab_size == vocab && dims[0] == gathered.dim(0) &&
             dims[1] == gathered.dim(1) && dims[2] == gathered.dim(2);
    }
  };
  // One graph of PrepareBatch: the sliced path over `gathered`'s B rows with `stages`.
  absl::StatusOr<std::unique_ptr<BackendGraph>> CaptureSliced(const Tensor& gathered, int64_t vocab_size,
                                                              const SliceStages& stages);
  // The graph that samples the `rows` staged rows (no penalty entries) of
  // `gathered`, or nullptr (run eagerly).
  BackendGraph* GraphFor(const Tensor& gathered, int64_t vocab_size, int64_t rows, int64_t num_entries) const;

  Options options_;
  cudaStream_t stream_;
  int32_t top_stride_ = 1;  // max(max_logprobs, 1)

  // The rows' upload, one block (device and pinned) so that one copy takes it:
  //   [live_rows: int32][row_index: max_seqs int32][params: max_seqs RowParams],
  // each part 16-byte aligned. A graph copies [0, ParamsEnd(B)); an eager call
  // [row_index, ParamsEnd(rows)). d_params_ .. h_live_rows_ point into it.
  char* d_upload_ = nullptr;
  char* h_upload_ = nullptr;
  size_t row_index_offset_ = 0, params_offset_ = 0;
  size_t ParamsEnd(int64_t rows) const { return params_offset_ + sizeof(sampling::RowParams) * rows; }

  // Device buffers.
  sampling::RowParams* d_params_ = nullptr;      // [max_seqs]
  int32_t* d_offsets_ = nullptr;                 // [max_seqs + 1]
  sampling::PenaltyEntry* d_entries_ = nullptr;  // [entry_capacity_]
  sampling::TopLogprob* d_top_ = nullptr;        // [max_seqs, top_stride]
  sampling::RowResult* d_results_ = nullptr;     // [max_seqs]
  int32_t* d_row_index_ = nullptr;               // [max_seqs] gathered row of each sampled row
  int32_t* d_live_rows_ = nullptr;               // [1] a graph's rows to sample (the rest: padding)
  // Pinned host mirrors, same shapes.
  sampling::RowParams* h_params_ = nullptr;
  int32_t* h_offsets_ = nullptr;
  sampling::PenaltyEntry* h_entries_ = nullptr;
  sampling::TopLogprob* h_top_ = nullptr;
  sampling::RowResult* h_results_ = nullptr;
  int32_t* h_row_index_ = nullptr;
  int32_t* h_live_rows_ = nullptr;
  int64_t entry_capacity_ = 0;

  // The sliced path: rows it takes at most, its workspace (device).
  int64_t sliced_rows_cap_ = 0;
  void* d_sliced_workspace_ = nullptr;  // SlicedSampleWorkspaceBytes of any call up to the cap; its
                                       //   arrival counters zeroed once, by Allocate (SlicedSampleCounterBytes)
  size_t sliced_workspace_bytes_ = 0;
  int64_t sliced_calls_ = 0;
  int64_t graph_calls_ = 0;
  std::vector<BatchGraphs> batch_graphs_;  // PrepareBatch's, one per layout

  // MaskRows' device buffers: [mask_rows_capacity_] row indices and
  // [mask_rows_capacity_, words per row] mask words, grown on demand.
  int32_t* d_mask_rows_ = nullptr;
  uint32_t* d_mask_words_ = nullptr;
  int64_t mask_rows_capacity_ = 0, mask_words_capacity_ = 0;

  std::vector<sampling::PenaltyEntry> staging_;  // this step's entries before the pinned copy
};

}  // namespace tpserve::cuda
