// Whether a failure leaves the tensor-parallel ranks out of step.
//
// Most failures of a rank leave every rank as it was (a bad request, a missing
// file): the rank reports the error and goes on. A failed rendezvous or
// collective does not: some ranks may have passed the point where this one
// stopped, so they can no longer agree on what comes next and the rank must
// end. Such a failure carries a payload on its status; whoever can tell marks
// it (StartRank marks a communicator that could not be made) and whoever
// decides what to do reads it (tpserve-worker's CommandHandler).
#pragma once

#include "absl/status/status.h"

namespace tpserve {

// `status` with the out-of-step mark (code and message unchanged). OK stays OK.
absl::Status MarkOutOfStep(absl::Status status);

// True when `status` carries the mark.
bool IsOutOfStep(const absl::Status& status);

}  // namespace tpserve
