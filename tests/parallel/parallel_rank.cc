// One rank of parallel_tp_test: loads every parallel layer of a test case from
// the random checkpoint, runs each Forward over gloo and writes what this rank
// computed to <out>/rank<r>.safetensors (float32):
//   embed     [T, D]        VocabParallelEmbedding (full on every rank)
//   qkv       [T, W_local]  QKVParallelLinear (this rank's heads)
//   attn_out  [T, D]        RowParallelLinear o_proj applied to this rank's q part
//   gate      [T, F/tp]     ColumnParallelLinear on gate_proj
//   gate_up   [T, 2 F/tp]   MergedColumnParallelLinear
//   mlp_out   [T, D]        down_proj(silu(gate) * up)
//   logits    [S, V]        ParallelLMHead on x[0:S] (rank 0 only)
//   norm      [D]           ReplicatedWeight model.norm.weight (and q_norm [hd] for Qwen3)
//
// usage: parallel_rank CASE CHECKPOINT_DIR STORE_DIR OUT_DIR SEED
// (rank and world size from the launcher's environment: parallel_tp_test starts
// the ranks through launcher/'s process group, which sets the torchrun variables)
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "backend/cpu_backend.h"
#include "comm/gloo_communicator.h"
#include "comm/rank_env.h"
#include "comm/store.h"
#include "model/safetensors.h"
#include "parallel/linear.h"
#include "parallel/replicated_weight.h"
#include "parallel/vocab_parallel.h"
#include "tests/parallel/tp_case.h"

namespace tpserve::testing {
namespace {

std::vector<float> ToHost(Backend& backend, const Tensor& t) {
  std::vector<float> out(static_cast<size_t>(t.numel()));
  backend.CopyToHostF32(t, out.data());
  return out;
}

// One rank's layers of the case over the input x, each output saved under
// its name (parallel_tp_test.cc compares them with the unsharded reference).
class RankLayers {
 public:
  RankLayers(const ShardContext& ctx, Backend& be, Communicator& cm, Buffer x)
      : ctx_(ctx), be_(be), cm_(cm), x_(std::move(x)) {}

  // Embedding of the step's token ids (the step begins here).
  absl::Status Embedding(const TpCase& tc, uint32_t seed) {
    const StepBatch step = OneSequenceStep(CaseTokenIds(tc, seed), 16);
    if (absl::Status s = be_.BeginStep(step.view(), 1, 16, ctx_.config.max_position_embeddings); !s.ok()) return s;
    absl::StatusOr<VocabParallelEmbedding> emb = VocabParallelEmbedding::Load(ctx_, be_);
    if (!emb.ok()) return emb.status();
    emb_.emplace(*std::move(emb));
    Buffer embed = be_.Allocate(DType::kF32, {kTokens, ctx_.config.hidden_size});
    if (absl::Status s = emb_->Forward(be_, cm_, embed.tensor()); !s.ok()) return s;
    Save("embed", embed);
    return absl::OkStatus();
  }

  // Attention projections: qkv, then o_proj over this rank's q heads.
  absl::Status Attention() {
    const int64_t T = kTokens;
    absl::StatusOr<QKVParallelLinear> qkv_layer = QKVParallelLinear::Load(ctx_, kAttn, be_);
    if (!qkv_layer.ok()) return qkv_layer.status();
    const AttentionShape& as = qkv_layer->shape();
    Buffer qkv = be_.Allocate(DType::kF32, {T, as.qkv_width()});
    qkv_layer->Forward(be_, x_, qkv.tensor());
    Save("qkv", qkv);
    const int64_t qw = int64_t{as.num_heads} * as.head_dim;
    std::vector<float> qkv_host = ToHost(be_, qkv), q_host;
    for (int64_t t = 0; t < T; ++t) {
      q_host.insert(q_host.end(), qkv_host.begin() + t * as.qkv_width(), qkv_host.begin() + t * as.qkv_width() + qw);
    }
    Buffer q = be_.Allocate(DType::kF32, {T, qw});
    be_.CopyFromHost(q_host.data(), DType::kF32, q.tensor());
    absl::StatusOr<RowParallelLinear> o_proj = RowParallelLinear::Load(ctx_, std::string(kAttn) + ".o_proj", be_);
    if (!o_proj.ok()) return o_proj.status();
    Buffer attn_out = be_.Allocate(DType::kF32, {T, ctx_.config.hidden_size});
    if (absl::Status s = o_proj->Forward(be_, cm_, q, attn_out.tensor()); !s.ok()) return s;
    Save("attn_out", attn_out);
    return absl::OkStatus();
  }

  // The MLP: gate alone, gate_up merged, SiLU-mul, down.
  absl::Status Mlp() {
    const int64_t T = kTokens;
    const std::string mlp = "model.layers.0.mlp";
    absl::StatusOr<ColumnParallelLinear> gate_layer = ColumnParallelLinear::Load(ctx_, mlp + ".gate_proj", be_);
    if (!gate_layer.ok()) return gate_layer.status();
    Buffer gate = be_.Allocate(DType::kF32, {T, gate_layer->out_features()});
    gate_layer->Forward(be_, x_, gate.tensor());
    Save("gate", gate);
    absl::StatusOr<MergedColumnParallelLinear> gate_up_layer = MergedColumnParallelLinear::Load(ctx_, mlp, be_);
    if (!gate_up_layer.ok()) return gate_up_layer.status();
    const int64_t f = gate_up_layer->local_intermediate();
    Buffer gate_up = be_.Allocate(DType::kF32, {T, 2 * f});
    gate_up_layer->Forward(be_, x_, gate_up.tensor());
    Save("gate_up", gate_up);
    Buffer act = be_.Allocate(DType::kF32, {T, f});
    be_.SiluMul(gate_up, act.tensor());
    absl::StatusOr<RowParallelLinear> down = RowParallelLinear::Load(ctx_, mlp + ".down_proj", be_);
    if (!down.ok()) return down.status();
    Buffer mlp_out = be_.Allocate(DType::kF32, {T, ctx_.config.hidden_size});
    if (absl::Status s = down->Forward(be_, cm_, act, mlp_out.tensor()); !s.ok()) return s;
    Save("mlp_out", mlp_out);
    return absl::OkStatus();
  }

