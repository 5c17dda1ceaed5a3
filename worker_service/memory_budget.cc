#include "worker_service/memory_budget.h"

#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace tpserve {
namespace {

// The most blocks the scheduler can ever hold at once: every sequence at its longest.
int64_t MaxUsefulBlocks(int64_t max_num_seqs, int64_t max_model_len, int32_t block_size) {
  return max_num_seqs * ((max_model_len + block_size - 1) / block_size);
}

std::string GiB(double bytes) { return absl::StrFormat("%.2f GiB", bytes / (1u << 30)); }

}  // namespace

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
  const int64_t cap = MaxUsefulBlocks(b.max_num_seqs, b.max_model_len, b.block_size);
  if (fit < 1) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "not one KV block of ", b.block_bytes, " bytes fits in ", static_cast<int64_t>(budget),
        " bytes (", fraction, " of MemAvailable ", b.available_bytes, " / ", b.local_ranks,
        " local ranks); free memory or use a smaller --block-size"));
  }
  return std::min(fit, cap);
}

absl::StatusOr<int64_t> GpuKvBlocks(const GpuKvBudget& b) {
  if (!(b.utilization > 0 && b.utilization <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--gpu-memory-utilization = ", b.utilization, " must be in (0, 1]"));
  }
  if (b.total_bytes == 0 || b.free_bytes > b.total_bytes || b.ranks_per_device <= 0 || b.block_bytes <= 0 ||
      b.max_num_seqs <= 0 || b.max_model_len <= 0 || b.block_size <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "GPU KV budget: total (", b.total_bytes, ") must be positive and at least free (", b.free_bytes,
        "); ranks_per_device (", b.ranks_per_device, "), block_bytes (", b.block_bytes, "), max_num_seqs (",
        b.max_num_seqs, "), max_model_len (", b.max_model_len, ") and block_size (", b.block_size,
        ") must be positive"));
  }
  const double total = static_cast<double>(b.total_bytes);
  const double used = total - static_cast<double>(b.free_bytes);
  const double budget =
      (total * b.utilization - used) / b.ranks_per_device - static_cast<double>(b.reserve_bytes);
  const int64_t fit = budget > 0 ? static_cast<int64_t>(budget / static_cast<double>(b.block_bytes)) : 0;
  if (fit < 1) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "no room for the KV cache: ", GiB(used), " of the GPU's ", GiB(total),
        " are in use after loading the weights and profiling the largest step (", b.ranks_per_device,
        " rank(s) on this GPU), and --gpu-memory-utilization ", b.utilization, " allows ",
        GiB(total * b.utilization), " (", GiB(static_cast<double>(b.reserve_bytes)),
        " kept for CUDA graphs); one KV block needs ", b.block_bytes,
        " bytes. Raise --gpu-memory-utilization, lower --max-num-batched-tokens or --max-num-seqs, "
        "or shard over more GPUs (--tp)"));
  }
  return std::min(fit, MaxUsefulBlocks(b.max_num_seqs, b.max_model_len, b.block_size));
}

}  // namespace tpserve
