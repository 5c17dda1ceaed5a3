// A weight every rank holds whole: the RMSNorm weights (input_layernorm,
// post_attention_layernorm, q_norm, k_norm, model.norm).
#pragma once

#include <string_view>

#include "absl/status/statusor.h"
#include "backend/backend.h"
#include "parallel/shard_loader.h"

namespace tpserve {

class ReplicatedWeight {
 public:
  // Loads tensor `name` (e.g. "model.layers.0.input_layernorm.weight"); an
  // InvalidArgument error when the sharding rules split that tensor.
  static absl::StatusOr<ReplicatedWeight> Load(const ShardContext& ctx, std::string_view name,
                                               Backend& backend);

  const Tensor& tensor() const { return weight_.tensor(); }  // full shape, e.g. [D] or [hd]
  operator const Tensor&() const { return tensor(); }        // NOLINT: usable where a Tensor is

 private:
  Buffer weight_;
};

}  // namespace tpserve
