#include "worker/model.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "model/safetensors.h"
#include "parallel/sharding.h"
#include "worker/rope.h"

namespace tpserve {
namespace {

Tensor Rows(const Tensor& t, int64_t n) { return t.Rows(0, n); }

}  // namespace

absl::StatusOr<std::unique_ptr<Model>> Model::Load(const std::filesystem::path& dir,
                                                   Backend& backend, Communicator& comm,
                                                   const ModelOptions& options) {
  if (options.max_num_tokens <= 0 || options.max_num_seqs <= 0 || options.max_position < 0 ||
      options.max_num_logits_rows < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ModelOptions: max_num_tokens (", options.max_num_tokens, ") and max_num_seqs (",
        options.max_num_seqs, ") must be positive and max_position (", options.max_position,
        ") not negative"));
  }
  std::unique_ptr<Model> model(new Model(backend, comm));
  model->options_ = options;
  TPSERVE_ASSIGN_OR_RETURN(model->config_, LoadModelConfig(dir));
  const ModelConfig& c = model->config_;
  LocalShape local;
  TPSERVE_ASSIGN_OR_RETURN(local, LocalShapeFor(c, comm.rank(), comm.world_size()));
  if (c.head_dim <= 0 || c.head_dim % 2 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(dir.string(), "/config.json: head_dim ",
                                                   c.head_dim, " must be even for RoPE"));
  }
  model->attn_shape_ = AttentionShape{static_cast<int32_t>(local.num_heads),
                                      static_cast<int32_t>(local.num_kv_heads),
                                      static_cast<int32_t>(c.head_dim)};
  model->local_intermediate_ = local.intermediate;
  model->eps_ = static_cast<float>(c.rms_norm_eps);
  model->max_position_ =
      options.max_position > 0 ? options.max_position : c.max_position_embeddings;
  if (model->max_position_ <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        dir.string(), "/config.json: max_position_embeddings is ", c.max_position_embeddings,
        "; set it or pass ModelOptions::max_position"));
  }

  TPSERVE_RETURN_IF_ERROR(model->LoadWeights(dir));

  const std::vector<float> rope =
      BuildRopeTable(model->max_position_, c.head_dim, c.rope_theta, c.rope_scaling);
  model->rope_ = backend.Allocate(DType::kF32, {model->max_position_, c.head_dim});
  backend.CopyFromHost(rope.data(), DType::kF32, model->rope_.tensor());
  model->AllocateActivations();
  backend.Synchronize();
  return model;
}

// The checkpoint is opened afresh for the embedding, for each layer and for
// the head: reading a shard faults in (and maps) more file pages than the
// shard itself (the kernel maps pages around each fault, and a column slice
// touches every row), and they stay in this process's RSS until the mapping
// goes. Closing the mapping after each group keeps at most one layer's
// touched pages resident besides the shards.
absl::Status Model::LoadWeights(const std::filesystem::path& dir) {
  std::unique_ptr<Checkpoint> checkpoint;
  TPSERVE_ASSIGN_OR_RETURN(checkpoint, Checkpoint::Open(dir));
  TPSERVE_ASSIGN_OR_RETURN(embed_, VocabParallelEmbedding::Load(Context(*checkpoint), backend_));
  layers_.reserve(static_cast<size_t>(config_.num_layers));
  for (int64_t l = 0; l < config_.num_layers; ++l) {
    checkpoint.reset();
    TPSERVE_ASSIGN_OR_RETURN(checkpoint, Checkpoint::Open(dir));
    const ShardContext ctx = Context(*checkpoint);
    const std::string p = absl::StrCat("model.layers.", l);
    Layer layer;
    TPSERVE_ASSIGN_OR_RETURN(layer.input_norm,
                             ReplicatedWeight::Load(ctx, p + ".input_layernorm.weight", backend_));
    TPSERVE_ASSIGN_OR_RETURN(layer.qkv, QKVParallelLinear::Load(ctx, p + ".self_attn", backend_));
    if (config_.qk_norm) {
      TPSERVE_ASSIGN_OR_RETURN(
          layer.q_norm, ReplicatedWeight::Load(ctx, p + ".self_attn.q_norm.weight", backend_));
      TPSERVE_ASSIGN_OR_RETURN(
          layer.k_norm, ReplicatedWeight::Load(ctx, p + ".self_attn.k_norm.weight", backend_));
    }
    TPSERVE_ASSIGN_OR_RETURN(layer.o_proj,
                             RowParallelLinear::Load(ctx, p + ".self_attn.o_proj", backend_));
    TPSERVE_ASSIGN_OR_RETURN(
        layer.post_norm,
        ReplicatedWeight::Load(ctx, p + ".post_attention_layernorm.weight", backend_));
    TPSERVE_ASSIGN_OR_RETURN(layer.gate_up,
                             MergedColumnParallelLinear::Load(ctx, p + ".mlp", backend_));
    TPSERVE_ASSIGN_OR_RETURN(layer.down,
                             RowParallelLinear::Load(ctx, p + ".mlp.down_proj", backend_));
    layers_.push_back(std::move(layer));
  }
  checkpoint.reset();
  TPSERVE_ASSIGN_OR_RETURN(checkpoint, Checkpoint::Open(dir));
  const ShardContext ctx = Context(*checkpoint);
  TPSERVE_ASSIGN_OR_RETURN(final_norm_, ReplicatedWeight::Load(ctx, "model.norm.weight", backend_));
  TPSERVE_ASSIGN_OR_RETURN(lm_head_, ParallelLMHead::Load(ctx, backend_, *embed_));
  return absl::OkStatus();
}

