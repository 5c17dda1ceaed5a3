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
// Verification steps (speculative decoding, issue 27; backend/step.h): one
// sequence carrying its last token and k proposals, 1 + k query rows at
// consecutive positions and 1 + k logits rows, is replayed from a graph of
// its own, keyed by (sequences, k) exactly: captured for one sequence (the
// batch speculation targets) and k = 1 .. VerifyGraphProposals(model). Not
// padded at all: the replay is the eager step's kernels with the eager step's
// by-value arguments (T = R = 1 + k, S = 1, one prefill tile per 64 rows, the
// tiles themselves uploaded by BeginStep), so its logits are the eager
// step's, bit for bit; only the block table is re-laid to the capacity's
// columns (StepBatch::AssignWithColumns: the stride the kernels read it
// with). Keyed by total rows instead, a step of other sequence makeups would
// need padding sequences whose rows change the GEMMs' row count (not bit
// for bit outside the deterministic mode) and whose attention tiles follow
// their own positions; keyed by (B, k) for B > 1, every sequence of a step
// would need the same k, which the per-sequence policy rarely gives: both
// left for later. Other steps with proposals (batch > 1, a prefill beside
// them) run eagerly.
//
// A graph holds the KV cache's and the model's buffers by address: recapture
// (a new DecodeGraphs) after the cache is reallocated or Reserve runs again.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
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

// The most proposals per sequence (k) the verification graphs cover for
// `model`: its extra logits rows (max_logits_rows - max_num_seqs, the
// workers' Load.max_num_draft_tokens), at most kMaxVerifyGraphProposals,
// max_num_tokens - 1 and max_position() - 1 (1 + k tokens fit a step and a
// sequence), and at most `max_per_sequence` when it is > 0 (the workers'
// Load.num_speculative_tokens: no sequence proposes more, so a graph past it
// would never replay); 0 without speculative decoding.
inline constexpr int32_t kMaxVerifyGraphProposals = 8;  // the k range issue 27 measures
int32_t VerifyGraphProposals(const Model& model, int32_t max_per_sequence = 0);

class DecodeGraphs {
 public:
  // Whether graphs can run: the backend captures, the communicator's
  // collectives are capturable, and no intermediate hook is set on the model.
  static bool Supported(const Backend& backend, const Communicator& comm, const Model& model);

  // For `model` over `cache`; Backend::Reserve(capacity) must have run (with
  // room for 1 + max_proposals logits rows when max_proposals > 0:
  // ReservedCapacityFor). max_proposals: verification graphs for one
  // sequence with k = 1 .. max_proposals proposals (0: none; see above).
  // Nothing is captured until Capture.
  DecodeGraphs(Model& model, KvCache& cache, Backend& backend, const StepCapacity& capacity,
               int32_t max_proposals = 0);

  // Runs each bucket's all-padding step once eagerly (lazy initialisation
  // outside the capture), then captures it. Every rank of the model must call
  // it together (the captures hold the collectives). A failed capture is
  // returned (INTERNAL, naming the bucket) and leaves no graphs: Forward then
  // runs everything eagerly. `sampler` (rank 0's device sampler, or nullptr):
  // after each bucket's capture, while its step is current,
  // sampler->PrepareBatch(device_logits(), vocab_size) lets it capture its own
  // graph for the bucket's logits (cuda/cuda_sampler.h says why sampling is
  // not part of the forward's graph); its error is returned like a capture's.
  // Then the verification graphs the same way, each over an all-padding
  // sequence of 1 + k tokens (slots -1, every block-table entry 0), without
  // the sampler (a verification step samples on the host).
  absl::Status Capture(DeviceSampler* sampler = nullptr);

  // Model::Forward(step, cache), through a graph when the step is a pure decode
  // of at most the largest bucket, or a verification step of one sequence
  // whose k proposals have a graph, and graphs were captured. Same results
  // and errors as Model::Forward (all R = step.num_logits_rows() rows).
  absl::StatusOr<std::optional<Logits>> Forward(const StepMetadata& step);
  // Forward without reading the logits back: they stay in the model's
  // device_logits() (rows past step.num_seqs() are the graph's padding), for a
  // sampler on the device.
  absl::Status Run(const StepMetadata& step);

  const std::vector<int32_t>& batch_sizes() const { return sizes_; }
  // The k of the verification graphs (1 .. max_proposals), ascending.
  const std::vector<int32_t>& verify_proposals() const { return proposals_; }
  bool captured() const { return !graphs_.empty(); }
  int64_t replays() const { return replays_; }  // steps that ran as a graph (verifications included)
  int64_t verify_replays() const { return verify_replays_; }  // verification steps that ran as a graph

 private:
  // Runs the current step (model_.BeginStep done) once eagerly, then captures
  // its ops; the graph, or the error naming `what`.
  absl::StatusOr<std::unique_ptr<BackendGraph>> CaptureCurrent(absl::string_view what);
  // The k of a verification step a graph covers, or 0.
  int32_t VerifyGraphFor(const StepMetadata& step) const;

  Model& model_;
  KvCache& cache_;
  Backend& backend_;
  StepCapacity capacity_;
  std::vector<int32_t> sizes_;                         // buckets, ascending
  std::vector<int32_t> proposals_;                     // verification graphs' k, ascending
  std::vector<std::unique_ptr<BackendGraph>> graphs_;  // [buckets] once captured
  std::vector<std::unique_ptr<BackendGraph>> verify_graphs_;  // [proposals_] once captured
  StepBatch padded_;                                   // the step being replayed
  int64_t replays_ = 0, verify_replays_ = 0;
};

}  // namespace tpserve
