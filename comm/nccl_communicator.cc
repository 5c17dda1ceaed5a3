#include "comm/nccl_communicator.h"

#include <nccl.h>

#include <cstring>
#include <thread>

#include "absl/strings/str_cat.h"
#include "comm/collective_args.h"
#include "comm/nccl_check.h"

namespace tpserve {
namespace {

using comm_internal::CheckGathered;
using comm_internal::CheckRoot;
using comm_internal::CheckTensor;
using Clock = std::chrono::steady_clock;

constexpr char kUniqueIdKey[] = "nccl/unique_id";

ncclDataType_t NcclType(DType dtype) {
  return dtype == DType::kBF16 ? ncclBfloat16 : ncclFloat32;
}

absl::Status CudaStatus(cudaError_t err, const char* stmt) {
  if (err == cudaSuccess) return absl::OkStatus();
  cudaGetLastError();
  return absl::InternalError(absl::StrCat(stmt, " failed: ", cudaGetErrorString(err)));
}

// Evaluates an NCCL call inside a method of NcclCommunicatorImpl and returns
// its error as a Status (waiting out ncclInProgress of the non-blocking comm).
#define TPSERVE_NCCL_TRY(stmt)                                                      \
  do {                                                                              \
    if (absl::Status tpserve_s_ = Finish((stmt), #stmt, __FILE__, __LINE__);        \
        !tpserve_s_.ok())                                                           \
      return tpserve_s_;                                                            \
  } while (0)

class NcclCommunicatorImpl : public NcclCommunicator {
 public:
  NcclCommunicatorImpl(int rank, int world_size, const NcclOptions& options)
      : rank_(rank), world_size_(world_size), options_(options) {}

  ~NcclCommunicatorImpl() override {
    if (comm_ == nullptr) return;
    if (broken_.ok() && Synchronize().ok()) {
      ncclCommFinalize(comm_);
      if (WaitReady(Clock::now() + options_.timeout, "ncclCommFinalize").ok()) {
        ncclCommDestroy(comm_);
        comm_ = nullptr;
      }
    }
    if (comm_ != nullptr) ncclCommAbort(comm_);
    if (scratch_ != nullptr) cudaFree(scratch_);
  }

  absl::Status Init(Store& store) {
    if (absl::Status s = CudaStatus(cudaSetDevice(options_.device), "cudaSetDevice"); !s.ok())
      return s;
    if (absl::Status s = CudaStatus(cudaMalloc(&scratch_, sizeof(float)), "cudaMalloc(scratch)");
        !s.ok())
      return s;
    ncclUniqueId id;
    if (rank_ == 0) {
      TPSERVE_NCCL_TRY(ncclGetUniqueId(&id));
      absl::Status s = store.Set(kUniqueIdKey, std::string_view(id.internal, sizeof id.internal));
      if (!s.ok()) return s;
    } else {
      absl::StatusOr<std::string> got = store.Get(kUniqueIdKey, options_.timeout);
      if (absl::IsDeadlineExceeded(got.status())) {
        return absl::DeadlineExceededError(absl::StrCat(
            "NCCL rendezvous: rank 0 did not publish the ncclUniqueId within ",
            options_.timeout.count(), " ms (rank ", rank_, " waited): ", got.status().message()));
      }
      if (!got.ok()) return got.status();
      if (got->size() != sizeof id.internal) {
        return absl::InternalError(absl::StrCat("NCCL rendezvous: the ncclUniqueId in the store has ",
                                                got->size(), " bytes, expected ", sizeof id.internal));
      }
      std::memcpy(id.internal, got->data(), sizeof id.internal);
    }
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;  // calls return ncclInProgress; we poll with a deadline
    ncclResult_t r = ncclCommInitRankConfig(&comm_, world_size_, id, rank_, &config);
    if (r != ncclSuccess && r != ncclInProgress) {
      comm_ = nullptr;
      return comm_internal::NcclStatus(r, "ncclCommInitRankConfig", __FILE__, __LINE__, nullptr);
    }
    if (absl::Status s = WaitReady(Clock::now() + options_.timeout, "ncclCommInitRankConfig");
        !s.ok()) {
      return absl::Status(s.code(), absl::StrCat("NCCL rendezvous: not all ", world_size_,
                                                 " ranks joined (rank ", rank_, "): ", s.message()));
    }
    return absl::OkStatus();
  }

  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }

  absl::Status AllReduceSum(Tensor t) override {
    if (absl::Status s = CheckCuda(t, "AllReduceSum", "t"); !s.ok()) return s;
    if (t.numel() == 0) return absl::OkStatus();
    TPSERVE_NCCL_TRY(ncclAllReduce(t.data, t.data, t.numel(), NcclType(t.dtype), ncclSum, comm_,
                                   options_.stream));
    return absl::OkStatus();
  }

  absl::Status Gather(const Tensor& in, Tensor out) override {
    if (absl::Status s = CheckCuda(in, "Gather", "in"); !s.ok()) return s;
    if (rank_ == 0) {
      if (absl::Status s = CheckGathered(in, out, world_size_, "Gather"); !s.ok()) return s;
    }
    const size_t count = static_cast<size_t>(in.numel());
    if (count == 0) return absl::OkStatus();
    if (rank_ != 0) {
      TPSERVE_NCCL_TRY(ncclSend(in.data, count, NcclType(in.dtype), 0, comm_, options_.stream));
      return absl::OkStatus();
    }
    char* dst = static_cast<char*>(out.data);
    if (absl::Status s = CudaStatus(cudaMemcpyAsync(dst, in.data, in.nbytes(),
                                                    cudaMemcpyDeviceToDevice, options_.stream),
                                    "cudaMemcpyAsync(Gather, own row)");
        !s.ok())
      return s;
    TPSERVE_NCCL_TRY(ncclGroupStart());
    for (int r = 1; r < world_size_; ++r) {
      ncclResult_t res = ncclRecv(dst + r * in.nbytes(), count, NcclType(in.dtype), r, comm_,
                                  options_.stream);
      if (res != ncclSuccess && res != ncclInProgress) {
        ncclGroupEnd();
        return Finish(res, "ncclRecv(Gather)", __FILE__, __LINE__);
      }
    }
    TPSERVE_NCCL_TRY(ncclGroupEnd());
    return absl::OkStatus();
  }

  absl::Status AllGather(const Tensor& in, Tensor out) override {
    if (absl::Status s = CheckCuda(in, "AllGather", "in"); !s.ok()) return s;
    if (absl::Status s = CheckGathered(in, out, world_size_, "AllGather"); !s.ok()) return s;
    if (in.numel() == 0) return absl::OkStatus();
    TPSERVE_NCCL_TRY(ncclAllGather(in.data, out.data, in.numel(), NcclType(in.dtype), comm_,
                                   options_.stream));
    return absl::OkStatus();
  }

  absl::Status Broadcast(Tensor t, int root) override {
    if (absl::Status s = CheckRoot(root, world_size_, "Broadcast"); !s.ok()) return s;
    if (absl::Status s = CheckCuda(t, "Broadcast", "t"); !s.ok()) return s;
    if (t.numel() == 0) return absl::OkStatus();
    TPSERVE_NCCL_TRY(ncclBroadcast(t.data, t.data, t.numel(), NcclType(t.dtype), root, comm_,
                                   options_.stream));
    return absl::OkStatus();
  }

  absl::Status Barrier() override {
    if (!broken_.ok()) return broken_;
    TPSERVE_NCCL_TRY(ncclAllReduce(scratch_, scratch_, 1, ncclFloat32, ncclSum, comm_,
                                   options_.stream));
    return Synchronize();
  }

  absl::Status Synchronize() override {
    if (!broken_.ok()) return broken_;
    const auto deadline = Clock::now() + options_.timeout;
    while (true) {
      cudaError_t err = cudaStreamQuery(options_.stream);
      if (err != cudaSuccess && err != cudaErrorNotReady) {
        return Break(CudaStatus(err, "cudaStreamQuery (waiting for NCCL collectives)"));
      }
      ncclResult_t async = ncclSuccess;
      ncclResult_t r = ncclCommGetAsyncError(comm_, &async);
      if (r != ncclSuccess) return Break(comm_internal::NcclStatus(r, "ncclCommGetAsyncError", __FILE__, __LINE__, comm_));
      if (async != ncclSuccess && async != ncclInProgress) {
        return Break(comm_internal::NcclStatus(async, "NCCL collective (asynchronous error)",
                                               __FILE__, __LINE__, comm_));
      }
      if (err == cudaSuccess) return absl::OkStatus();
      if (Clock::now() >= deadline) {
        return Break(absl::DeadlineExceededError(absl::StrCat(
            "NCCL collectives on rank ", rank_, " did not finish within ",
            options_.timeout.count(), " ms: a peer rank died or stopped calling collectives; "
            "the communicator was aborted (restart the workers)")));
      }
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }

 private:
  absl::Status CheckCuda(const Tensor& t, const char* op, const char* name) {
    if (!broken_.ok()) return broken_;
    if (absl::Status s = CheckTensor(t, op, name); !s.ok()) return s;
    if (t.device != Device::kCuda) {
      return absl::InvalidArgumentError(absl::StrCat(
          op, ": tensor '", name, "' is on the CPU; the NCCL communicator takes CUDA tensors "
          "(use the gloo communicator for CPU tensors)"));
    }
    return absl::OkStatus();
  }

  // Polls the non-blocking communicator until it leaves ncclInProgress.
  absl::Status WaitReady(Clock::time_point deadline, const char* what) {
    while (true) {
      ncclResult_t state = ncclSuccess;
      ncclResult_t r = ncclCommGetAsyncError(comm_, &state);
      if (r != ncclSuccess) state = r;
      if (state == ncclSuccess) return absl::OkStatus();
      if (state != ncclInProgress) {
        return Break(comm_internal::NcclStatus(state, what, __FILE__, __LINE__, comm_));
      }
      if (Clock::now() >= deadline) {
        return Break(absl::DeadlineExceededError(
            absl::StrCat(what, " did not complete within ", options_.timeout.count(),
                         " ms on rank ", rank_, " (a peer rank is missing or dead); aborted")));
      }
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }

  absl::Status Finish(ncclResult_t r, const char* stmt, const char* file, int line) {
    if (r == ncclInProgress) return WaitReady(Clock::now() + options_.timeout, stmt);
    if (r == ncclSuccess) return absl::OkStatus();
    return Break(comm_internal::NcclStatus(r, stmt, file, line, comm_));
  }

  // Marks the communicator broken; aborts it so no kernel waits for a dead peer.
  absl::Status Break(absl::Status s) {
    if (broken_.ok()) broken_ = s;
    if (comm_ != nullptr) {
      ncclCommAbort(comm_);
      comm_ = nullptr;
    }
    return s;
  }

  int rank_;
  int world_size_;
  NcclOptions options_;
  ncclComm_t comm_ = nullptr;
  float* scratch_ = nullptr;  // [1] device float for Barrier
  absl::Status broken_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<NcclCommunicator>> NcclCommunicator::Create(
    Store& store, int rank, int world_size, const NcclOptions& options) {
  if (world_size < 1 || rank < 0 || rank >= world_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "NcclCommunicator: rank ", rank, " is not a rank of a world of size ", world_size));
  }
  auto comm = std::make_unique<NcclCommunicatorImpl>(rank, world_size, options);
  if (absl::Status s = comm->Init(store); !s.ok()) return s;
  return std::unique_ptr<NcclCommunicator>(std::move(comm));
}

}  // namespace tpserve
