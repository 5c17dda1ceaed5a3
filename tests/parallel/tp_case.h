// Shared by the tensor-parallel layer test (parallel_tp_test) and its per-rank
// helper (parallel_rank): the small model geometries, the random checkpoint
// they are loaded from, the inputs every rank feeds the layers, and the
// one-sequence step that the embedding reads its token ids from.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "backend/step_batch.h"
#include "model/config.h"
#include "model/dtype.h"

namespace tpserve::testing {

// Odd sizes everywhere; vocab sizes not divisible by 2 or 4.
struct TpCase {
  std::string name;
  ModelConfig config;
  DType checkpoint_dtype = DType::kF32;
  bool o_proj_bias = false;  // an o_proj.bias in the checkpoint (RowParallelLinear bias path)
};

// "llama_f32": 8 query / 2 KV heads (tp 4 > Hkv), untied, f32.
// "qwen2_bf16": q/k/v bias, o_proj bias, tied embeddings, bf16.
// "qwen3_bf16": 1 KV head (multi-query), q/k norms, untied, bf16.
std::vector<TpCase> AllCases();
absl::StatusOr<TpCase> CaseByName(const std::string& name);

inline constexpr int64_t kTokens = 7;  // T: rows of x and token ids
inline constexpr int64_t kSeqs = 3;    // S: rows of x that reach the LM head

// Writes <dir>/model.safetensors (random weights, seeded) and
// <dir>/inputs.safetensors ("x" [T, D] random) for the case.
absl::Status WriteCaseFiles(const TpCase& c, const std::filesystem::path& dir, uint32_t seed);

// T token ids covering the vocab's first, last and middle ids (seeded).
std::vector<int32_t> CaseTokenIds(const TpCase& c, uint32_t seed);

// One sequence of `ids` from position 0 in block 0 of `block_size` tokens
// (ids.size() <= block_size), nothing stored (slots -1).
StepBatch OneSequenceStep(std::span<const int32_t> ids, int32_t block_size);

}  // namespace tpserve::testing