void Model::AllocateActivations() {
  // One allocation for every activation, carved into [rows, width] views that
  // start on 256-byte boundaries: sized once here, never grown by a step.
  const int64_t n = options_.max_num_tokens;
  const int64_t d = config_.hidden_size;
  const DType dt = backend_.compute_dtype();
  struct Part {
    Tensor* view;
    int64_t rows, cols;
  };
  const Part parts[] = {
      {&residual_, n, d},
      {&hidden_, n, d},
      {&qkv_, n, attn_shape_.qkv_width()},
      {&attn_, n, int64_t{attn_shape_.num_heads} * attn_shape_.head_dim},
      {&gate_up_, n, 2 * local_intermediate_},
      {&act_, n, local_intermediate_},
      {&last_, MaxLogitsRows(), d},
  };
  const int64_t align = std::max<int64_t>(1, 256 / static_cast<int64_t>(DTypeSize(dt)));  // elements
  auto aligned = [align](int64_t at) { return (at + align - 1) / align * align; };
  int64_t total = 0;
  for (const Part& p : parts) total = aligned(total) + p.rows * p.cols;
  arena_ = backend_.Allocate(dt, {total});
  auto* base = static_cast<unsigned char*>(arena_.tensor().data);
  int64_t at = 0;
  for (const Part& p : parts) {
    at = aligned(at);
    *p.view = Tensor(base + at * static_cast<int64_t>(DTypeSize(dt)), dt, arena_.tensor().device, {p.rows, p.cols});
    at += p.rows * p.cols;
  }
  lm_ws_ = lm_head_->AllocateWorkspace(backend_, MaxLogitsRows(), comm_.rank(),
                                       comm_.world_size());
}

KvCacheShape Model::kv_cache_shape(int64_t num_blocks, int32_t block_size) const {
  return KvCacheShape{config_.num_layers, num_blocks, block_size, attn_shape_.num_kv_heads,
                      attn_shape_.head_dim};
}

absl::StatusOr<std::optional<Logits>> Model::Forward(const StepMetadata& step, KvCache& cache) {
  TPSERVE_RETURN_IF_ERROR(Compute(step, cache));
  return ReadLogits(step_rows_);
}

absl::Status Model::Compute(const StepMetadata& step, KvCache& cache) {
  TPSERVE_RETURN_IF_ERROR(BeginStep(step, cache));
  return Enqueue();
}

