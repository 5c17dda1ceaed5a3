#include "comm/nccl_check.h"

#include <cuda_runtime_api.h>

#include "absl/strings/str_cat.h"
#include "base/check.h"

namespace tpserve::comm_internal {
namespace {

int CurrentDevice() {
  int device = -1;
  if (cudaGetDevice(&device) != cudaSuccess) cudaGetLastError();
  return device;
}

}  // namespace

absl::Status NcclStatus(ncclResult_t result, const char* stmt, const char* file, int line,
                        ncclComm_t comm) {
  if (result == ncclSuccess) return absl::OkStatus();
  const char* last = ncclGetLastError(comm);
  std::string msg = absl::StrCat(stmt, " failed on device ", CurrentDevice(), " at ", file, ":",
                                 line, ": ", ncclGetErrorString(result));
  if (last != nullptr && *last != '\0') absl::StrAppend(&msg, " (", last, ")");
  switch (result) {
    case ncclRemoteError:
    case ncclSystemError:
      return absl::UnavailableError(absl::StrCat(
          msg, "; a peer rank died or the network failed: restart the workers"));
    case ncclInvalidArgument:
    case ncclInvalidUsage:
      return absl::InvalidArgumentError(msg);
    default:
      return absl::InternalError(msg);
  }
}

void FailNccl(ncclResult_t result, const char* stmt, const char* file, int line) {
  base::CheckFailed(file, line, stmt,
                    absl::StrCat("NCCL error on device ", CurrentDevice(), ": ", ncclGetErrorString(result)));
}

}  // namespace tpserve::comm_internal