  // The LM head on the first S rows of x (a workspace larger than S on
  // purpose; rank 0 saves the logits) and the replicated norm weights.
  absl::Status HeadAndNorms() {
    const ModelConfig& c = ctx_.config;
    absl::StatusOr<ParallelLMHead> head = ParallelLMHead::Load(ctx_, be_, *emb_);
    if (!head.ok()) return head.status();
    LmHeadWorkspace ws = head->AllocateWorkspace(be_, kSeqs + 2, ctx_.rank, ctx_.world_size);
    std::vector<float> logits(ctx_.rank == 0 ? static_cast<size_t>(kSeqs * c.vocab_size) : 0);
    if (absl::Status s = head->Forward(be_, cm_, x_.tensor().Rows(0, kSeqs), ws, logits); !s.ok()) return s;
    if (ctx_.rank == 0) out_.AddF32("logits", DType::kF32, {kSeqs, c.vocab_size}, logits);
    absl::StatusOr<ReplicatedWeight> norm = ReplicatedWeight::Load(ctx_, "model.norm.weight", be_);
    if (!norm.ok()) return norm.status();
    Save("norm", *norm);
    if (c.qk_norm) {
      absl::StatusOr<ReplicatedWeight> qn = ReplicatedWeight::Load(ctx_, std::string(kAttn) + ".q_norm.weight", be_);
      if (!qn.ok()) return qn.status();
      Save("q_norm", *qn);
    }
    return absl::OkStatus();
  }

  absl::Status Write(const std::filesystem::path& path) { return out_.Write(path); }

 private:
  static constexpr const char* kAttn = "model.layers.0.self_attn";
  void Save(const std::string& name, const Tensor& t) {
    std::vector<int64_t> shape(t.shape.begin(), t.shape.begin() + t.ndim);
    out_.AddF32(name, DType::kF32, shape, ToHost(be_, t));
  }

  const ShardContext& ctx_;
  Backend& be_;
  Communicator& cm_;
  Buffer x_;
  std::optional<VocabParallelEmbedding> emb_;
  SafetensorsWriter out_;
};

absl::Status Run(int argc, char** argv) {
  if (argc != 6) return absl::InvalidArgumentError("usage: parallel_rank CASE DIR STORE OUT SEED");
  absl::StatusOr<TpCase> tc = CaseByName(argv[1]);
  if (!tc.ok()) return tc.status();
  absl::StatusOr<RankEnv> env = ReadRankEnv();
  if (!env.ok()) return env.status();
  const std::filesystem::path dir = argv[2];
  const int rank = env->rank, world = env->world_size;
  const std::filesystem::path out_dir = argv[4];
  const uint32_t seed = static_cast<uint32_t>(std::strtoul(argv[5], nullptr, 10));

  absl::StatusOr<std::unique_ptr<FileStore>> store = FileStore::Open(argv[3]);
  if (!store.ok()) return store.status();
  absl::StatusOr<std::unique_ptr<Communicator>> comm = MakeGlooCommunicator(**store, rank, world);
  if (!comm.ok()) return comm.status();
  std::unique_ptr<Backend> backend = MakeCpuBackend(1);
  absl::StatusOr<std::unique_ptr<Checkpoint>> ckpt = Checkpoint::Open(dir);
  if (!ckpt.ok()) return ckpt.status();
  absl::StatusOr<std::unique_ptr<Checkpoint>> inputs = Checkpoint::Open(dir / "inputs.safetensors");
  if (!inputs.ok()) return inputs.status();
  const ShardContext ctx{**ckpt, tc->config, rank, world};

  absl::StatusOr<std::vector<float>> x_host = (*inputs)->ReadF32("x");
  if (!x_host.ok()) return x_host.status();
  Buffer x = backend->Allocate(DType::kF32, {kTokens, tc->config.hidden_size});
  backend->CopyFromHost(x_host->data(), DType::kF32, x.tensor());
  RankLayers layers(ctx, *backend, **comm, std::move(x));
  if (absl::Status s = layers.Embedding(*tc, seed); !s.ok()) return s;
  if (absl::Status s = layers.Attention(); !s.ok()) return s;
  if (absl::Status s = layers.Mlp(); !s.ok()) return s;
  if (absl::Status s = layers.HeadAndNorms(); !s.ok()) return s;
  return layers.Write(out_dir / ("rank" + std::to_string(rank) + ".safetensors"));
}

}  // namespace
}  // namespace tpserve::testing

int main(int argc, char** argv) {
  absl::Status s = tpserve::testing::Run(argc, argv);
  if (!s.ok()) {
    std::fprintf(stderr, "parallel_rank: %s\n", std::string(s.ToString()).c_str());
    return 1;
  }
  return 0;
}