absl::Status Model::BeginStep(const StepMetadata& step, KvCache& cache) {
  step_tokens_ = step_rows_ = 0;
  step_cache_ = nullptr;
  device_logits_ = Tensor();
  const int64_t t = step.num_tokens();
  const int64_t s = step.num_seqs();
  if (t <= 0 || t > options_.max_num_tokens || s <= 0 || s > options_.max_num_seqs) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Model::Forward: a step of ", t, " tokens and ", s, " sequences; the model was loaded for 1..",
        options_.max_num_tokens, " tokens (ModelOptions::max_num_tokens) and 1..",
        options_.max_num_seqs, " sequences (max_num_seqs)"));
  }
  const int64_t r = step.num_logits_rows();
  if (r > MaxLogitsRows()) {
    return absl::InvalidArgumentError(absl::StrCat("Model::Forward: a step of ", r,
                                                   " logits rows; the model was loaded for at most ", MaxLogitsRows(),
                                                   " (ModelOptions::max_num_logits_rows, else max_num_seqs)"));
  }
  const KvCacheShape& kv = cache.shape();
  if (kv.num_layers != config_.num_layers || kv.num_kv_heads != attn_shape_.num_kv_heads ||
      kv.head_dim != attn_shape_.head_dim) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Model::Forward: the KV cache has ", kv.num_layers, " layers x ", kv.num_kv_heads,
        " KV heads x head_dim ", kv.head_dim, "; this rank needs ", config_.num_layers, " x ",
        attn_shape_.num_kv_heads, " x ", attn_shape_.head_dim, " (use Model::kv_cache_shape)"));
  }
  TPSERVE_RETURN_IF_ERROR(
      backend_.BeginStep(step, kv.num_blocks, kv.block_size, max_position_));
  step_tokens_ = t;
  step_rows_ = r;
  step_cache_ = &cache;
  if (comm_.rank() == 0) device_logits_ = lm_head_->GatheredLogits(lm_ws_, r, comm_.world_size());
  return absl::OkStatus();
}

absl::Status Model::Enqueue() {
  if (step_cache_ == nullptr) {
    return absl::FailedPreconditionError("Model::Enqueue: no current step; call BeginStep first (and check its Status)");
  }
  const int64_t t = step_tokens_;
  const int64_t r = step_rows_;
  KvCache& cache = *step_cache_;

  const Tensor residual = Rows(residual_, t);  // [T, D]
  const Tensor x = Rows(hidden_, t);           // [T, D]
  const Tensor qkv = Rows(qkv_, t);            // [T, (Hq + 2 Hkv) hd]
  const Tensor attn = Rows(attn_, t);          // [T, Hq hd]
  const Tensor gate_up = Rows(gate_up_, t);    // [T, 2F]
  const Tensor act = Rows(act_, t);            // [T, F]
  const float scale = 1.0f / std::sqrt(static_cast<float>(attn_shape_.head_dim));

  TPSERVE_RETURN_IF_ERROR(embed_->Forward(backend_, comm_, residual));
  Dump("embed", -1, residual);
  // Fused layers (Backend::FusesLayerOps): the norms go into the projections
  // after them and the residual adds into o_proj and down, which needs the
  // whole sum on this rank (tp 1) and no intermediate to show (no hook).
  if (comm_.world_size() == 1 && !hook_ && backend_.FusesLayerOps(t)) {
    for (size_t l = 0; l < layers_.size(); ++l) {
      const Layer& layer = layers_[l];
      const KvCacheLayer kv_layer = cache.layer(static_cast<int64_t>(l));
      backend_.RmsNormQkvRopeStoreKv(residual, layer.input_norm, eps_, x, layer.qkv.weight(), layer.qkv.bias(), qkv,
                                     attn_shape_, layer.q_norm ? &layer.q_norm->tensor() : nullptr,
                                     layer.k_norm ? &layer.k_norm->tensor() : nullptr, rope_, kv_layer);
      backend_.Attention(qkv, attn_shape_, kv_layer, scale, attn);
      backend_.LinearAddResidual(attn, layer.o_proj.weight(), layer.o_proj.bias(), x, residual);
      backend_.RmsNormLinearSiluMul(residual, layer.post_norm, eps_, x, layer.gate_up.weight(), gate_up, act);
      backend_.LinearAddResidual(act, layer.down.weight(), layer.down.bias(), x, residual);
    }
    backend_.RmsNorm(residual, *final_norm_, eps_, x);
  } else {
    TPSERVE_RETURN_IF_ERROR(EnqueueLayers(residual, x, qkv, attn, gate_up, act, scale));
    backend_.AddRmsNorm(x, residual, *final_norm_, eps_);
  }
  Dump("final_norm", -1, x);
  const Tensor last = Rows(last_, r);  // [R, D]
  backend_.GatherRows(x, last);
  Dump("last_hidden", -1, last);

  return lm_head_->Compute(backend_, comm_, last, lm_ws_);
}

