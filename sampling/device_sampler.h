// Sampling where the logits already are (rank 0's GPU), behind an interface the
// step runner can hold without depending on CUDA. CudaSampler
// (cuda/cuda_sampler.h) implements it.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "backend/tensor.h"
#include "sampling/sampler.h"

namespace tpserve {

class DeviceSampler {
 public:
  virtual ~DeviceSampler() = default;

  // The contract of tpserve::Sample (sampling/sampler.h) on device logits:
  //   gathered: [tp, S, Vs] on the sampler's device, the tensor-parallel LM
  //             head's gather; row s of the vocabulary is the concatenation of
  //             gathered[r, s, :] over r, truncated to vocab_size (the rest is
  //             padding and never read). tp = 1 is [1, S, V]. Not modified.
  //   seqs:     [n <= S] the sampling states of rows 0..n-1; each draws exactly
  //             one uniform from its own RNG (greedy included) and records the
  //             sampled token. nullptr: the row is not sampled (a non-final
  //             prefill chunk); rows n..S-1 are not sampled either (the padding
  //             of a CUDA-graph batch).
  // Returns [n] tokens (and log-probs when asked); token -1 for a row not sampled. The same seeded request gets
  // the same tokens as from tpserve::Sample on the same logits, whatever else is
  // in the batch (up to floating-point rounding at a boundary of the
  // cumulative distribution). Shapes that do not fit abort (a programming error).
  virtual std::vector<SampledToken> Sample(const Tensor& gathered, int64_t vocab_size,
                                           std::span<SequenceSamplingState* const> seqs) = 0;

  // Constrained output (grammar masks, sampling/token_mask.h): sets to -inf,
  // in place, every token of row rows[k] of `gathered` (the layout Sample
  // reads) whose bit is clear in mask k, as ApplyTokenMask does on the host
  // (bit for bit the same logits). Called between the forward and Sample.
  //   rows:  [m] gathered row indices, ascending
  //   words: [m, TokenMaskWords(vocab_size)] host memory, mask k at k * words_per_row
  // Default: UNIMPLEMENTED (a sampler without it cannot serve constrained output).
  virtual absl::Status MaskRows(const Tensor& gathered, int64_t vocab_size, std::span<const int32_t> rows,
                                std::span<const uint32_t> words) {
    (void)gathered, (void)vocab_size, (void)rows, (void)words;
    return absl::UnimplementedError("this device sampler cannot apply grammar masks (constrained output)");
  }

  // Optional, for CUDA graphs (worker/decode_graphs.h): prepares cheaper
  // Sample calls on logits laid out exactly as `gathered` (same address,
  // dtype and shape [tp, B, Vs]: a decode bucket's device logits, which a
  // graph replay leaves at a fixed address) and vocab_size; called once per
  // bucket at warm-up, outside any capture and between steps. Sample's
  // results do not change. Default: nothing to prepare. An error (e.g. a
  // capture the runtime refused) leaves Sample working as before.
  virtual absl::Status PrepareBatch(const Tensor& gathered, int64_t vocab_size) {
    (void)gathered;
    (void)vocab_size;
    return absl::OkStatus();
  }
};

}  // namespace tpserve
