#include "worker/rope.h"

#include <cmath>
#include <numbers>

#include "base/check.h"

namespace tpserve {

std::vector<double> RopeInverseFrequencies(int64_t head_dim, double theta,
                                           const RopeScaling& scaling) {
  TPSERVE_CHECK(head_dim > 0 && head_dim % 2 == 0, "RopeInverseFrequencies: head_dim ", head_dim,
                " must be even and positive");
  const int64_t half = head_dim / 2;
  std::vector<double> inv_freq(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i) {
    inv_freq[static_cast<size_t>(i)] =
        1.0 / std::pow(theta, static_cast<double>(2 * i) / static_cast<double>(head_dim));
  }
  if (scaling.type != RopeScaling::Type::kLlama3) return inv_freq;

  const double factor = scaling.factor;
  const double low = scaling.low_freq_factor;
  const double high = scaling.high_freq_factor;
  const double old_context = static_cast<double>(scaling.original_max_position_embeddings);
  const double low_freq_wavelen = old_context / low;
  const double high_freq_wavelen = old_context / high;
  for (double& f : inv_freq) {
    const double wavelen = 2.0 * std::numbers::pi / f;
    if (wavelen < high_freq_wavelen) continue;
    if (wavelen > low_freq_wavelen) {
      f = f / factor;
      continue;
    }
    const double smooth = (old_context / wavelen - low) / (high - low);
    f = (1.0 - smooth) * f / factor + smooth * f;
  }
  return inv_freq;
}

std::vector<float> BuildRopeTable(int64_t max_position, int64_t head_dim, double theta,
                                  const RopeScaling& scaling) {
  const std::vector<double> inv_freq = RopeInverseFrequencies(head_dim, theta, scaling);
  const int64_t half = head_dim / 2;
  std::vector<float> table(static_cast<size_t>(max_position * head_dim));
  for (int64_t p = 0; p < max_position; ++p) {
    float* row = table.data() + p * head_dim;
    for (int64_t i = 0; i < half; ++i) {
      const double angle = static_cast<double>(p) * inv_freq[static_cast<size_t>(i)];
      row[i] = static_cast<float>(std::cos(angle));
      row[half + i] = static_cast<float>(std::sin(angle));
    }
  }
  return table;
}

}  // namespace tpserve
