// Vocab-parallel embedding and LM head. Both split "vocab rows" over the ranks:
// with V the vocab size and tp the world size, each rank holds Vs = ceil(V / tp)
// rows starting at vocab_start = rank · Vs; rows past V (on the last ranks when
// tp does not divide V) are zero padding and are not read from the checkpoint.
#pragma once

#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "backend/backend.h"
#include "comm/communicator.h"
#include "parallel/shard_loader.h"

namespace tpserve {

// "model.embed_tokens.weight" [V, D].
class VocabParallelEmbedding {
 public:
  static absl::StatusOr<VocabParallelEmbedding> Load(const ShardContext& ctx, Backend& backend);

  // out[t] = embedding of the current step's token_ids[t] (Backend::BeginStep
  // must have run): each rank writes its shard's rows (zeros for ids outside
  // it), then the all-reduce sums them into the full embedding on every rank.
  absl::Status Forward(Backend& backend, Communicator& comm, Tensor out /*[T, D]*/) const;

  const Tensor& weight() const { return weight_.tensor(); }  // [Vs, D]
  int64_t vocab_start() const { return vocab_start_; }
  int64_t vocab_size() const { return vocab_size_; }  // V (unpadded)

 private:
  Buffer weight_;  // [Vs, D], rows >= V - vocab_start are zero
  int64_t vocab_start_ = 0;
  int64_t vocab_size_ = 0;
};

// Scratch space of ParallelLMHead::Forward, allocated once for at most
// `max_seqs` sequences (by ParallelLMHead::AllocateWorkspace).
struct LmHeadWorkspace {
  int64_t max_seqs = 0;
  Buffer local;             // [max_seqs, Vs]: this rank's logits
  Buffer gathered;          // rank 0: [tp, max_seqs, Vs]; empty elsewhere
  std::vector<float> host;  // rank 0: tp · max_seqs · Vs floats; empty elsewhere
};

// logits = hidden · embeddingᵀ over the vocab, gathered to rank 0.
// Tied (config.tie_word_embeddings): shares the embedding's shard (the
// VocabParallelEmbedding must outlive the head). Untied: "lm_head.weight" [V, D].
class ParallelLMHead {
 public:
  static absl::StatusOr<ParallelLMHead> Load(const ShardContext& ctx, Backend& backend,
                                             const VocabParallelEmbedding& embedding);

  LmHeadWorkspace AllocateWorkspace(Backend& backend, int64_t max_seqs, int rank, int world_size) const;

  // hidden: the rows that reach the head (Backend::GatherRows of the last token
  // of each sequence). Every rank computes its [S, Vs] slice; rank 0 gathers
  // them and writes the full float logits [S, V] (padding dropped) to `logits`;
  // other ranks leave `logits` alone (it may be empty there). S <= ws.max_seqs.
  // = Compute, then CopyToHost of all S rows on rank 0.
  absl::Status Forward(Backend& backend, Communicator& comm, const Tensor& hidden /*[S, D]*/,
                       LmHeadWorkspace& ws, std::span<float> logits /*rank 0: [S, V]*/) const;

  // The device part of Forward: this rank's [S, Vs] slice and, with tp > 1,
  // the gather to rank 0, only enqueued (no host synchronisation; capturable
  // in a CUDA graph when the communicator is). INVALID_ARGUMENT for S > ws.max_seqs.
  absl::Status Compute(Backend& backend, Communicator& comm, const Tensor& hidden /*[S, D]*/,
                       LmHeadWorkspace& ws) const;
  // Rank 0: the logits of the last Compute of `s` rows, as a view of `ws`:
  // [tp, S, Vs] in the compute dtype; row [r, i, j] is vocab id r·Vs + j of
  // sequence i (ids >= V are padding). At tp = 1 it is ws.local seen as [1, S, Vs].
  Tensor GatheredLogits(const LmHeadWorkspace& ws, int64_t s, int world_size) const;
  // Rank 0: copies the first `rows` sequences of GatheredLogits(ws, s) to
  // host float logits [rows, V] (padding dropped) and waits for them.
  absl::Status CopyToHost(Backend& backend, LmHeadWorkspace& ws, int64_t s, int64_t rows, int world_size,
                          std::span<float> logits /*[rows, V]*/) const;

  const Tensor& weight() const { return weight_; }  // [Vs, D]
  bool tied() const { return owned_.empty(); }
  int64_t vocab_size() const { return vocab_size_; }
  int64_t vocab_rows() const { return weight().dim(0); }  // Vs

 private:
  Buffer owned_;   // [Vs, D] when untied, else empty
  Tensor weight_;  // a view of owned_ or of the embedding's weight (memory that does not move)
  int64_t vocab_size_ = 0;
};

}  // namespace tpserve
