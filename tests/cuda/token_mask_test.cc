// Grammar masks on the device (CudaSampler::MaskRows, cuda/token_mask.cuh)
// against the host's ApplyTokenMask: the same bits in every masked row (bf16
// and f32, the tp = 1 and tp = 2 gather layouts, a vocabulary with padding),
// the other rows and the padding untouched; and a masked Sample gives only
// allowed tokens, the host sampler's on the host-masked logits.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "cuda/check.h"
#include "cuda/cuda_sampler.h"
#include "model/dtype.h"
#include "sampling/sampler.h"
#include "sampling/token_mask.h"
#include "tests/cuda/gpu_test_util.h"
#include "tests/testing/seed.h"

namespace tpserve::cuda {
namespace {

// `rows` x `words` random mask words, some rows nearly empty, one with a single token.
std::vector<uint32_t> RandomMasks(std::mt19937_64& rng, int rows, int vocab) {
  const int64_t per_row = TokenMaskWords(vocab);
  std::vector<uint32_t> words(static_cast<size_t>(rows * per_row));
  for (int k = 0; k < rows; ++k) {
    uint32_t* w = words.data() + k * per_row;
    if (k == 1) {  // exactly one token
      const int t = static_cast<int>(rng() % vocab);
      w[t / 32] = 1u << (t % 32);
      continue;
    }
    for (int64_t i = 0; i < per_row; ++i) w[i] = static_cast<uint32_t>(rng()) & static_cast<uint32_t>(rng() >> (k * 7 % 32));
    w[0] |= 1u;  // never empty
  }
  return words;
}

bool Allowed(const uint32_t* w, int32_t t) { return (w[t / 32] >> (t % 32)) & 1u; }

template <typename T>
void CheckMasks(int tp, int vocab, uint64_t seed) {
  SCOPED_TRACE("tp=" + std::to_string(tp) + " V=" + std::to_string(vocab) + " seed=" + std::to_string(seed) +
               (sizeof(T) == 2 ? " bf16" : " f32"));
  std::mt19937_64 rng(seed);
  const int rows = 5, shard = (vocab + tp - 1) / tp;
  std::vector<T> host(static_cast<size_t>(tp) * rows * shard);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  for (T& x : host) {
    const float f = normal(rng);
    if constexpr (sizeof(T) == 2) x = FloatToBf16(f); else x = f;
  }
  const std::vector<int32_t> masked = {0, 2, 3};
  const std::vector<uint32_t> words = RandomMasks(rng, 3, vocab);
  const int64_t per_row = TokenMaskWords(vocab);
  // The host's answer: ApplyTokenMask on each masked row, as floats, back in the layout.
  std::vector<T> want = host;
  auto at = [&](std::vector<T>& v, int s, int i) -> T& { return v[(static_cast<size_t>(i / shard) * rows + s) * shard + i % shard]; };
  for (size_t k = 0; k < masked.size(); ++k) {
    std::vector<float> row(static_cast<size_t>(vocab));
    for (int i = 0; i < vocab; ++i) {
      const T x = at(host, masked[k], i);
      if constexpr (sizeof(T) == 2) row[i] = Bf16ToFloat(x); else row[i] = x;
    }
    ApplyTokenMask(std::span<const uint32_t>(words.data() + k * per_row, per_row), row);
    for (int i = 0; i < vocab; ++i) {
      if constexpr (sizeof(T) == 2) at(want, masked[k], i) = FloatToBf16(row[i]); else at(want, masked[k], i) = row[i];
    }
  }
  void* device = nullptr;
  CUDA_CHECK(cudaMalloc(&device, host.size() * sizeof(T)));
  CUDA_CHECK(cudaMemcpy(device, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreate(&stream));
  auto sampler = CudaSampler::Create({.max_seqs = 2, .vocab_size = vocab}, stream);  // 3 rows: the buffers grow
  ASSERT_TRUE(sampler.ok()) << sampler.status();
  const Tensor gathered(device, sizeof(T) == 2 ? DType::kBF16 : DType::kF32, Device::kCuda, {tp, rows, shard});
  ASSERT_TRUE((*sampler)->MaskRows(gathered, vocab, masked, words).ok());
  CUDA_CHECK(cudaStreamSynchronize(stream));
  std::vector<T> got(host.size());
  CUDA_CHECK(cudaMemcpy(got.data(), device, got.size() * sizeof(T), cudaMemcpyDeviceToHost));
  EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(T)), 0) << "the device's masked logits differ";
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::memcmp(&got[i], &want[i], sizeof(T)) != 0) {
      ADD_FAILURE() << "first difference at element " << i;
      break;
    }
  }
  sampler->reset();
  CUDA_CHECK(cudaStreamDestroy(stream));
  CUDA_CHECK(cudaFree(device));
}

