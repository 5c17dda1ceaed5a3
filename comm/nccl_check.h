// NCCL error checks that name the statement, file, line and device.
//
// NCCL_CHECK(stmt) aborts (like CUDA_CHECK in cuda/check.h): for calls that can
// only fail through a programming error or a broken device.
// NcclStatus(...) turns an NCCL result into an absl::Status for calls whose
// failure a caller must handle (a dead peer is UNAVAILABLE, not a crash).
#pragma once

#include <nccl.h>

#include "absl/status/status.h"

namespace tpserve::comm_internal {

// "<stmt> failed on device D at file:line: <NCCL error string> (<last error>)".
// comm may be null. The code: ncclRemoteError/ncclSystemError -> UNAVAILABLE,
// ncclInvalidArgument/ncclInvalidUsage -> INVALID_ARGUMENT, else INTERNAL.
absl::Status NcclStatus(ncclResult_t result, const char* stmt, const char* file, int line,
                        ncclComm_t comm);

[[noreturn]] void FailNccl(ncclResult_t result, const char* stmt, const char* file, int line);

}  // namespace tpserve::comm_internal

#define NCCL_CHECK(stmt)                                                                    \
  do {                                                                                      \
    ncclResult_t tpserve_nccl_r_ = (stmt);                                                  \
    if (tpserve_nccl_r_ != ncclSuccess)                                                     \
      ::tpserve::comm_internal::FailNccl(tpserve_nccl_r_, #stmt, __FILE__, __LINE__);       \
  } while (0)
