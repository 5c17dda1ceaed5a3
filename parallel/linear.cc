#include "parallel/linear.h"

#include <array>
#include <string>

#include "absl/strings/str_cat.h"

namespace tpserve {
namespace {

// Loads several tensors' shards stacked by rows into one buffer:
// [shard of names[0] ; shard of names[1] ; ...].
absl::StatusOr<Buffer> LoadStacked(const ShardContext& ctx, std::span<const std::string> names,
                                   Backend& backend) {
  std::vector<ShardSpec> specs;
  int64_t rows = 0;
  for (const std::string& name : names) {
    absl::StatusOr<ShardSpec> spec = ResolveShard(ctx, name);
    if (!spec.ok()) return spec.status();
    if (spec->kind != ShardKind::kRows) {
      return absl::InvalidArgumentError(absl::StrCat("tensor '", std::string(name), "' is split by ",
                                                     std::string(ShardKindName(spec->kind)),
                                                     ", not by rows"));
    }
    rows += spec->local_shape[0];
    specs.push_back(*std::move(spec));
  }
  std::vector<int64_t> shape = specs[0].local_shape;
  shape[0] = rows;
  Buffer buffer = backend.Allocate(backend.compute_dtype(), shape);
  int64_t row = 0;
  for (size_t i = 0; i < names.size(); ++i) {
    const int64_t n = specs[i].local_shape[0];
    absl::Status s = LoadShardInto(ctx, names[i], specs[i], backend, buffer.tensor().Rows(row, n));
    if (!s.ok()) return s;
    row += n;
  }
  return buffer;
}

absl::Status ExpectKind(const ShardContext& ctx, std::string_view name, ShardKind kind,
                        std::string_view layer) {
  absl::StatusOr<ShardSpec> spec = ResolveShard(ctx, name);
  if (!spec.ok()) return spec.status();
  if (spec->kind != kind) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor '", std::string(name), "' is split by ", std::string(ShardKindName(spec->kind)), "; ",
        std::string(layer), " needs a tensor split by ", std::string(ShardKindName(kind))));
  }
  return absl::OkStatus();
}

}  // namespace

// ---- ColumnParallelLinear ----

absl::StatusOr<ColumnParallelLinear> ColumnParallelLinear::Load(const ShardContext& ctx,
                                                                std::string_view prefix, Backend& backend,
                                                                bool with_bias) {
  const std::string w = absl::StrCat(std::string(prefix), ".weight");
  if (absl::Status s = ExpectKind(ctx, w, ShardKind::kRows, "ColumnParallelLinear"); !s.ok()) return s;
  ColumnParallelLinear layer;
  absl::StatusOr<Buffer> weight = LoadShard(ctx, w, backend);
  if (!weight.ok()) return weight.status();
  layer.weight_ = *std::move(weight);
  if (with_bias) {
    absl::StatusOr<Buffer> bias = LoadShard(ctx, absl::StrCat(std::string(prefix), ".bias"), backend);
    if (!bias.ok()) return bias.status();
    layer.bias_ = *std::move(bias);
  }
  return layer;
}

void ColumnParallelLinear::Forward(Backend& backend, const Tensor& x, Tensor y) const {
  backend.Linear(x, weight(), bias(), y);
}

// ---- MergedColumnParallelLinear ----

absl::StatusOr<MergedColumnParallelLinear> MergedColumnParallelLinear::Load(const ShardContext& ctx,
                                                                            std::string_view mlp_prefix,
                                                                            Backend& backend) {
  const std::array<std::string, 2> names = {absl::StrCat(std::string(mlp_prefix), ".gate_proj.weight"),
                                            absl::StrCat(std::string(mlp_prefix), ".up_proj.weight")};
  absl::StatusOr<Buffer> weight = LoadStacked(ctx, names, backend);
  if (!weight.ok()) return weight.status();
  MergedColumnParallelLinear layer;
  layer.weight_ = *std::move(weight);
  return layer;
}

void MergedColumnParallelLinear::Forward(Backend& backend, const Tensor& x, Tensor y) const {
  backend.Linear(x, weight(), nullptr, y);
}

void MergedColumnParallelLinear::ForwardSiluMul(Backend& backend, const Tensor& x, Tensor gate_up,
                                                Tensor out) const {
  backend.LinearSiluMul(x, weight(), gate_up, out);
}

