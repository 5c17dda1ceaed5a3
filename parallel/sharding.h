// Tensor-parallel sharding of checkpoint tensors (Megatron / vLLM style), as a
// pure function of (tensor name, full shape, rank, world size, config).
//
// Notation: D hidden size, F intermediate size, H query heads, Hkv KV heads,
// hd head dim, V vocab size, tp world size, r rank.
//
//   tensor (suffix of the name)       full shape     shard of rank r
//   embed_tokens.weight, lm_head.weight  [V, D]     rows [r·Vs, r·Vs + Vs), Vs = ceil(V / tp);
//                                                    rows past V are zero padding (last ranks)
//   q_proj.weight / .bias             [H·hd, D]/[H·hd]   rows of heads [r·H/tp, (r+1)·H/tp)
//   k_proj, v_proj .weight / .bias    [Hkv·hd, D]/[Hkv·hd]
//        tp <= Hkv:                                  rows of KV heads [r·Hkv/tp, (r+1)·Hkv/tp)
//        tp >  Hkv (tp % Hkv == 0):                  rows of the single KV head r / (tp / Hkv)
//   o_proj.weight                     [D, H·hd]      columns of heads [r·H/tp, (r+1)·H/tp)
//   gate_proj, up_proj .weight/.bias  [F, D]/[F]     rows [r·F/tp, (r+1)·F/tp)
//   down_proj.weight                  [D, F]         columns [r·F/tp, (r+1)·F/tp)
//   o_proj.bias, down_proj.bias       [D]            replicated (added once, on rank 0)
//   input_layernorm, post_attention_layernorm, model.norm .weight   [D]   replicated
//   q_norm, k_norm .weight            [hd]           replicated
//
// ShardFor also checks that the full shape is the one the config implies, and
// that the split divides evenly: any failure is InvalidArgument naming the tensor
// (and the tp size for a split that does not divide).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "model/config.h"

namespace tpserve {

enum class ShardKind {
  kReplicated,  // every rank holds the whole tensor
  kRows,        // a range of rows (dim 0; a 1-D tensor is [n, 1])
  kCols,        // a range of columns (dim 1 of a 2-D tensor)
};

std::string_view ShardKindName(ShardKind kind);  // "replicated", "rows", "cols"

struct ShardSpec {
  ShardKind kind = ShardKind::kReplicated;
  // The range read from the checkpoint along the split dimension:
  // [begin, begin + count). For kReplicated: 0 and the full dim 0.
  int64_t begin = 0;
  int64_t count = 0;
  // Shape of this rank's tensor. Equals the read range except for the vocab
  // rows of the last ranks, where local_shape[0] - count rows are zero padding
  // (appended after the rows read).
  std::vector<int64_t> local_shape;
  // The first global vocab id of this rank's shard (embedding / LM head only).
  int64_t vocab_start = 0;
};

// The shape the config implies for a tensor, or InvalidArgument for a name this
// module does not know how to shard (naming it).
absl::StatusOr<std::vector<int64_t>> ExpectedShape(std::string_view name, const ModelConfig& config);

// This rank's shard of tensor `name` whose checkpoint shape is `full_shape`.
absl::StatusOr<ShardSpec> ShardFor(std::string_view name, std::span<const int64_t> full_shape, int rank,
                                   int world_size, const ModelConfig& config);

// Local geometry of one rank, derived from the same rules (for the model and the
// KV cache): InvalidArgument naming the config field and the tp size when H,
// Hkv or F do not split over tp.
struct LocalShape {
  int64_t num_heads = 0;     // H / tp
  int64_t num_kv_heads = 0;  // Hkv / tp, or 1 when tp > Hkv
  int64_t intermediate = 0;  // F / tp
  int64_t vocab_rows = 0;    // ceil(V / tp)
  int64_t vocab_start = 0;   // rank · vocab_rows
};
absl::StatusOr<LocalShape> LocalShapeFor(const ModelConfig& config, int rank, int world_size);

std::string ShapeToString(std::span<const int64_t> shape);  // "[3, 4]"

}  // namespace tpserve
