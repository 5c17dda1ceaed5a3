#include "cuda/rank_order_all_reduce.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "cuda/rank_sum.cuh"

namespace tpserve::cuda {
namespace {

class RankOrderAllReduce final : public Communicator {
 public:
  RankOrderAllReduce(std::unique_ptr<Communicator> inner, cudaStream_t stream, void* workspace,
                     size_t workspace_bytes)
      : inner_(std::move(inner)), stream_(stream), workspace_(workspace), workspace_bytes_(workspace_bytes) {}
  ~RankOrderAllReduce() override {
    cudaStreamSynchronize(stream_);  // a sum in flight may still read the workspace
    cudaFree(workspace_);
  }

  int rank() const override { return inner_->rank(); }
  int world_size() const override { return inner_->world_size(); }

  absl::Status AllReduceSum(Tensor t) override {
    if (t.numel() == 0) return absl::OkStatus();
    if (t.device != Device::kCuda || (t.dtype != DType::kBF16 && t.dtype != DType::kF32) || t.data == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("AllReduceSum: t ", t.ShapeString(),
                                                     " must be a bf16 or f32 CUDA tensor with data"));
    }
    const size_t world = static_cast<size_t>(world_size());
    if (world * t.nbytes() > workspace_bytes_) {
      return absl::InvalidArgumentError(absl::StrCat(
          "AllReduceSum: t ", t.ShapeString(), " (", t.nbytes(), " bytes) is larger than the deterministic "
          "all-reduce's workspace of ", workspace_bytes_ / world, " bytes a rank (sized at start-up from "
          "the step's most tokens × the hidden size)"));
    }
    const int64_t dims[2] = {static_cast<int64_t>(world), t.numel()};
    Tensor gathered = Tensor::Describe(t.dtype, Device::kCuda, dims, "RankOrderAllReduce");
    gathered.data = workspace_;
    if (absl::Status s = inner_->AllGather(t.View({t.numel()}), gathered); !s.ok()) return s;
    const cudaError_t err =
        t.dtype == DType::kBF16
            ? LaunchSumRanksBf16(static_cast<const __nv_bfloat16*>(workspace_), static_cast<int>(world), t.numel(),
                                 t.ptr<__nv_bfloat16>(), stream_)
            : LaunchSumRanksF32(static_cast<const float*>(workspace_), static_cast<int>(world), t.numel(),
                                t.ptr<float>(), stream_);
    if (err != cudaSuccess) {
      return absl::InternalError(absl::StrCat("AllReduceSum: the rank-order sum's launch failed: ",
                                              cudaGetErrorString(err)));
    }
    return absl::OkStatus();
  }

  absl::Status Gather(const Tensor& in, Tensor out) override { return inner_->Gather(in, out); }
  absl::Status AllGather(const Tensor& in, Tensor out) override { return inner_->AllGather(in, out); }
  absl::Status Broadcast(Tensor t, int root) override { return inner_->Broadcast(t, root); }
  absl::Status Barrier() override { return inner_->Barrier(); }
  bool SupportsGraphCapture() const override { return inner_->SupportsGraphCapture(); }

 private:
  std::unique_ptr<Communicator> inner_;
  cudaStream_t stream_;
  void* workspace_;  // [world_size, the largest tensor] gathered copies
  size_t workspace_bytes_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Communicator>> MakeRankOrderAllReduce(std::unique_ptr<Communicator> inner,
                                                                     cudaStream_t stream, int64_t max_elements) {
  if (inner == nullptr || max_elements < 1) {
    return absl::InvalidArgumentError(absl::StrCat("MakeRankOrderAllReduce: needs a communicator and max_elements "
                                                   ">= 1 (got ", max_elements, ")"));
  }
  if (inner->world_size() == 1) return inner;
  const size_t bytes = static_cast<size_t>(inner->world_size()) * static_cast<size_t>(max_elements) * 2;
  void* workspace = nullptr;
  if (const cudaError_t err = cudaMalloc(&workspace, bytes); err != cudaSuccess) {
    (void)cudaGetLastError();
    return absl::ResourceExhaustedError(absl::StrCat("the deterministic all-reduce's workspace of ", bytes,
                                                     " bytes (", inner->world_size(), " ranks × ", max_elements,
                                                     " bf16) does not fit: ", cudaGetErrorString(err)));
  }
  return std::unique_ptr<Communicator>(
      std::make_unique<RankOrderAllReduce>(std::move(inner), stream, workspace, bytes));
}

}  // namespace tpserve::cuda
