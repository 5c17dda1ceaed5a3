#include "tools/grammar/token_check.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "sampling/token_mask.h"

namespace tpserve {

TokenCheck CheckTokens(std::shared_ptr<const grammar::CompiledGrammar> grammar, int32_t vocab_size,
                       std::span<const int32_t> ids) {
  TokenCheck out;
  grammar::Matcher matcher(std::move(grammar));
  std::vector<uint32_t> mask(grammar::MaskWords(vocab_size));
  auto allowed = [&](int32_t t) { return t >= 0 && t < vocab_size && ((mask[static_cast<size_t>(t) / 32] >> (t % 32)) & 1); };
  auto fill = [&] {
    const auto start = std::chrono::steady_clock::now();
    matcher.FillMask(mask);
    out.mask_us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count());
    if (SoleAllowedToken(mask, vocab_size) >= 0) ++out.forced;
  };
  auto gave_up = [&](size_t at) {
    if (matcher.status().ok()) return false;
    out.rejected_at = static_cast<int64_t>(at);
    out.gave_up = std::string(matcher.status().message());
    return true;
  };
  for (size_t i = 0; i < ids.size(); ++i) {
    fill();
    if (gave_up(i)) return out;
    if (!allowed(ids[i]) || !matcher.Accept(ids[i])) {
      out.rejected_at = static_cast<int64_t>(i);
      return out;
    }
  }
  fill();
  if (gave_up(ids.size())) return out;
  out.accepted = matcher.IsComplete();
  if (!out.accepted) out.rejected_at = static_cast<int64_t>(ids.size());
  return out;
}

double Percentile(std::vector<double> values, double q) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const auto rank = static_cast<size_t>(std::ceil(q * static_cast<double>(values.size())));
  return values[std::min(values.size() - 1, rank == 0 ? 0 : rank - 1)];
}

}  // namespace tpserve
