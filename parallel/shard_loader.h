// Reading one rank's shard of a checkpoint tensor into backend memory.
//
// The shard goes from the mmapped safetensors file through one host staging
// buffer of the shard's size (converted to the backend's compute dtype on the
// way) into the destination: peak extra host memory per tensor is one shard,
// and the full tensor is never materialised.
#pragma once

#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "backend/backend.h"
#include "model/config.h"
#include "model/safetensors.h"
#include "parallel/sharding.h"

namespace tpserve {

// Where to find a rank's shard: which rank of how many, and the config the
// checkpoint shapes are checked against.
struct ShardContext {
  const Checkpoint& checkpoint;
  const ModelConfig& config;
  int rank = 0;
  int world_size = 1;
};

// The shard of `name` for ctx.rank: NotFound when the checkpoint lacks the
// tensor, InvalidArgument (naming the tensor) for an unreadable dtype, a shape
// that does not match the config or a split that does not divide.
absl::StatusOr<ShardSpec> ResolveShard(const ShardContext& ctx, std::string_view name);

// Copies the shard `spec` of `name` into dst (dst.numel() == numel(local_shape),
// dst.dtype == backend.compute_dtype(); dst may be a row range of a fused
// buffer). Padding rows (vocab) are written as zeros.
absl::Status LoadShardInto(const ShardContext& ctx, std::string_view name, const ShardSpec& spec,
                           Backend& backend, Tensor dst);

// ResolveShard + Allocate(local_shape) + LoadShardInto.
absl::StatusOr<Buffer> LoadShard(const ShardContext& ctx, std::string_view name, Backend& backend);

}  // namespace tpserve
