// A DeviceSampler for tests on the CPU backend: samples from
// Model::device_logits() (a [tp, S, Vs] f32 CPU tensor there) the way
// CudaSampler does on the GPU, with the host sampler row by row, and counts
// what it was given. It checks what the step runner and the engine hand a
// device sampler; CudaSampler itself is held to tpserve::Sample in
// tests/cuda/cuda_sampler_test.cc.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "gtest/gtest.h"
#include "sampling/device_sampler.h"
#include "sampling/sampler.h"
#include "sampling/token_mask.h"

namespace tpserve::testing_util {

class DeviceLogitsSampler final : public DeviceSampler {
 public:
  std::vector<SampledToken> Sample(const Tensor& gathered, int64_t vocab_size,
                                   std::span<SequenceSamplingState* const> seqs) override {
    ++calls;
    EXPECT_EQ(gathered.ndim, 3);
    EXPECT_EQ(gathered.dtype, DType::kF32);
    const int64_t tp = gathered.dim(0), rows = gathered.dim(1), shard = gathered.dim(2);
    EXPECT_LE(std::ssize(seqs), rows);
    std::vector<SampledToken> out(seqs.size());
    std::vector<float> row(static_cast<size_t>(vocab_size));
    for (size_t i = 0; i < seqs.size(); ++i) {
      if (seqs[i] == nullptr) {
        ++skipped;
        continue;
      }
      for (int64_t id = 0; id < vocab_size; ++id) {
        const int64_t r = id / shard, j = id % shard;
        EXPECT_LT(r, tp);
        row[static_cast<size_t>(id)] = gathered.ptr<float>()[(r * rows + static_cast<int64_t>(i)) * shard + j];
      }
      out[i] = tpserve::Sample(row, vocab_size, vocab_size, seqs.subspan(i, 1))[0];
    }
    return out;
  }
  // ApplyTokenMask on each masked row of the CPU tensor, in place.
  absl::Status MaskRows(const Tensor& gathered, int64_t vocab_size, std::span<const int32_t> rows,
                        std::span<const uint32_t> words) override {
    const int64_t tp = gathered.dim(0), num_rows = gathered.dim(1), shard = gathered.dim(2);
    const size_t per_row = static_cast<size_t>(TokenMaskWords(vocab_size));
    std::vector<float> row(static_cast<size_t>(vocab_size));
    for (size_t k = 0; k < rows.size(); ++k) {
      auto at = [&](int64_t id) -> float& {
        return gathered.ptr<float>()[((id / shard) * num_rows + rows[k]) * shard + id % shard];
      };
      for (int64_t id = 0; id < vocab_size; ++id) row[static_cast<size_t>(id)] = at(id);
      ApplyTokenMask(words.subspan(k * per_row, per_row), row);
      for (int64_t id = 0; id < vocab_size && id / shard < tp; ++id) at(id) = row[static_cast<size_t>(id)];
      ++masked_rows;
    }
    return absl::OkStatus();
  }
  int calls = 0;
  int skipped = 0;
  int masked_rows = 0;
};

}  // namespace tpserve::testing_util
