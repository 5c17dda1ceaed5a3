// The deterministic mode's all-reduce (cuda_backend.h, "deterministic"): a
// Communicator that forwards every collective to another one, except that
// AllReduceSum gathers every rank's tensor (inner AllGather) and adds the
// ranks in rank order on this rank's GPU (cuda/rank_sum.cuh), one fp32 sum
// per element rounded once: ((t0 + t1) + t2) + ..., on every rank.
//
// Why not NCCL's all-reduce with its algorithm and protocol pinned
// (NCCL_ALGO=Ring, NCCL_PROTO=Simple): a ring starts each chunk's sum at
// another rank, and the chunks are cut by the buffer's length (and its
// channels), so an element's order of addition, and at tp ≥ 3 its bits,
// still change with the number of tokens in the step; bf16 rings also round
// after every hop. An all-gather moves bytes without arithmetic, so whatever
// algorithm NCCL picks for it, the sum here is a function of the ranks'
// values alone: the same bits in any batch, on every rank, and the same as
// the gloo communicator's AllReduceSum (comm/gloo_communicator.cc adds in
// rank order too), so the emulated tp-2 tests prove the arithmetic NCCL runs
// on a GPU. The cost: each rank receives tp − 1 whole copies instead of a
// ring's 2 (tp − 1) / tp, and one small kernel; for decode steps (a few KB
// a layer) both are latency, not bandwidth. A one-shot reduce over
// peer-mapped buffers would save the extra copies but needs CUDA IPC and a
// cross-GPU barrier of its own, and NCCL already reaches every topology.
//
// The gathered copies go to a workspace allocated once, for tensors of up to
// `max_elements` elements (f32: half as many bytes of bf16 fit), so CUDA
// graphs captured over it stay valid; a larger tensor is INVALID_ARGUMENT.
// The sum runs on `stream`, the backend's stream, which the inner
// communicator must order its work with (NCCL on the same stream; gloo
// copies on the legacy stream, which a blocking stream follows).
// SupportsGraphCapture is the inner communicator's.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "comm/communicator.h"

namespace tpserve::cuda {

// INVALID_ARGUMENT for a null inner communicator or max_elements < 1;
// RESOURCE_EXHAUSTED when the workspace (world_size × max_elements × 2 bytes)
// does not fit on the device. World size 1 needs no workspace: `inner` is
// returned as it is.
absl::StatusOr<std::unique_ptr<Communicator>> MakeRankOrderAllReduce(std::unique_ptr<Communicator> inner,
                                                                     cudaStream_t stream, int64_t max_elements);

}  // namespace tpserve::cuda
