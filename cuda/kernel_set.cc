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

absl::StatusOr<bool> ProgrammaticLaunchFromEnvironment() {
  const char* value = std::getenv(kPdlEnv);
  if (value == nullptr || *value == '\0' || absl::string_view(value) == "on") return true;
  if (absl::string_view(value) == "off") return false;
  return absl::InvalidArgumentError(absl::StrCat(kPdlEnv, "=\"", value,
                                                 "\" is not a PDL setting: use \"on\" (the default: the fast "
                                                 "kernels' programmatic dependent launch on sm_90+) or \"off\""));
}

absl::StatusOr<bool> DeterministicFromEnvironment() {
  const char* value = std::getenv(kDeterministicEnv);
  if (value == nullptr || *value == '\0' || absl::string_view(value) == "0") return false;
  if (absl::string_view(value) == "1") return true;
  return absl::InvalidArgumentError(absl::StrCat(kDeterministicEnv, "=\"", value,
                                                 "\" is not a setting: use \"1\" (batch-invariant kernels, "
                                                 "cuda/cuda_backend.h) or \"0\" (the default)"));
}

}  // namespace tpserve::cuda
