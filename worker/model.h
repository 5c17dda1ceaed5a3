// Model: the decoder of Llama 3.x, Qwen2 and Qwen3 on one tensor-parallel rank.
//
// One forward step (shapes per rank; T new tokens, S sequences, D hidden,
// Hq/Hkv local heads, hd head dim, F local intermediate, V vocab):
//
//   residual = embed(token_ids)                         [T, D]  vocab-parallel, all-reduce
//   for each layer l:
//     x = l == 0 ? RmsNorm(residual) : AddRmsNorm(x, residual)   input_layernorm
//     qkv = x · Wqkvᵀ (+ b, Qwen2)                      [T, (Hq + 2 Hkv) hd]
//     q, k = RoPE(q/k RmsNorm (Qwen3))                  in place, rope table [max_position, hd]
//     StoreKv(k, v → slots); attn = Attention(q, cache) [T, Hq hd]  scale 1/sqrt(hd)
//     x = attn · Woᵀ                                    [T, D]  row-parallel, all-reduce
//     x = AddRmsNorm(x, residual)                       post_attention_layernorm
//     gate_up = x · [Wg; Wu]ᵀ; act = silu(gate) * up    [T, 2F] → [T, F]  one op, LinearSiluMul
//     x = act · Wdownᵀ                                  [T, D]  row-parallel, all-reduce
//   x = AddRmsNorm(x, residual)                         model.norm
//   last = x[logits_indices]                            [R, D]  R = S, or more with a
//   logits = last · Wlmᵀ                                [R, V]  verifying sequence's rows
//                                                               (backend/step.h); gathered to rank 0
//
// At tp 1 with no intermediate hook, on a backend that fuses a step's layer
// ops (Backend::FusesLayerOps: the CUDA fast set at a few tokens), the same
// math in five ops a layer, the norms moved into the projections after them
// and the residual adds into the ones before:
//     qkv = RmsNormQkvRopeStoreKv(residual)             input norm, QKV, q/k norm, RoPE, K/V store
//     attn = Attention(q, cache)
//     residual += attn · Woᵀ                            LinearAddResidual
//     act = RmsNormLinearSiluMul(residual)              post-attention norm, gate/up, SiLU-mul
//     residual += act · Wdownᵀ                          LinearAddResidual
//   x = RmsNorm(residual)                               model.norm
//
// Every rank runs the same steps in the same order (the collectives pair up).
// Activation buffers are carved from one arena allocated once at Load for
// options.max_num_tokens tokens and options.max_num_seqs sequences and reused
// by every step.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "backend/backend.h"
#include "comm/communicator.h"
#include "model/config.h"
#include "parallel/linear.h"
#include "parallel/replicated_weight.h"
#include "parallel/vocab_parallel.h"
#include "worker/kv_cache.h"

namespace tpserve {

struct ModelOptions {
  int64_t max_num_tokens = 2048;  // most new tokens in one step (activation rows)
  int64_t max_num_seqs = 256;     // most sequences in one step (LM-head rows)
  // Positions the RoPE table covers (and so the longest sequence);
  // 0 = config.max_position_embeddings.
  int64_t max_position = 0;
  // Most logits rows in one step (R, backend/step.h: more than the sequences
  // when some verify speculative proposals); 0 = max_num_seqs.
  int64_t max_num_logits_rows = 0;
};

// Full-vocabulary logits of the last new token of each sequence, on rank 0.
struct Logits {
  int64_t num_seqs = 0;     // S: rows, one per sequence (R with verifying sequences, backend/step.h)
  int64_t vocab_size = 0;   // V
  std::vector<float> values;  // [S, V] row-major
  std::span<const float> row(int64_t s) const {
    return std::span<const float>(values).subspan(static_cast<size_t>(s * vocab_size),
                                                  static_cast<size_t>(vocab_size));
  }
};

// Called with each named intermediate as it is produced (for dumping and
// diffing layer by layer, e.g. CPU against CUDA). layer is -1 outside the
// layers. Names: "embed", "attn_norm", "qkv", "qk_rope", "attn_out", "o_proj",
// "ffn_norm", "gate_up", "act", "down", "final_norm", "last_hidden". With a
// hook set the MLP runs Linear and SiluMul apart, so that gate_up exists to be
// seen (without one, Backend::LinearSiluMul, which a backend may fuse).
// The tensor is valid only during the call (the buffer is reused).
using IntermediateHook = std::function<void(std::string_view name, int layer, const Tensor&)>;

class Model {
 public:
  // Reads <dir>/config.json and this rank's shard of every weight from the
  // safetensors in <dir> (comm.rank() of comm.world_size()). Errors name the
  // file, tensor or config field: an unsupported architecture, a missing tensor
  // (NOT_FOUND), a shape that does not match config.json, a tp size that does
  // not divide the heads or the intermediate size.
  static absl::StatusOr<std::unique_ptr<Model>> Load(const std::filesystem::path& dir,
                                                     Backend& backend, Communicator& comm,
                                                     const ModelOptions& options = {});

  const ModelConfig& config() const { return config_; }
  const ModelOptions& options() const { return options_; }
  Backend& backend() const { return backend_; }
  Communicator& comm() const { return comm_; }
  // This rank's attention geometry (local heads) and KV cache shape for
  // `num_blocks` blocks of `block_size` tokens.
  const AttentionShape& attention_shape() const { return attn_shape_; }
  KvCacheShape kv_cache_shape(int64_t num_blocks, int32_t block_size) const;
  // Rows of the RoPE table: positions must be below this.
  int64_t max_position() const { return max_position_; }

