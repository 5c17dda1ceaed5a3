// Tensor-parallel linear layers (Megatron style). Each holds this rank's shard
// of the weights in backend memory, loaded from a Checkpoint by shard (see
// sharding.h for the rules and shard_loader.h for how a shard is read).
//
// Shapes: M rows of activations (tokens), D hidden size, F intermediate size,
// hd head dim, tp world size; "local" means this rank's part.
//
// Forward never allocates: the caller passes the output tensor. Column-parallel
// layers need no communication (their outputs stay split by output features);
// RowParallelLinear ends with an all-reduce over the ranks.
#pragma once

#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "backend/backend.h"
#include "comm/communicator.h"
#include "parallel/shard_loader.h"

namespace tpserve {

// y = x · Wᵀ (+ b) with W's output rows split over the ranks.
// Loads "<prefix>.weight" [N, K] (and "<prefix>.bias" [N] when `with_bias`),
// keeping rows ShardFor gives this rank: e.g. gate_proj, up_proj, q_proj.
class ColumnParallelLinear {
 public:
  static absl::StatusOr<ColumnParallelLinear> Load(const ShardContext& ctx, std::string_view prefix,
                                                   Backend& backend, bool with_bias = false);

  void Forward(Backend& backend, const Tensor& x /*[M, K]*/, Tensor y /*[M, N_local]*/) const;

  const Tensor& weight() const { return weight_.tensor(); }                         // [N_local, K]
  const Tensor* bias() const { return bias_.empty() ? nullptr : &bias_.tensor(); }  // [N_local]
  int64_t out_features() const { return weight().dim(0); }                          // N_local
  int64_t in_features() const { return weight().dim(1); }                           // K

 private:
  Buffer weight_;  // [N_local, K]
  Buffer bias_;    // [N_local] or empty
};

// The MLP's gate and up projections fused into one GEMM.
// Loads "<mlp_prefix>.gate_proj.weight" and "<mlp_prefix>.up_proj.weight" [F, D]
// (mlp_prefix e.g. "model.layers.3.mlp").
class MergedColumnParallelLinear {
 public:
  static absl::StatusOr<MergedColumnParallelLinear> Load(const ShardContext& ctx, std::string_view mlp_prefix,
                                                         Backend& backend);

  // y = [x · gateᵀ | x · upᵀ]: the layout Backend::SiluMul expects.
  void Forward(Backend& backend, const Tensor& x /*[M, D]*/, Tensor y /*[M, 2·F/tp]*/) const;
  // out = silu(x · gateᵀ) * (x · upᵀ) through Backend::LinearSiluMul (fused
  // where the backend can); gate_up is its scratch for the unfused product.
  void ForwardSiluMul(Backend& backend, const Tensor& x /*[M, D]*/, Tensor gate_up /*[M, 2·F/tp]*/,
                      Tensor out /*[M, F/tp]*/) const;

  const Tensor& weight() const { return weight_.tensor(); }  // [2·F/tp, D] = [gate shard ; up shard]
  int64_t local_intermediate() const { return weight().dim(0) / 2; }  // F/tp

 private:
  Buffer weight_;  // [2·F/tp, D]
};

// q, k and v projections fused into one GEMM, split by attention heads (GQA
// aware; when tp > Hkv each rank holds one replicated KV head).
// Loads "<attn_prefix>.{q,k,v}_proj.weight" (and ".bias" when config.qkv_bias,
// Qwen2) with attn_prefix e.g. "model.layers.3.self_attn".
class QKVParallelLinear {
 public:
  static absl::StatusOr<QKVParallelLinear> Load(const ShardContext& ctx, std::string_view attn_prefix,
                                                Backend& backend);

  // y[t] = [q: Hq_local·hd | k: Hkv_local·hd | v: Hkv_local·hd] (Backend's qkv layout).
  void Forward(Backend& backend, const Tensor& x /*[M, D]*/, Tensor y /*[M, shape().qkv_width()]*/) const;

  const Tensor& weight() const { return weight_.tensor(); }  // [(Hq_local + 2·Hkv_local)·hd, D]
  const Tensor* bias() const { return bias_.empty() ? nullptr : &bias_.tensor(); }  // [(Hq_l + 2·Hkv_l)·hd]
  const AttentionShape& shape() const { return shape_; }                            // local heads

 private:
  Buffer weight_;  // [(Hq_local + 2·Hkv_local)·hd, D] = [q shard ; k shard ; v shard]
  Buffer bias_;    // [(Hq_local + 2·Hkv_local)·hd] or empty
  AttentionShape shape_;
};

// y = all_reduce_sum(x_local · W_localᵀ) (+ b): W's input columns split over the
// ranks, so each rank computes a partial sum. Loads "<prefix>.weight" [N, K]
// (o_proj, down_proj) and "<prefix>.bias" [N] when the checkpoint has it (the
// bias is added on rank 0 only, so the sum counts it once).
class RowParallelLinear {
 public:
  static absl::StatusOr<RowParallelLinear> Load(const ShardContext& ctx, std::string_view prefix,
                                                Backend& backend);

  // y is complete (the same on every rank) when this returns OK; a failed
  // all-reduce is returned as is.
  absl::Status Forward(Backend& backend, Communicator& comm, const Tensor& x /*[M, K_local]*/,
                       Tensor y /*[M, N]*/) const;

  const Tensor& weight() const { return weight_.tensor(); }                         // [N, K_local]
  const Tensor* bias() const { return bias_.empty() ? nullptr : &bias_.tensor(); }  // [N]
  int64_t out_features() const { return weight().dim(0); }                          // N
  int64_t in_features() const { return weight().dim(1); }                           // K_local

 private:
  Buffer weight_;  // [N, K_local]
  Buffer bias_;    // [N] or empty
};

}  // namespace tpserve