TEST(TokenMask, DeviceMasksAreTheHostBits) {
  TPSERVE_REQUIRE_GPU();
  const uint64_t seed = testing_util::TestSeed();
  for (int tp : {1, 2}) {
    for (int vocab : {37, 1031}) {
      CheckMasks<uint16_t>(tp, vocab, seed + tp * 13 + vocab);
      CheckMasks<float>(tp, vocab, seed + tp * 17 + vocab);
    }
  }
}

// Masked sampling on the device gives allowed tokens only, and the host
// sampler's tokens on the host-masked logits (greedy and sampled rows).
TEST(TokenMask, MaskedSampleMatchesHost) {
  TPSERVE_REQUIRE_GPU();
  const uint64_t seed = testing_util::TestSeed();
  SCOPED_TRACE("seed=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const int rows = 4, vocab = 1031;
  std::vector<float> logits(static_cast<size_t>(rows) * vocab);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  for (float& x : logits) x = normal(rng);
  const std::vector<uint32_t> words = RandomMasks(rng, rows, vocab);
  const int64_t per_row = TokenMaskWords(vocab);
  std::vector<float> masked_host = logits;
  for (int s = 0; s < rows; ++s) {
    ApplyTokenMask(std::span<const uint32_t>(words.data() + s * per_row, per_row),
                   std::span<float>(masked_host.data() + s * vocab, vocab));
  }
  std::vector<std::unique_ptr<SequenceSamplingState>> gpu, ref;
  const float temps[] = {0.0f, 1.0f, 0.7f, 1.0f};
  for (int s = 0; s < rows; ++s) {
    SamplingParams p;
    p.temperature = temps[s];
    if (s == 3) p.top_k = 5, p.top_p = 0.9f;
    p.seed = seed + s;
    gpu.push_back(std::make_unique<SequenceSamplingState>(p));
    ref.push_back(std::make_unique<SequenceSamplingState>(p));
  }
  std::vector<SequenceSamplingState*> gp, rp;
  for (int s = 0; s < rows; ++s) gp.push_back(gpu[s].get()), rp.push_back(ref[s].get());
  void* device = nullptr;
  CUDA_CHECK(cudaMalloc(&device, logits.size() * sizeof(float)));
  CUDA_CHECK(cudaMemcpy(device, logits.data(), logits.size() * sizeof(float), cudaMemcpyHostToDevice));
  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreate(&stream));
  auto sampler = CudaSampler::Create({.max_seqs = rows, .vocab_size = vocab}, stream);
  ASSERT_TRUE(sampler.ok()) << sampler.status();
  const Tensor gathered(device, DType::kF32, Device::kCuda, {1, rows, vocab});
  ASSERT_TRUE((*sampler)->MaskRows(gathered, vocab, std::vector<int32_t>{0, 1, 2, 3}, words).ok());
  const std::vector<SampledToken> got = (*sampler)->Sample(gathered, vocab, gp);
  const std::vector<SampledToken> want = Sample(masked_host, vocab, vocab, rp);
  for (int s = 0; s < rows; ++s) {
    EXPECT_TRUE(Allowed(words.data() + s * per_row, got[s].token)) << "row " << s << " token " << got[s].token;
    EXPECT_EQ(got[s].token, want[s].token) << "row " << s;
  }
  sampler->reset();
  CUDA_CHECK(cudaStreamDestroy(stream));
  CUDA_CHECK(cudaFree(device));
}

}  // namespace
}  // namespace tpserve::cuda
