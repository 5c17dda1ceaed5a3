// Which kernels the CUDA backend launches: the fast ones, or the reference
// ones they are tested against.
//
// Every fast kernel (cuda/*.cu) has a reference twin that is simpler and was
// the first to be held to the CPU backend. The reference set stays in the
// build: the tests compare every fast kernel with it, and a deployment that
// meets a fault in a fast kernel on a new GPU can serve on the reference set
// while it is fixed:
//   TPSERVE_KERNELS=reference tpserve-coordinator ... --spawn-workers
// (spawned workers inherit the environment; `tpserve-worker` reads it too).
// An op whose shape a fast kernel does not cover (for example a head_dim it
// was not instantiated for) runs its reference kernel under either set.
#pragma once

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tpserve::cuda {

enum class KernelSet {
  kFast,       // the default
  kReference,  // the simple kernels every fast one is tested against
};

inline constexpr char kKernelSetEnv[] = "TPSERVE_KERNELS";

// "fast" or "reference"; INVALID_ARGUMENT naming TPSERVE_KERNELS otherwise.
absl::StatusOr<KernelSet> ParseKernelSet(absl::string_view name);
absl::string_view KernelSetName(KernelSet set);

// TPSERVE_KERNELS, or kFast when it is unset or empty.
absl::StatusOr<KernelSet> KernelSetFromEnvironment();

// Programmatic dependent launch (cuda/simt.cuh) of the fast set's decode-path
// kernels on sm_90 and later: TPSERVE_PDL=on (the default) or off. The switch
// exists so that a GPU run can time decode both ways and a deployment can turn
// it off if a driver mishandles it; the reference set never uses it.
inline constexpr char kPdlEnv[] = "TPSERVE_PDL";

// TPSERVE_PDL: true for "on", unset or empty; false for "off";
// INVALID_ARGUMENT naming TPSERVE_PDL otherwise.
absl::StatusOr<bool> ProgrammaticLaunchFromEnvironment();

// The CUDA backend's deterministic mode (cuda/cuda_backend.h): the flag
// --deterministic of tpserve-worker and tpserve-generate, or this variable,
// which `tpserve-coordinator --deterministic` sets for the workers it spawns
// (they inherit its environment, as they do TPSERVE_KERNELS).
inline constexpr char kDeterministicEnv[] = "TPSERVE_DETERMINISTIC";

// TPSERVE_DETERMINISTIC: true for "1", false for "0", unset or empty;
// INVALID_ARGUMENT naming the variable otherwise.
absl::StatusOr<bool> DeterministicFromEnvironment();

}  // namespace tpserve::cuda
