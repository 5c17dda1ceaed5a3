#include "parallel/vocab_parallel.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace tpserve {

constexpr std::string_view kEmbedName = "model.embed_tokens.weight";
constexpr std::string_view kLmHeadName = "lm_head.weight";

// ---- VocabParallelEmbedding ----

absl::StatusOr<VocabParallelEmbedding> VocabParallelEmbedding::Load(const ShardContext& ctx,
                                                                    Backend& backend) {
  absl::StatusOr<ShardSpec> spec = ResolveShard(ctx, kEmbedName);
  if (!spec.ok()) return spec.status();
  VocabParallelEmbedding e;
  e.weight_ = backend.Allocate(backend.compute_dtype(), spec->local_shape);
  if (absl::Status s = LoadShardInto(ctx, kEmbedName, *spec, backend, e.weight_.tensor()); !s.ok()) return s;
  e.vocab_start_ = spec->vocab_start;
  e.vocab_size_ = ctx.config.vocab_size;
  return e;
}

absl::Status VocabParallelEmbedding::Forward(Backend& backend, Communicator& comm, Tensor out) const {
  backend.Embedding(weight(), vocab_start_, out);
  if (comm.world_size() == 1) return absl::OkStatus();
  return comm.AllReduceSum(out);
}

// ---- ParallelLMHead ----

absl::StatusOr<ParallelLMHead> ParallelLMHead::Load(const ShardContext& ctx, Backend& backend,
                                                    const VocabParallelEmbedding& embedding) {
  ParallelLMHead head;
  head.vocab_size_ = ctx.config.vocab_size;
  if (ctx.config.tie_word_embeddings) {
    head.weight_ = embedding.weight();
    return head;
  }
  if (!ctx.checkpoint.Has(kLmHeadName)) {
    return absl::NotFoundError(absl::StrCat(
        "tensor '", std::string(kLmHeadName), "' is not in the checkpoint and config.json ",
        "has tie_word_embeddings false; set it to true if the model ", "reuses embed_tokens as its LM head"));
  }
  absl::StatusOr<Buffer> w = LoadShard(ctx, kLmHeadName, backend);
  if (!w.ok()) return w.status();
  head.owned_ = *std::move(w);
  head.weight_ = head.owned_.tensor();
  return head;
}

LmHeadWorkspace ParallelLMHead::AllocateWorkspace(Backend& backend, int64_t max_seqs, int rank,
                                                  int world_size) const {
  LmHeadWorkspace ws;
  ws.max_seqs = max_seqs;
  const int64_t vs = vocab_rows();
  ws.local = backend.Allocate(backend.compute_dtype(), {max_seqs, vs});
  if (rank == 0) {
    if (world_size > 1) ws.gathered = backend.Allocate(backend.compute_dtype(), {world_size, max_seqs, vs});
    ws.host.resize(static_cast<size_t>(world_size * max_seqs * vs));
  }
  return ws;
}

absl::Status ParallelLMHead::Forward(Backend& backend, Communicator& comm, const Tensor& hidden,
                                     LmHeadWorkspace& ws, std::span<float> logits) const {
  const int64_t s = hidden.dim(0);
  if (comm.rank() == 0 && static_cast<int64_t>(logits.size()) < s * vocab_size_) {
    return absl::InvalidArgumentError(absl::StrCat("ParallelLMHead: logits hold ", logits.size(),
                                                   " floats, need [", s, ", ", vocab_size_, "]"));
  }
  if (absl::Status st = Compute(backend, comm, hidden, ws); !st.ok()) return st;
  if (comm.rank() != 0) return absl::OkStatus();
  return CopyToHost(backend, ws, s, s, comm.world_size(), logits);
}

absl::Status ParallelLMHead::Compute(Backend& backend, Communicator& comm, const Tensor& hidden,
                                     LmHeadWorkspace& ws) const {
  const int64_t s = hidden.dim(0);
  if (s > ws.max_seqs) {
    return absl::InvalidArgumentError(absl::StrCat("ParallelLMHead: ", s,
                                                   " sequences but the workspace holds ", ws.max_seqs,
                                                   "; allocate it for the largest batch"));
  }
  Tensor local = ws.local.tensor().Rows(0, s);  // [S, Vs]
  backend.Linear(hidden, weight_, nullptr, local);
  const int world = comm.world_size();
  if (world == 1) return absl::OkStatus();
  Tensor gathered;  // rank 0: [tp, S, Vs]
  if (comm.rank() == 0) gathered = GatheredLogits(ws, s, world);
  return comm.Gather(local, gathered);
}

Tensor ParallelLMHead::GatheredLogits(const LmHeadWorkspace& ws, int64_t s, int world_size) const {
  const Tensor& local = ws.local.tensor();
  void* data = world_size == 1 ? local.data : ws.gathered.tensor().data;
  return Tensor(data, local.dtype, local.device, {world_size, s, vocab_rows()});
}

absl::Status ParallelLMHead::CopyToHost(Backend& backend, LmHeadWorkspace& ws, int64_t s, int64_t rows,
                                        int world_size, std::span<float> logits) const {
  const int64_t vs = vocab_rows(), v = vocab_size_;
  if (rows < 0 || rows > s || s > ws.max_seqs) {
    return absl::InvalidArgumentError(absl::StrCat("ParallelLMHead::CopyToHost: ", rows, " rows of ", s,
                                                   " sequences (workspace for ", ws.max_seqs, ")"));
  }
  if (static_cast<int64_t>(logits.size()) < rows * v) {
    return absl::InvalidArgumentError(absl::StrCat("ParallelLMHead: logits hold ", logits.size(),
                                                   " floats, need [", rows, ", ", v, "]"));
  }
  // [tp · S, Vs]: rank r's rows start at r · S; copy the first `rows` of each.
  const Tensor all = GatheredLogits(ws, s, world_size).View({world_size * s, vs});
  if (world_size == 1) {  // Vs == V
    backend.CopyToHostF32(all.Rows(0, rows), logits.data());
    return absl::OkStatus();
  }
  for (int r = 0; r < world_size; ++r) {
    backend.CopyToHostF32(all.Rows(r * s, rows), ws.host.data() + r * rows * vs);
  }
  // host[r][i][j] is the logit of vocab id r·Vs + j for sequence i; ids >= V are padding.
  for (int r = 0; r < world_size; ++r) {
    const int64_t n = std::clamp<int64_t>(v - r * vs, 0, vs);
    for (int64_t i = 0; i < rows; ++i) {
      std::memcpy(logits.data() + i * v + r * vs, ws.host.data() + (r * rows + i) * vs, n * sizeof(float));
    }
  }
  return absl::OkStatus();
}

}  // namespace tpserve