// The layers op by op (any tp; every intermediate named for the hook).
absl::Status Model::EnqueueLayers(const Tensor& residual, const Tensor& x, const Tensor& qkv, const Tensor& attn,
                                  const Tensor& gate_up, const Tensor& act, float scale) {
  KvCache& cache = *step_cache_;
  for (size_t l = 0; l < layers_.size(); ++l) {
    const Layer& layer = layers_[l];
    const int li = static_cast<int>(l);
    if (l == 0) {
      backend_.RmsNorm(residual, layer.input_norm, eps_, x);
    } else {
      backend_.AddRmsNorm(x, residual, layer.input_norm, eps_);
    }
    Dump("attn_norm", li, x);
    layer.qkv.Forward(backend_, x, qkv);
    Dump("qkv", li, qkv);
    const KvCacheLayer kv_layer = cache.layer(static_cast<int64_t>(l));
    backend_.QkNormRopeStoreKv(qkv, attn_shape_, layer.q_norm ? &layer.q_norm->tensor() : nullptr,
                               layer.k_norm ? &layer.k_norm->tensor() : nullptr, eps_, rope_, kv_layer);
    Dump("qk_rope", li, qkv);
    backend_.Attention(qkv, attn_shape_, kv_layer, scale, attn);
    Dump("attn_out", li, attn);
    TPSERVE_RETURN_IF_ERROR(layer.o_proj.Forward(backend_, comm_, attn, x));
    Dump("o_proj", li, x);
    backend_.AddRmsNorm(x, residual, layer.post_norm, eps_);
    Dump("ffn_norm", li, x);
    if (hook_) {  // every named intermediate, gate_up included: the two ops
      layer.gate_up.Forward(backend_, x, gate_up);
      Dump("gate_up", li, gate_up);
      backend_.SiluMul(gate_up, act);
    } else {
      layer.gate_up.ForwardSiluMul(backend_, x, gate_up, act);
    }
    Dump("act", li, act);
    TPSERVE_RETURN_IF_ERROR(layer.down.Forward(backend_, comm_, act, x));
    Dump("down", li, x);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::optional<Logits>> Model::TokenLogits(int64_t first, int64_t n) {
  if (step_cache_ == nullptr || first < 0 || n < 1 || first + n > step_tokens_ || n > MaxLogitsRows()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "Model::TokenLogits: rows [", first, ", ", first + n, ") of a step of ", step_tokens_,
        " tokens, at most ", MaxLogitsRows(), " at once; run the step (BeginStep, Enqueue) first"));
  }
  const Tensor hidden = hidden_.Rows(first, n);  // [n, D] final hidden states (Enqueue's x)
  TPSERVE_RETURN_IF_ERROR(lm_head_->Compute(backend_, comm_, hidden, lm_ws_));
  std::optional<Logits> logits;
  if (comm_.rank() == 0) {
    logits.emplace();
    logits->num_seqs = n;
    logits->vocab_size = config_.vocab_size;
    logits->values.resize(static_cast<size_t>(n * config_.vocab_size));
    TPSERVE_RETURN_IF_ERROR(lm_head_->CopyToHost(backend_, lm_ws_, n, n, comm_.world_size(), logits->values));
  }
  backend_.Synchronize();
  return logits;
}

absl::StatusOr<std::optional<Logits>> Model::ReadLogits(int64_t rows) {
  if (step_cache_ == nullptr || rows < 0 || rows > step_rows_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "Model::ReadLogits: ", rows, " rows of a step of ", step_rows_,
        " logits rows; call BeginStep and Enqueue first and ask for at most R rows"));
  }
  std::optional<Logits> logits;
  if (comm_.rank() == 0) {
    logits.emplace();
    logits->num_seqs = rows;
    logits->vocab_size = config_.vocab_size;
    logits->values.resize(static_cast<size_t>(rows * config_.vocab_size));
    TPSERVE_RETURN_IF_ERROR(
        lm_head_->CopyToHost(backend_, lm_ws_, step_rows_, rows, comm_.world_size(), logits->values));
  }
  backend_.Synchronize();
  return logits;
}

}  // namespace tpserve
