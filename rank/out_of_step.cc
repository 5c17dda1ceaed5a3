#include "rank/out_of_step.h"

#include "absl/strings/cord.h"

namespace tpserve {
namespace {

constexpr char kOutOfStepUrl[] = "type.tpserve/ranks_out_of_step";

}  // namespace

absl::Status MarkOutOfStep(absl::Status status) {
  if (!status.ok()) status.SetPayload(kOutOfStepUrl, absl::Cord("1"));
  return status;
}

bool IsOutOfStep(const absl::Status& status) { return status.GetPayload(kOutOfStepUrl).has_value(); }

}  // namespace tpserve
