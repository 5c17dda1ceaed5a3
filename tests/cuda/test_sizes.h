// Sizes of the CUDA op tests, which run twice: on a GPU (tests/cuda/, label
// gpu) and through the SIMT runner on the CPU (tests/cuda_emu/, label cuda-emu,
// built with TPSERVE_CUDA_EMU). The cases are the same; a size that only costs
// time on a 2-core CI machine is smaller in the emulated run, but still past
// the boundary it is there for (a block's threads, a 512-key decode partition).
#pragma once

#include <cstdint>

namespace tpserve::cuda_test {

#if defined(TPSERVE_CUDA_EMU)
inline constexpr bool kEmulated = true;
inline constexpr int64_t kLargeDim = 333;          // > 256 threads: grid-stride and block-stride loops
inline constexpr int32_t kLongContext = 700;       // > one 512-key decode partition
inline constexpr int32_t kLongPrefill = 100;       // a prefill over several pages
inline constexpr int32_t kLargeVocab = 1031;       // sampler vocabulary: > 512 threads, odd
inline constexpr int kMaxSampleRows = 19;          // sampled rows (blocks) per launch, at most
inline constexpr int kModelDecodeSteps = 8;        // whole-model decode steps after the prefill
#else
inline constexpr bool kEmulated = false;
inline constexpr int64_t kLargeDim = 4097;
inline constexpr int32_t kLongContext = 4097;
inline constexpr int32_t kLongPrefill = 1000;
inline constexpr int32_t kLargeVocab = 128256;     // Llama 3's vocabulary
inline constexpr int kMaxSampleRows = 111;
inline constexpr int kModelDecodeSteps = 32;
#endif

}  // namespace tpserve::cuda_test
