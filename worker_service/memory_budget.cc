#include "worker_service/memory_budget.h"

#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"

namespace tpserve {

absl::StatusOr<uint64_t> MemAvailableBytes() {
  std::ifstream in("/proc/meminfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("MemAvailable:", 0) != 0) continue;
    std::istringstream fields(line.substr(13));
    uint64_t kb = 0;
    std::string unit;
    if (fields >> kb >> unit && unit == "kB") return kb * 1024;
    break;
  }
  return absl::UnavailableError("cannot read MemAvailable from /proc/meminfo (a Linux kernel >= 3.14 has it)");
}

absl::StatusOr<int64_t> CpuKvBlocks(const CpuKvBudget& b) {
  if (!(b.utilization > 0 && b.utilization <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("gpu_memory_utilization = ", b.utilization, " must be in (0, 1]"));
  }
  if (b.local_ranks <= 0 || b.block_bytes <= 0 || b.max_num_seqs <= 0 || b.max_model_len <= 0 ||
      b.block_size <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "CPU KV budget: local_ranks (", b.local_ranks, "), block_bytes (", b.block_bytes, "), max_num_seqs (",
        b.max_num_seqs, "), max_model_len (", b.max_model_len, ") and block_size (", b.block_size,
        ") must be positive"));
  }
  const double fraction = std::min(b.utilization, kMaxCpuMemoryFraction);
  const double budget = static_cast<double>(b.available_bytes) * fraction / b.local_ranks;
  const int64_t fit = static_cast<int64_t>(budget / static_cast<double>(b.block_bytes));
  const int64_t cap = b.max_num_seqs * ((b.max_model_len + b.block_size - 1) / b.block_size);
  if (fit < 1) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "not one KV block of ", b.block_bytes, " bytes fits in ", static_cast<int64_t>(budget),
        " bytes (", fraction, " of MemAvailable ", b.available_bytes, " / ", b.local_ranks,
        " local ranks); free memory or use a smaller --block-size"));
  }
  return std::min(fit, cap);
}

}  // namespace tpserve
