#include "cuda/kernel_set.h"

#include <cstdlib>

#include "absl/strings/str_cat.h"

namespace tpserve::cuda {

absl::StatusOr<KernelSet> ParseKernelSet(absl::string_view name) {
  if (name == "fast") return KernelSet::kFast;
  if (name == "reference") return KernelSet::kReference;
  return absl::InvalidArgumentError(absl::StrCat(kKernelSetEnv, "=\"", name,
                                                 "\" is not a kernel set: use \"fast\" (the default) or "
                                                 "\"reference\" (the simple kernels the fast ones are tested "
                                                 "against)"));
}

absl::string_view KernelSetName(KernelSet set) { return set == KernelSet::kFast ? "fast" : "reference"; }

absl::StatusOr<KernelSet> KernelSetFromEnvironment() {
  const char* value = std::getenv(kKernelSetEnv);
  if (value == nullptr || *value == '\0') return KernelSet::kFast;
  return ParseKernelSet(value);
}

}  // namespace tpserve::cuda
