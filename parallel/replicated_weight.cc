#include "parallel/replicated_weight.h"

#include "absl/strings/str_cat.h"

namespace tpserve {

absl::StatusOr<ReplicatedWeight> ReplicatedWeight::Load(const ShardContext& ctx, std::string_view name,
                                                        Backend& backend) {
  absl::StatusOr<ShardSpec> spec = ResolveShard(ctx, name);
  if (!spec.ok()) return spec.status();
  if (spec->kind != ShardKind::kReplicated) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", std::string(name), "' is split by ",
                                                   std::string(ShardKindName(spec->kind)),
                                                   ", not replicated; load it with a parallel layer"));
  }
  ReplicatedWeight w;
  w.weight_ = backend.Allocate(backend.compute_dtype(), spec->local_shape);
  if (absl::Status s = LoadShardInto(ctx, name, *spec, backend, w.weight_.tensor()); !s.ok()) return s;
  return w;
}

}  // namespace tpserve
