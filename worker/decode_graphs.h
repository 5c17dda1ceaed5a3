// DecodeGraphs: decode steps as captured CUDA graphs (issue 5 §5).
//
// A pure-decode step (no prefill sequences) of S sequences is padded up to a
// bucket B >= S, its metadata uploaded into the backend's static step buffers
// (Backend::Reserve fixed them), and the graph captured for B replays the whole
// forward (Model::Enqueue: embedding .. gathered device logits); only the real
// S rows' logits are copied out. Steps with a prefill, larger than the largest
// bucket, or on a backend / communicator that cannot capture run eagerly
// (Model::Forward).
//
// Buckets: 1, 2, 4, 8, then multiples of 16, up to max_num_seqs (and
// max_num_tokens: B decode rows are B tokens); max_num_seqs itself is the last
// bucket when it is not a multiple of 16, so every decode batch has a graph.
//
// Padding (StepBatch::AssignPaddedDecode): the kernels' by-value arguments (T, S,
// max_blocks_per_seq) must equal the captured ones, so a step is padded to
// B rows and to the capacity's max_blocks_per_seq block-table columns
// (unused entries -1). A padding row is a decode of token 0 at position 0 with
// seq_len 1, slot -1 (StoreKv skips it: the KV cache is never written) and
// block table row [0, -1, ...]: attention reads slot 0 of block 0, which is
// always in range and holds finite values (the cache is zero-filled at
// allocation), and its output row only feeds its own logits row, which is not
// copied out. Every op is row-wise in the batch (GEMM rows, norms, attention
// per query row), so padding rows do not disturb the real ones.
//
// A graph holds the KV cache's and the model's buffers by address: recapture
// (a new DecodeGraphs) after the cache is reallocated or Reserve runs again.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "backend/backend.h"
#include "backend/step_batch.h"
#include "comm/communicator.h"
#include "sampling/device_sampler.h"
#include "worker/kv_cache.h"
#include "worker/model.h"

namespace tpserve {

// The bucket batch sizes for max_num_seqs sequences and max_num_tokens tokens
// per step, ascending (empty when either is < 1).
std::vector<int32_t> DecodeGraphBatchSizes(int64_t max_num_seqs, int64_t max_num_tokens);

// The smallest bucket >= num_seqs, or 0 when none is (sizes ascending).
int32_t DecodeGraphBucket(const std::vector<int32_t>& sizes, int64_t num_seqs);

// What the model and a cache of `block_size`-token blocks need from
// Backend::Reserve: max_num_tokens, max_num_seqs, max_position, block_size,
// and this rank's query heads and head dim.
StepCapacity StepCapacityFor(const Model& model, int32_t block_size);
// What Backend::Reserve is given: StepCapacityFor with max_seqs raised to the
// model's logits rows (speculative decoding: a verification step has a row
// per proposed token too, and a reserved backend's step layout holds
// R <= max_seqs rows, cuda/step_layout.h). The decode graphs keep
// StepCapacityFor: their batch sizes stop at max_num_seqs.
StepCapacity ReservedCapacityFor(const Model& model, int32_t block_size);

class DecodeGraphs {
 public:
  // Whether graphs can run: the backend captures, the communicator's
  // collectives are capturable, and no intermediate hook is set on the model.
  static bool Supported(const Backend& backend, const Communicator& comm, const Model& model);

  // For `model` over `cache`; Backend::Reserve(capacity) must have run. Nothing
  // is captured until Capture.
  DecodeGraphs(Model& model, KvCache& cache, Backend& backend, const StepCapacity& capacity);

  // Runs each bucket's all-padding step once eagerly (lazy initialisation
  // outside the capture), then captures it. Every rank of the model must call
  // it together (the captures hold the collectives). A failed capture is
  // returned (INTERNAL, naming the bucket) and leaves no graphs: Forward then
  // runs everything eagerly. `sampler` (rank 0's device sampler, or nullptr):
  // after each bucket's capture, while its step is current,
  // sampler->PrepareBatch(device_logits(), vocab_size) lets it capture its own
  // graph for the bucket's logits (cuda/cuda_sampler.h says why sampling is
  // not part of the forward's graph); its error is returned like a capture's.
  absl::Status Capture(DeviceSampler* sampler = nullptr);

  // Model::Forward(step, cache), through a graph when the step is a pure decode
  // of at most the largest bucket and graphs were captured. Same results and
  // errors as Model::Forward.
  absl::StatusOr<std::optional<Logits>> Forward(const StepMetadata& step);
  // Forward without reading the logits back: they stay in the model's
  // device_logits() (rows past step.num_seqs() are the graph's padding), for a
  // sampler on the device.
  absl::Status Run(const StepMetadata& step);

  const std::vector<int32_t>& batch_sizes() const { return sizes_; }
  bool captured() const { return !graphs_.empty(); }
  int64_t replays() const { return replays_; }  // steps that ran as a graph

 private:
  Model& model_;
  KvCache& cache_;
  Backend& backend_;
  StepCapacity capacity_;
  std::vector<int32_t> sizes_;                         // buckets, ascending
  std::vector<std::unique_ptr<BackendGraph>> graphs_;  // [buckets] once captured
  StepBatch padded_;                                   // the step being replayed
  int64_t replays_ = 0;
};

}  // namespace tpserve
