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
// Verification steps (speculative decoding, issue 27; backend/step.h): S
// sequences, each carrying its last token and k_s <= K proposals (k_s = 0
// for one that got none: one row), every one of the T = S + sum k_s tokens a
// logits row, all of them in the prefill group (the last sequence of the
// order verifies: it has more than one row), replay a graph of their own,
// keyed by (S, T) exactly (VerifyGraphShapes: S = 1 .. 8, the batches the
// speculation policy proposes at, and every T from S + 1 to S + S K). Not
// padded at all: the replay is the eager step's kernels with the eager
// step's by-value arguments, which such a step fixes by (S, T) alone (T
// tokens and logits rows, S sequences; on the CUDA backend one prefill tile
// per sequence, 1 + k_s <= 9 rows, its tile's contents and every position,
// context and block uploaded by BeginStep to addresses fixed by (T, S)), so
// its logits are the eager step's, bit for bit, however the T rows are
// shared among the S sequences; only the block table is re-laid to the
// capacity's columns (StepBatch::AssignWithColumns: the stride the kernels
// read it with). Padding a step to a common k (vLLM pads a uniform decode
// batch to its token count) would change the GEMMs' row count, so the same
// bits only in deterministic mode, and padding rows' positions past a
// sequence's slots would need blocks the plan never reserved. Steps with
// proposals outside these shapes (more than 8 sequences, a one-token decode
// after the last verifying sequence, a prefill beside them) run eagerly.
//
// A graph holds the KV cache's and the model's buffers by address: recapture
// (a new DecodeGraphs) after the cache is reallocated or Reserve runs again.
#pragma once

#include <compare>
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

// A verification graph's key: a step of `seqs` sequences and `tokens` tokens,
// every token a logits row (see above).
struct VerifyGraphShape {
  int32_t seqs = 0;    // S
  int32_t tokens = 0;  // T = S + the step's proposals
  friend bool operator==(const VerifyGraphShape&, const VerifyGraphShape&) = default;
  friend auto operator<=>(const VerifyGraphShape&, const VerifyGraphShape&) = default;
};
inline constexpr int32_t kMaxVerifyGraphSeqs = 8;  // the batches the speculation policy proposes at
// The shapes captured for up to `max_seqs` sequences (at most
// kMaxVerifyGraphSeqs) with up to `max_proposals` proposals each, at most
// `max_extra_rows` proposals a step (the model's extra logits rows) and
// `max_tokens` tokens: every (S, T) with S + 1 <= T <= S + min(S K, extra)
// and T <= max_tokens, ascending (S first). Empty when max_proposals < 1.
// At K = 4 (the default k) and 8 sequences: 4 + 8 + 12 + ... + 32 = 144.
std::vector<VerifyGraphShape> VerifyGraphShapes(int64_t max_seqs, int32_t max_proposals, int64_t max_extra_rows,
                                                int64_t max_tokens);

class DecodeGraphs {
 public:
  // Whether graphs can run: the backend captures, the communicator's
  // collectives are capturable, and no intermediate hook is set on the model.
  static bool Supported(const Backend& backend, const Communicator& comm, const Model& model);

  // For `model` over `cache`; Backend::Reserve(capacity) must have run (with
  // room for the model's logits rows when max_proposals > 0:
  // ReservedCapacityFor). max_proposals: verification graphs for steps of
  // up to kMaxVerifyGraphSeqs sequences with up to max_proposals proposals
  // each (VerifyGraphShapes; 0: none; see above). Nothing is captured until
  // Capture.
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
  // step of its S sequences sharing its T tokens (the later sequences one
  // more when they do not share evenly; slots -1, every block-table entry
  // 0), without the sampler (a verification step samples on the host).
  absl::Status Capture(DeviceSampler* sampler = nullptr);

  // Model::Forward(step, cache), through a graph when the step is a pure decode
  // of at most the largest bucket, or a verification step whose shape has a
  // graph (above), and graphs were captured. Same results
  // and errors as Model::Forward (all R = step.num_logits_rows() rows).
  absl::StatusOr<std::optional<Logits>> Forward(const StepMetadata& step);
  // Forward without reading the logits back: they stay in the model's
  // device_logits() (rows past step.num_seqs() are the graph's padding), for a
  // sampler on the device.
  absl::Status Run(const StepMetadata& step);

  const std::vector<int32_t>& batch_sizes() const { return sizes_; }
  // The k of the verification graphs (1 .. max_proposals), ascending.
  const std::vector<int32_t>& verify_proposals() const { return proposals_; }
  // Their shapes (VerifyGraphShapes), ascending: one graph each once captured.
  const std::vector<VerifyGraphShape>& verify_shapes() const { return shapes_; }
  bool captured() const { return !graphs_.empty(); }
  int64_t replays() const { return replays_; }  // steps that ran as a graph (verifications included)
  int64_t verify_replays() const { return verify_replays_; }  // verification steps that ran as a graph

 private:
  // Runs the current step (model_.BeginStep done) once eagerly, then captures
  // its ops; the graph, or the error naming `what`.
  absl::StatusOr<std::unique_ptr<BackendGraph>> CaptureCurrent(absl::string_view what);
  // The index in shapes_ of the verification graph that replays `step`, or -1.
  int64_t VerifyGraphFor(const StepMetadata& step) const;

  Model& model_;
  KvCache& cache_;
  Backend& backend_;
  StepCapacity capacity_;
  std::vector<int32_t> sizes_;                         // buckets, ascending
  std::vector<int32_t> proposals_;                     // verification graphs' k, ascending
  std::vector<VerifyGraphShape> shapes_;               // verification graphs' keys, ascending
  std::vector<std::unique_ptr<BackendGraph>> graphs_;  // [buckets] once captured
  std::vector<std::unique_ptr<BackendGraph>> verify_graphs_;  // [shapes_] once captured
  StepBatch padded_;                                   // the step being replayed
  int64_t replays_ = 0, verify_replays_ = 0;
};

}  // namespace tpserve
