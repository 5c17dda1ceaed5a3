// libFuzzer target: ParseModelConfig on arbitrary config.json / generation_config.json text.
// Built only with -DTPSERVE_FUZZ=ON by clang (scripts/fuzz.sh), with ASan + UBSan.
// The input is config.json, then (after the first NUL byte, if any) generation_config.json.
// Besides "no crash, no UB", it checks what config.h promises: a rejection is
// InvalidArgument naming the file; an accepted config has positive shapes that the
// model code can multiply without overflow, consistent heads, an even head_dim, token
// ids inside the vocabulary, and sampling defaults that the request path
// (coordinator/request.cc) can convert to the sampler's float / int32 fields.
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string_view>

#include "absl/strings/match.h"
#include "model/config.h"
#include "tests/testing/fuzz_check.h"

namespace {

bool Positive(double x) { return std::isfinite(x) && x > 0; }

// a * b * ... is at most 2^60 (a weight's bytes, at most 8 per element, fit in int64).
bool ProductFits(std::initializer_list<int64_t> factors) {
  int64_t p = 1;
  for (int64_t f : factors) {
    if (__builtin_mul_overflow(p, f, &p)) return false;
  }
  return p <= (int64_t{1} << 60);
}

bool FitsFloat(double x) { return std::isfinite(x) && std::fabs(x) <= std::numeric_limits<float>::max(); }

void CheckAccepted(const tpserve::ModelConfig& c) {
  using tpserve::Architecture;
  TPSERVE_FUZZ_CHECK(c.model_type == (c.arch == Architecture::kLlama   ? "llama"
                                      : c.arch == Architecture::kQwen2 ? "qwen2"
                                                                       : "qwen3"));
  TPSERVE_FUZZ_CHECK(c.hidden_size > 0 && c.intermediate_size > 0 && c.num_layers > 0 && c.num_heads > 0 &&
                     c.num_kv_heads > 0 && c.head_dim > 0 && c.vocab_size > 0 && c.max_position_embeddings > 0);
  TPSERVE_FUZZ_CHECK(c.num_heads % c.num_kv_heads == 0 && c.head_dim % 2 == 0);
  // Weight sizes: embed [V, D], q_proj [H * hd, D], k/v_proj [Hkv * hd, D], MLP [F, D].
  TPSERVE_FUZZ_CHECK(ProductFits({c.vocab_size, c.hidden_size}));
  TPSERVE_FUZZ_CHECK(ProductFits({c.num_heads, c.head_dim, c.hidden_size}));
  TPSERVE_FUZZ_CHECK(ProductFits({c.intermediate_size, c.hidden_size}));
  TPSERVE_FUZZ_CHECK(Positive(c.rms_norm_eps) && Positive(c.rope_theta));
  TPSERVE_FUZZ_CHECK(c.qkv_bias == (c.arch == Architecture::kQwen2) && c.qk_norm == (c.arch == Architecture::kQwen3));
  if (c.rope_scaling.type == tpserve::RopeScaling::Type::kLlama3) {
    const tpserve::RopeScaling& r = c.rope_scaling;
    TPSERVE_FUZZ_CHECK(Positive(r.factor) && Positive(r.low_freq_factor) && Positive(r.high_freq_factor));
    TPSERVE_FUZZ_CHECK(r.high_freq_factor > r.low_freq_factor && r.original_max_position_embeddings > 0);
  }
  if (c.bos_token_id) TPSERVE_FUZZ_CHECK(*c.bos_token_id >= 0 && *c.bos_token_id < c.vocab_size);
  for (int64_t id : c.eos_token_ids) TPSERVE_FUZZ_CHECK(id >= 0 && id < c.vocab_size);
  const tpserve::GenerationDefaults& g = c.generation;
  if (g.temperature) TPSERVE_FUZZ_CHECK(FitsFloat(*g.temperature) && *g.temperature >= 0);
  if (g.top_p) TPSERVE_FUZZ_CHECK(*g.top_p > 0 && *g.top_p <= 1);
  if (g.top_k) TPSERVE_FUZZ_CHECK(*g.top_k >= 0 && *g.top_k <= std::numeric_limits<int32_t>::max());
  if (g.repetition_penalty) TPSERVE_FUZZ_CHECK(FitsFloat(*g.repetition_penalty) && *g.repetition_penalty > 0);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  const std::string_view config = input.substr(0, nul);
  const std::string_view generation = nul == std::string_view::npos ? std::string_view() : input.substr(nul + 1);
  absl::StatusOr<tpserve::ModelConfig> parsed = tpserve::ParseModelConfig(config, generation);
  if (!parsed.ok()) {
    // A rejection is InvalidArgument and starts with the file it is about.
    TPSERVE_FUZZ_CHECK(parsed.status().code() == absl::StatusCode::kInvalidArgument);
    const absl::string_view message = parsed.status().message();
    TPSERVE_FUZZ_CHECK(absl::StartsWith(message, "config.json: ") ||
                       absl::StartsWith(message, "generation_config.json: "));
    return 0;
  }
  CheckAccepted(*parsed);
  return 0;
}
