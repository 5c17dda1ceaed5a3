// Communicator: the collectives that tensor parallelism needs between the ranks
// of one model (Megatron style: all-reduce after o_proj/down_proj and the
// vocab-parallel embedding, gather of the LM-head logits to rank 0).
//
// Implementations: gloo over TCP (gloo_communicator.h; CPU tensors, and CUDA
// tensors staged through host memory), NCCL (nccl_communicator.h; CUDA tensors
// on the compute stream), and the trivial one for world size 1 (MakeSoloCommunicator).
//
// Every rank calls the same collectives in the same order with tensors of the
// same dtype and shape. Every call returns a Status instead of hanging or
// crashing: a peer that died or never arrives is UNAVAILABLE or
// DEADLINE_EXCEEDED (naming the rank when it is known) after the timeout the
// communicator was created with; a bad argument (dtype, shape, device, root) is
// INVALID_ARGUMENT. After a transport error the communicator is broken: later
// calls fail fast with the same error; make a new one (new rendezvous) to recover.
//
// Supported dtypes: kF32 and kBF16 (bf16 sums are computed in float and rounded
// back to bf16 once per reduction step). Tensors are contiguous (backend/tensor.h).
#pragma once

#include <memory>

#include "absl/status/status.h"
#include "backend/tensor.h"

namespace tpserve {

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;        // 0 .. world_size - 1
  virtual int world_size() const = 0;  // >= 1

  // t[...] = sum over ranks of t[...] (in place; same shape on every rank).
  virtual absl::Status AllReduceSum(Tensor t) = 0;

  // in:  [...]                      (same shape on every rank)
  // out: [world_size, ...in's shape] on rank 0 (rows in rank order); ignored on
  //      other ranks (may be an empty Tensor there).
  virtual absl::Status Gather(const Tensor& in, Tensor out) = 0;

  // in:  [...]; out: [world_size, ...in's shape] on every rank, rows in rank order.
  virtual absl::Status AllGather(const Tensor& in, Tensor out) = 0;

  // t on `root` is copied into t on every other rank (in place).
  virtual absl::Status Broadcast(Tensor t, int root) = 0;

  // Returns once every rank has called Barrier (or the timeout passed).
  virtual absl::Status Barrier() = 0;

  // Whether AllReduceSum and Gather only enqueue work on the compute stream
  // (no host staging or waiting), so that a CUDA graph can capture them
  // (backend.h "CUDA graphs"): NCCL and world size 1 do; gloo does not.
  virtual bool SupportsGraphCapture() const { return false; }
};

// World size 1: AllReduceSum and Broadcast leave t as it is, Gather/AllGather
// copy `in` into `out` (on the tensors' device; CUDA tensors need a CUDA build).
std::unique_ptr<Communicator> MakeSoloCommunicator();

}  // namespace tpserve
