#include "parallel/sharding.h"

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace tpserve {
namespace {

// What a tensor is, decided by the last two components of its name.
enum class Role {
  kVocab,       // embed_tokens.weight, lm_head.weight
  kQ,           // q_proj
  kKv,          // k_proj, v_proj
  kO,           // o_proj
  kGateUp,      // gate_proj, up_proj
  kDown,        // down_proj
  kHiddenNorm,  // input_layernorm, post_attention_layernorm, model.norm
  kHeadNorm,    // q_norm, k_norm
};

struct Parsed {
  Role role;
  bool bias;  // ".bias" rather than ".weight"
};

absl::StatusOr<Parsed> Parse(std::string_view name) {
  const size_t last_dot = name.rfind('.');
  if (last_dot == std::string_view::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", std::string(name), "': not a <module>.weight/.bias std::string(name)"));
  }
  const std::string_view param = name.substr(last_dot + 1);
  const std::string_view path = name.substr(0, last_dot);
  const size_t prev_dot = path.rfind('.');
  const std::string_view module = prev_dot == std::string_view::npos ? path : path.substr(prev_dot + 1);
  const bool bias = param == "bias";
  if (!bias && param != "weight") {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor '", std::string(name), "': expected a std::string(name) ending in .weight or .bias"));
  }
  struct Entry {
    std::string_view module;
    Role role;
    bool may_have_bias;
  };
  static constexpr Entry kModules[] = {
      {"embed_tokens", Role::kVocab, false},
      {"lm_head", Role::kVocab, false},
      {"q_proj", Role::kQ, true},
      {"k_proj", Role::kKv, true},
      {"v_proj", Role::kKv, true},
      {"o_proj", Role::kO, true},
      {"gate_proj", Role::kGateUp, true},
      {"up_proj", Role::kGateUp, true},
      {"down_proj", Role::kDown, true},
      {"input_layernorm", Role::kHiddenNorm, false},
      {"post_attention_layernorm", Role::kHiddenNorm, false},
      {"norm", Role::kHiddenNorm, false},
      {"q_norm", Role::kHeadNorm, false},
      {"k_norm", Role::kHeadNorm, false},
  };
  for (const Entry& e : kModules) {
    if (module != e.module) continue;
    if (bias && !e.may_have_bias) break;
    return Parsed{e.role, bias};
  }
  return absl::InvalidArgumentError(
      absl::StrCat("tensor '", std::string(name),
                   "': no tensor-parallel sharding rule for it (known: embed_tokens, lm_head, q/k/v/o_proj, "
                   "gate/up/down_proj, input_layernorm, post_attention_layernorm, norm, q_norm, k_norm)"));
}

absl::Status CheckRank(int rank, int world_size) {
  if (world_size < 1 || rank < 0 || rank >= world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", rank, " of tp = ", world_size, ": need tp >= 1 and 0 <= rank < tp"));
  }
  return absl::OkStatus();
}

// n / tp, or InvalidArgument naming the tensor, the config field and tp.
// `subject` starts the message: "tensor 'model.layers.0.mlp.up_proj.weight'".
absl::StatusOr<int64_t> Split(std::string_view subject, int64_t n, std::string_view what, int tp) {
  if (n % tp != 0) {
    return absl::InvalidArgumentError(absl::StrCat(std::string(subject), ": ", std::string(what), " = ", n,
                                                   " does not split over tp = ", tp,
                                                   "; use a tensor-parallel size that divides ", n));
  }
  return n / tp;
}

// Range of KV heads [first, first + count) held by `rank`.
absl::StatusOr<std::pair<int64_t, int64_t>> KvHeads(std::string_view subject, int64_t hkv, int rank, int tp) {
  if (tp <= hkv) {
    absl::StatusOr<int64_t> per = Split(subject, hkv, "num_key_value_heads", tp);
    if (!per.ok()) return per.status();
    return std::pair<int64_t, int64_t>{rank * *per, *per};
  }
  if (tp % hkv != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(std::string(subject), ": tp = ", tp, " is larger than num_key_value_heads = ", hkv,
                     " but not a multiple of it, so the KV heads cannot be replicated evenly; use a tp that "
                     "divides or is a multiple of ",
                     hkv));
  }
  return std::pair<int64_t, int64_t>{rank / (tp / hkv), 1};
}

}  // namespace

std::string_view ShardKindName(ShardKind kind) {
  switch (kind) {
    case ShardKind::kReplicated:
      return "replicated";
    case ShardKind::kRows:
      return "rows";
    case ShardKind::kCols:
      return "cols";
  }
  return "?";
}

std::string ShapeToString(std::span<const int64_t> shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) absl::StrAppend(&s, i ? ", " : "", shape[i]);
  return s + "]";
}