// ---- QKVParallelLinear ----

absl::StatusOr<QKVParallelLinear> QKVParallelLinear::Load(const ShardContext& ctx,
                                                          std::string_view attn_prefix, Backend& backend) {
  const std::array<std::string, 3> projs = {absl::StrCat(std::string(attn_prefix), ".q_proj"),
                                            absl::StrCat(std::string(attn_prefix), ".k_proj"),
                                            absl::StrCat(std::string(attn_prefix), ".v_proj")};
  std::array<std::string, 3> weights, biases;
  for (size_t i = 0; i < projs.size(); ++i) {
    weights[i] = projs[i] + ".weight";
    biases[i] = projs[i] + ".bias";
  }
  QKVParallelLinear layer;
  absl::StatusOr<Buffer> weight = LoadStacked(ctx, weights, backend);
  if (!weight.ok()) return weight.status();
  layer.weight_ = *std::move(weight);
  for (const std::string& b : biases) {
    const bool has = ctx.checkpoint.Has(b);
    if (ctx.config.qkv_bias && !has) {
      return absl::NotFoundError(absl::StrCat("tensor '", b,
                                              "' is not in the checkpoint but config.json asks ",
                                              "for q/k/v biases (Qwen2 / attention_bias); the checkpoint ",
                                              "and its config.json do not belong together"));
    }
    if (!ctx.config.qkv_bias && has) {
      return absl::InvalidArgumentError(absl::StrCat("the checkpoint has '", b, "' but config.json has no ",
                                                     "q/k/v bias (attention_bias); fix config.json"));
    }
  }
  if (ctx.config.qkv_bias) {
    absl::StatusOr<Buffer> bias = LoadStacked(ctx, biases, backend);
    if (!bias.ok()) return bias.status();
    layer.bias_ = *std::move(bias);
  }
  const int64_t hd = ctx.config.head_dim;
  absl::StatusOr<LocalShape> local = LocalShapeFor(ctx.config, ctx.rank, ctx.world_size);
  if (!local.ok()) return local.status();
  layer.shape_.num_heads = static_cast<int32_t>(local->num_heads);
  layer.shape_.num_kv_heads = static_cast<int32_t>(local->num_kv_heads);
  layer.shape_.head_dim = static_cast<int32_t>(hd);
  if (layer.shape_.qkv_width() != layer.weight().dim(0)) {
    return absl::InternalError(absl::StrCat("QKVParallelLinear ", std::string(attn_prefix), ": local rows ",
                                            layer.weight().dim(0),
                                            " != (Hq + 2 Hkv) · hd = ", layer.shape_.qkv_width()));
  }
  return layer;
}

void QKVParallelLinear::Forward(Backend& backend, const Tensor& x, Tensor y) const {
  backend.Linear(x, weight(), bias(), y);
}

// ---- RowParallelLinear ----

absl::StatusOr<RowParallelLinear> RowParallelLinear::Load(const ShardContext& ctx, std::string_view prefix,
                                                          Backend& backend) {
  const std::string w = absl::StrCat(std::string(prefix), ".weight");
  if (absl::Status s = ExpectKind(ctx, w, ShardKind::kCols, "RowParallelLinear"); !s.ok()) return s;
  RowParallelLinear layer;
  absl::StatusOr<Buffer> weight = LoadShard(ctx, w, backend);
  if (!weight.ok()) return weight.status();
  layer.weight_ = *std::move(weight);
  const std::string b = absl::StrCat(std::string(prefix), ".bias");
  if (ctx.checkpoint.Has(b)) {
    absl::StatusOr<Buffer> bias = LoadShard(ctx, b, backend);
    if (!bias.ok()) return bias.status();
    layer.bias_ = *std::move(bias);
  }
  return layer;
}

absl::Status RowParallelLinear::Forward(Backend& backend, Communicator& comm, const Tensor& x,
                                        Tensor y) const {
  // Every rank adds its partial product; the bias must enter the sum once.
  backend.Linear(x, weight(), comm.rank() == 0 ? bias() : nullptr, y);
  // Communicators order themselves after the backend's work (NCCL on the same
  // stream; gloo on host memory after the CPU op returned).
  if (comm.world_size() == 1) return absl::OkStatus();
  return comm.AllReduceSum(y);
}

}  // namespace tpserve
