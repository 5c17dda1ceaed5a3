// Prefill attention on tensor cores (FlashAttention-2 style) over the paged
// KV cache, for the prefill rows of a step (Backend::Attention).
//
// Inputs are those of the reference kernel (attention.cuh,
// PagedAttentionArgs: qkv, the paged K/V [num_blocks, block_size, Hkv, hd],
// block tables, scale, out) plus the step's query tiles (prefill_tiles.h:
// which rows of which sequence, at which first position), built on the host
// by PlanPrefillTiles. One thread block of 4 warps per (tile, query head):
//   * the tile's up to 64 query rows are loaded once into bf16 mma fragments
//     (warp w takes rows 16w .. 16w + 15);
//   * K/V tiles of 64 keys are walked through the block table (16-byte loads
//     through registers into shared memory, the next tile's loads in flight
//     during this tile's mma; keys past the tile's context are zeros);
//   * S = Q·Kᵀ and O += P·V run on mma.m16n8k16 bf16 with fp32 accumulation
//     (mma.cuh), P rounded to bf16 for the second product;
//   * the softmax is online, per row in registers (running max and sum, the
//     accumulator rescaled when the max grows);
//   * causal masking only on the diagonal key tiles (FirstMaskedKeyTile).
// Cached prefixes (pos_begin > 0) and sequences of different lengths share one
// launch: each tile carries its own. Rows of the step outside the tiles (the
// decode rows) are not touched.
//
// Head dims 64 and 128 (PrefillAttentionCovers); the backend runs the
// reference kernel for others.
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

#include "cuda/attention.cuh"
#include "cuda/prefill_tiles.h"

namespace tpserve::cuda {

// True for the head dims the kernel is instantiated for.
bool PrefillAttentionCovers(int head_dim);

// Attention of the rows the `num_tiles` tiles name (tiles: device array of
// PlanPrefillTiles with tile_rows = kPrefillTileRows). a.num_tokens bounds the
// rows. cudaErrorInvalidValue for a head dim not covered, Hq % Hkv != 0, more
// than 65535 query heads, a null tile array with tiles to run, or caches not
// 16-byte aligned (qkv and out: 4-byte).
cudaError_t LaunchPrefillAttention(const PagedAttentionArgs& a, const PrefillTile* tiles, int64_t num_tiles,
                                   cudaStream_t stream);

}  // namespace tpserve::cuda
