// The RoPE cos/sin table: one row per position, shared by prefill and decode.
//
// Layout (the backend's QkNormRope reads it, backend/backend.h):
//   table: [max_position, head_dim] float32,
//   row p = [cos(p·f_0) .. cos(p·f_{hd/2-1}) | sin(p·f_0) .. sin(p·f_{hd/2-1})]
// with the Hugging Face rotate-half pairing (element i rotates with i + hd/2).
//
// Inverse frequencies f_i = theta^(-2i/hd), then, for rope_scaling "llama3",
// Llama 3.1's band scaling exactly as transformers' _compute_llama3_parameters:
//   wavelen = 2π / f
//   wavelen < original_max / high_freq_factor  → f            (high frequencies kept)
//   wavelen > original_max / low_freq_factor   → f / factor   (low frequencies scaled)
//   otherwise s = (original_max / wavelen - low) / (high - low),
//             f = (1 - s) · f / factor + s · f                 (smooth in between)
// Everything is computed in double and rounded to float once.
#pragma once

#include <cstdint>
#include <vector>

#include "model/config.h"

namespace tpserve {

// f_0 .. f_{hd/2-1} after scaling, in double. head_dim must be even and > 0.
std::vector<double> RopeInverseFrequencies(int64_t head_dim, double theta,
                                           const RopeScaling& scaling);

// The table described above for positions 0 .. max_position - 1:
// max_position * head_dim floats, row-major.
std::vector<float> BuildRopeTable(int64_t max_position, int64_t head_dim, double theta,
                                  const RopeScaling& scaling);

}  // namespace tpserve