  // Runs one step. Returns the logits on rank 0 and nullopt on the other ranks.
  // INVALID_ARGUMENT for a step the backend rejects (block ids, slots,
  // positions) or one larger than the options; a failed collective as it came.
  // = BeginStep, Enqueue, ReadLogits(S).
  absl::StatusOr<std::optional<Logits>> Forward(const StepMetadata& step, KvCache& cache);

  // Forward in three parts, so that the middle one can be captured in a CUDA
  // graph and replayed (worker/decode_graphs.h):
  // * BeginStep checks the step against the options and the cache and makes it
  //   the backend's current step (Backend::BeginStep uploads its metadata);
  // * Enqueue issues every op from the embedding to the LM head's gathered
  //   device logits over `cache`, with no host synchronisation (capturable when
  //   the backend and communicator support it and no intermediate hook is set);
  //   FAILED_PRECONDITION without a successful BeginStep;
  // * ReadLogits waits for the step and copies the first `rows` (<= R)
  //   logits rows to the host on rank 0 ([rows, V]); nullopt elsewhere.
  absl::Status BeginStep(const StepMetadata& step, KvCache& cache);
  absl::Status Enqueue();
  // BeginStep then Enqueue: the step's logits stay in device_logits().
  absl::Status Compute(const StepMetadata& step, KvCache& cache);
  absl::StatusOr<std::optional<Logits>> ReadLogits(int64_t rows);

  // Prompt log-probs (worker/prompt_logprobs.h): after the step's Enqueue,
  // and after its own logits were read or sampled (this reuses the LM head's
  // workspace, so device_logits() no longer holds them), the logits of the
  // step's new tokens [first, first + n) from their final hidden states
  // ([T, D] after model.norm, which the step leaves in place) through the LM
  // head, n <= max_logits_rows(): every rank computes its [n, Vs] slice (the
  // gather is a collective: every rank calls it with the same rows) and rank
  // 0 gets them on the host ([n, V]); nullopt elsewhere.
  // FAILED_PRECONDITION without a current step, or for rows outside it.
  absl::StatusOr<std::optional<Logits>> TokenLogits(int64_t first, int64_t n);
  // The most logits rows one step (or one TokenLogits call) computes.
  int64_t max_logits_rows() const { return MaxLogitsRows(); }

  // Rank 0: the current step's gathered logits, [tp, R, Vs] in the backend's
  // compute dtype (row [r, i, j]: vocab id r·Vs + j of sequence i; ids >= V are
  // padding), on the device. Set by BeginStep; holds the step's values once
  // Enqueue (or a graph captured from it) has run. Empty on other ranks.
  const Tensor& device_logits() const { return device_logits_; }

  void set_intermediate_hook(IntermediateHook hook) { hook_ = std::move(hook); }
  bool has_intermediate_hook() const { return static_cast<bool>(hook_); }

 private:
  struct Layer {
    ReplicatedWeight input_norm;          // [D]
    QKVParallelLinear qkv;                // [(Hq + 2 Hkv) hd, D]
    std::optional<ReplicatedWeight> q_norm, k_norm;  // [hd] (Qwen3)
    RowParallelLinear o_proj;             // [D, Hq hd]
    ReplicatedWeight post_norm;           // [D]
    MergedColumnParallelLinear gate_up;   // [2F, D]
    RowParallelLinear down;               // [D, F]
  };
  Model(Backend& backend, Communicator& comm) : backend_(backend), comm_(comm) {}
  absl::Status LoadWeights(const std::filesystem::path& dir);
  ShardContext Context(const Checkpoint& checkpoint) const {
    return ShardContext{checkpoint, config_, comm_.rank(), comm_.world_size()};
  }
  void AllocateActivations();
  int64_t MaxLogitsRows() const {
    return options_.max_num_logits_rows > 0 ? options_.max_num_logits_rows : options_.max_num_seqs;
  }
  // Enqueue's layers op by op, every intermediate named for the hook (any tp).
  absl::Status EnqueueLayers(const Tensor& residual, const Tensor& x, const Tensor& qkv, const Tensor& attn,
                             const Tensor& gate_up, const Tensor& act, float scale);
  void Dump(std::string_view name, int layer, const Tensor& t) const {
    if (hook_) hook_(name, layer, t);
  }

  Backend& backend_;
  Communicator& comm_;
  ModelConfig config_;
  ModelOptions options_;
  AttentionShape attn_shape_;
  int64_t local_intermediate_ = 0;  // F
  int64_t max_position_ = 0;
  float eps_ = 1e-6f;

  std::optional<VocabParallelEmbedding> embed_;  // [Vs, D]
  std::vector<Layer> layers_;
  std::optional<ReplicatedWeight> final_norm_;   // [D]
  std::optional<ParallelLMHead> lm_head_;        // [Vs, D] (shares embed_ when tied)
  Buffer rope_;                                  // [max_position, hd] f32

  // Activations, sized for max_num_tokens (N) and the logits rows (M:
  // max_num_logits_rows, else max_num_seqs) once: views
  // into one arena allocation (AllocateActivations).
  Buffer arena_;
  Tensor residual_;  // [N, D]
  Tensor hidden_;    // [N, D]
  Tensor qkv_;       // [N, (Hq + 2 Hkv) hd]
  Tensor attn_;      // [N, Hq hd]
  Tensor gate_up_;   // [N, 2F]
  Tensor act_;       // [N, F]
  Tensor last_;      // [M, D]
  LmHeadWorkspace lm_ws_;
  IntermediateHook hook_;

  // The step of the last successful BeginStep (0 / nullptr when none).
  int64_t step_tokens_ = 0;   // T
  int64_t step_rows_ = 0;     // R: logits rows (S but for verifying sequences)
  KvCache* step_cache_ = nullptr;
  Tensor device_logits_;      // rank 0: [tp, R, Vs] view of lm_ws_
};

}  // namespace tpserve
