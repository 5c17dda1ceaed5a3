#include "parallel/shard_loader.h"

#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"

namespace tpserve {

absl::StatusOr<ShardSpec> ResolveShard(const ShardContext& ctx, std::string_view name) {
  absl::StatusOr<const TensorInfo*> info = ctx.checkpoint.Info(name);
  if (!info.ok()) return info.status();
  if (!(*info)->readable) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", std::string(name), "' has dtype ",
                                                   (*info)->dtype_name,
                                                   "; weights must be F32, F16 or BF16"));
  }
  return ShardFor(name, (*info)->shape, ctx.rank, ctx.world_size, ctx.config);
}

absl::Status LoadShardInto(const ShardContext& ctx, std::string_view name, const ShardSpec& spec,
                           Backend& backend, Tensor dst) {
  int64_t local_numel = 1;
  for (int64_t d : spec.local_shape) local_numel *= d;
  if (dst.numel() != local_numel || dst.dtype != backend.compute_dtype()) {
    return absl::InternalError(absl::StrCat("loading tensor '", std::string(name), "': destination ",
                                            dst.ShapeString(), " ", std::string(DTypeName(dst.dtype)),
                                            " does not fit the shard ", ShapeToString(spec.local_shape), " ",
                                            std::string(DTypeName(backend.compute_dtype()))));
  }
  if (local_numel == 0) return absl::OkStatus();
  const DType dtype = backend.compute_dtype();
  const size_t esize = DTypeSize(dtype);
  // One shard in host memory, already in the compute dtype.
  std::vector<uint8_t> host(static_cast<size_t>(local_numel) * esize);
  absl::Status read;
  switch (spec.kind) {
    case ShardKind::kReplicated:
      read = ctx.checkpoint.ReadRows(name, 0, spec.local_shape[0], dtype, host.data());
      break;
    case ShardKind::kRows:
      // The rows read come first; any padding rows after them stay zero.
      read = spec.count == 0 ? absl::OkStatus()
                             : ctx.checkpoint.ReadRows(name, spec.begin, spec.count, dtype, host.data());
      break;
    case ShardKind::kCols:
      read = ctx.checkpoint.ReadCols(name, spec.begin, spec.count, dtype, host.data());
      break;
  }
  if (!read.ok()) return read;
  backend.CopyFromHost(host.data(), dtype, dst);
  return absl::OkStatus();
}

absl::StatusOr<Buffer> LoadShard(const ShardContext& ctx, std::string_view name, Backend& backend) {
  absl::StatusOr<ShardSpec> spec = ResolveShard(ctx, name);
  if (!spec.ok()) return spec.status();
  Buffer buffer = backend.Allocate(backend.compute_dtype(), spec->local_shape);
  if (absl::Status s = LoadShardInto(ctx, name, *spec, backend, buffer.tensor()); !s.ok()) return s;
  return buffer;
}

}  // namespace tpserve