absl::StatusOr<std::vector<int64_t>> ExpectedShape(std::string_view name, const ModelConfig& c) {
  absl::StatusOr<Parsed> p = Parse(name);
  if (!p.ok()) return p.status();
  const int64_t D = c.hidden_size, q = c.num_heads * c.head_dim, kv = c.num_kv_heads * c.head_dim;
  const int64_t F = c.intermediate_size;
  auto mat = [&](int64_t rows, int64_t cols) {
    return p->bias ? std::vector<int64_t>{rows} : std::vector<int64_t>{rows, cols};
  };
  switch (p->role) {
    case Role::kVocab:
      return std::vector<int64_t>{c.vocab_size, D};
    case Role::kQ:
      return mat(q, D);
    case Role::kKv:
      return mat(kv, D);
    case Role::kO:
      return mat(D, q);  // the bias of o_proj is [D]
    case Role::kGateUp:
      return mat(F, D);
    case Role::kDown:
      return mat(D, F);
    case Role::kHiddenNorm:
      return std::vector<int64_t>{D};
    case Role::kHeadNorm:
      return std::vector<int64_t>{c.head_dim};
  }
  return absl::InternalError("unreachable");
}

absl::StatusOr<ShardSpec> ShardFor(std::string_view name, std::span<const int64_t> full_shape, int rank,
                                   int tp, const ModelConfig& c) {
  if (absl::Status s = CheckRank(rank, tp); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", std::string(name), "': ", s.message()));
  }
  absl::StatusOr<std::vector<int64_t>> expected = ExpectedShape(name, c);
  if (!expected.ok()) return expected.status();
  if (!std::equal(full_shape.begin(), full_shape.end(), expected->begin(), expected->end())) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", std::string(name), "' has shape ", ShapeToString(full_shape),
                     " but config.json implies ", ShapeToString(*expected), " (hidden_size ", c.hidden_size,
                     ", intermediate_size ", c.intermediate_size, ", heads ", c.num_heads, ", kv heads ",
                     c.num_kv_heads, ", head_dim ", c.head_dim, ", vocab_size ", c.vocab_size,
                     "); the checkpoint and its config.json do not belong together"));
  }
  const Parsed p = *Parse(name);
  const std::string subject = absl::StrCat("tensor '", std::string(name), "'");
  const std::vector<int64_t> full(full_shape.begin(), full_shape.end());
  ShardSpec spec;
  auto rows = [&](int64_t begin, int64_t count) {
    spec.kind = ShardKind::kRows;
    spec.begin = begin;
    spec.count = count;
    spec.local_shape = full;
    spec.local_shape[0] = count;
  };
  auto cols = [&](int64_t begin, int64_t count) {
    spec.kind = ShardKind::kCols;
    spec.begin = begin;
    spec.count = count;
    spec.local_shape = {full[0], count};
  };
  switch (p.role) {
    case Role::kVocab: {
      const int64_t vs = (c.vocab_size + tp - 1) / tp;  // ceil(V / tp)
      const int64_t start = rank * vs;
      rows(start, std::clamp<int64_t>(c.vocab_size - start, 0, vs));
      spec.local_shape[0] = vs;
      spec.vocab_start = start;
      return spec;
    }
    case Role::kQ: {
      absl::StatusOr<int64_t> heads = Split(subject, c.num_heads, "num_attention_heads", tp);
      if (!heads.ok()) return heads.status();
      rows(rank * *heads * c.head_dim, *heads * c.head_dim);
      return spec;
    }
    case Role::kKv: {
      absl::StatusOr<std::pair<int64_t, int64_t>> heads = KvHeads(subject, c.num_kv_heads, rank, tp);
      if (!heads.ok()) return heads.status();
      rows(heads->first * c.head_dim, heads->second * c.head_dim);
      return spec;
    }
    case Role::kO:
    case Role::kDown: {
      if (p.bias) break;  // [D]: replicated, added once
      const bool o = p.role == Role::kO;
      absl::StatusOr<int64_t> per = o ? Split(subject, c.num_heads, "num_attention_heads", tp)
                                      : Split(subject, c.intermediate_size, "intermediate_size", tp);
      if (!per.ok()) return per.status();
      const int64_t width = o ? *per * c.head_dim : *per;
      cols(rank * width, width);
      return spec;
    }
    case Role::kGateUp: {
      absl::StatusOr<int64_t> per = Split(subject, c.intermediate_size, "intermediate_size", tp);
      if (!per.ok()) return per.status();
      rows(rank * *per, *per);
      return spec;
    }
    case Role::kHiddenNorm:
    case Role::kHeadNorm:
      break;
  }
  spec.kind = ShardKind::kReplicated;
  spec.begin = 0;
  spec.count = full[0];
  spec.local_shape = full;
  return spec;
}

absl::StatusOr<LocalShape> LocalShapeFor(const ModelConfig& c, int rank, int tp) {
  if (absl::Status s = CheckRank(rank, tp); !s.ok()) return s;
  LocalShape l;
  const std::string_view who = "config.json";
  absl::StatusOr<int64_t> h = Split(who, c.num_heads, "num_attention_heads", tp);
  if (!h.ok()) return h.status();
  absl::StatusOr<std::pair<int64_t, int64_t>> kv = KvHeads(who, c.num_kv_heads, rank, tp);
  if (!kv.ok()) return kv.status();
  absl::StatusOr<int64_t> f = Split(who, c.intermediate_size, "intermediate_size", tp);
  if (!f.ok()) return f.status();
  l.num_heads = *h;
  l.num_kv_heads = kv->second;
  l.intermediate = *f;
  l.vocab_rows = (c.vocab_size + tp - 1) / tp;
  l.vocab_start = rank * l.vocab_rows;
  return l;
}

}  // namespace tpserve
