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
#include <string>
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
  const ModelConfig& c = tc->config;

  absl::StatusOr<std::unique_ptr<FileStore>> store = FileStore::Open(argv[3]);
  if (!store.ok()) return store.status();
  absl::StatusOr<std::unique_ptr<Communicator>> comm = MakeGlooCommunicator(**store, rank, world);
  if (!comm.ok()) return comm.status();
  std::unique_ptr<Backend> backend = MakeCpuBackend(1);
  absl::StatusOr<std::unique_ptr<Checkpoint>> ckpt = Checkpoint::Open(dir);
  if (!ckpt.ok()) return ckpt.status();
  absl::StatusOr<std::unique_ptr<Checkpoint>> inputs = Checkpoint::Open(dir / "inputs.safetensors");
  if (!inputs.ok()) return inputs.status();
  const ShardContext ctx{**ckpt, c, rank, world};
  Backend& be = *backend;
  Communicator& cm = **comm;

  const int64_t T = kTokens, S = kSeqs, D = c.hidden_size, V = c.vocab_size;
  absl::StatusOr<std::vector<float>> x_host = (*inputs)->ReadF32("x");
  if (!x_host.ok()) return x_host.status();
  Buffer x = be.Allocate(DType::kF32, {T, D});
  be.CopyFromHost(x_host->data(), DType::kF32, x.tensor());
  SafetensorsWriter out;
  auto save = [&](const std::string& name, const Tensor& t) {
    std::vector<int64_t> shape(t.shape.begin(), t.shape.begin() + t.ndim);
    out.AddF32(name, DType::kF32, shape, ToHost(be, t));
  };

  // Embedding of the step's token ids.
  const StepBatch step = OneSequenceStep(CaseTokenIds(*tc, seed), 16);
  if (absl::Status s = be.BeginStep(step.view(), 1, 16, c.max_position_embeddings); !s.ok()) return s;
  absl::StatusOr<VocabParallelEmbedding> emb = VocabParallelEmbedding::Load(ctx, be);
  if (!emb.ok()) return emb.status();
  Buffer embed = be.Allocate(DType::kF32, {T, D});
  if (absl::Status s = emb->Forward(be, cm, embed.tensor()); !s.ok()) return s;
  save("embed", embed);

  // Attention projections: qkv, then o_proj over this rank's q heads.
  const std::string attn = "model.layers.0.self_attn";
  absl::StatusOr<QKVParallelLinear> qkv_layer = QKVParallelLinear::Load(ctx, attn, be);
  if (!qkv_layer.ok()) return qkv_layer.status();
  const AttentionShape& as = qkv_layer->shape();
  Buffer qkv = be.Allocate(DType::kF32, {T, as.qkv_width()});
  qkv_layer->Forward(be, x, qkv.tensor());
  save("qkv", qkv);
  const int64_t qw = int64_t{as.num_heads} * as.head_dim;
  std::vector<float> qkv_host = ToHost(be, qkv), q_host;
  for (int64_t t = 0; t < T; ++t) {
    q_host.insert(q_host.end(), qkv_host.begin() + t * as.qkv_width(),
                  qkv_host.begin() + t * as.qkv_width() + qw);
  }
  Buffer q = be.Allocate(DType::kF32, {T, qw});
  be.CopyFromHost(q_host.data(), DType::kF32, q.tensor());
  absl::StatusOr<RowParallelLinear> o_proj = RowParallelLinear::Load(ctx, attn + ".o_proj", be);
  if (!o_proj.ok()) return o_proj.status();
  Buffer attn_out = be.Allocate(DType::kF32, {T, D});
  if (absl::Status s = o_proj->Forward(be, cm, q, attn_out.tensor()); !s.ok()) return s;
  save("attn_out", attn_out);

  // MLP.
  const std::string mlp = "model.layers.0.mlp";
  absl::StatusOr<ColumnParallelLinear> gate_layer = ColumnParallelLinear::Load(ctx, mlp + ".gate_proj", be);
  if (!gate_layer.ok()) return gate_layer.status();
  Buffer gate = be.Allocate(DType::kF32, {T, gate_layer->out_features()});
  gate_layer->Forward(be, x, gate.tensor());
  save("gate", gate);
  absl::StatusOr<MergedColumnParallelLinear> gate_up_layer = MergedColumnParallelLinear::Load(ctx, mlp, be);
  if (!gate_up_layer.ok()) return gate_up_layer.status();
  const int64_t f = gate_up_layer->local_intermediate();
  Buffer gate_up = be.Allocate(DType::kF32, {T, 2 * f});
  gate_up_layer->Forward(be, x, gate_up.tensor());
  save("gate_up", gate_up);
  Buffer act = be.Allocate(DType::kF32, {T, f});
  be.SiluMul(gate_up, act.tensor());
  absl::StatusOr<RowParallelLinear> down = RowParallelLinear::Load(ctx, mlp + ".down_proj", be);
  if (!down.ok()) return down.status();
  Buffer mlp_out = be.Allocate(DType::kF32, {T, D});
  if (absl::Status s = down->Forward(be, cm, act, mlp_out.tensor()); !s.ok()) return s;
  save("mlp_out", mlp_out);

  // LM head on the first S rows of x; a workspace larger than S on purpose.
  absl::StatusOr<ParallelLMHead> head = ParallelLMHead::Load(ctx, be, *emb);
  if (!head.ok()) return head.status();
  LmHeadWorkspace ws = head->AllocateWorkspace(be, S + 2, rank, world);
  std::vector<float> logits(rank == 0 ? static_cast<size_t>(S * V) : 0);
  if (absl::Status s = head->Forward(be, cm, x.tensor().Rows(0, S), ws, logits); !s.ok()) return s;
  if (rank == 0) out.AddF32("logits", DType::kF32, {S, V}, logits);

  absl::StatusOr<ReplicatedWeight> norm = ReplicatedWeight::Load(ctx, "model.norm.weight", be);
  if (!norm.ok()) return norm.status();
  save("norm", *norm);
  if (c.qk_norm) {
    absl::StatusOr<ReplicatedWeight> qn = ReplicatedWeight::Load(ctx, attn + ".q_norm.weight", be);
    if (!qn.ok()) return qn.status();
    save("q_norm", *qn);
  }
  return out.Write(out_dir / ("rank" + std::to_string(rank) + ".safetensors"));
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
