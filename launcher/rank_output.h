// Where one rank's stdin/stdout/stderr go (LaunchOptions::output), and the pump
// that copies prefixed output ("[rank R] ...") from the ranks' pipes to ours.
// Used by ProcessGroup's monitor thread.
#pragma once

#include <poll.h>

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "launcher/launch_options.h"
#include "launcher/line_prefixer.h"

namespace tpserve {

void CloseFd(int& fd);  // closes fd when >= 0 and sets it to -1

// One prefixed output stream of one rank: the read end of its pipe -> our fd.
struct PrefixedStream {
  int fd = -1;     // read end, non-blocking; -1 once at EOF
  int target = 1;  // where prefixed lines go: 1 (stdout) or 2 (stderr)
  LinePrefixer prefixer;
};

// The child's side of its stdio; every fd >= 0 here is ours to close after the spawn.
struct ChildStdio {
  int in = -1, out = -1, err = -1;  // -1 for out/err: inherit ours
  ~ChildStdio();
};

// Opens rank r's stdio: stdin from /dev/null; stdout/stderr inherited, log files
// (LOG_DIR/rank-R.stdout, .stderr) or pipes whose read ends join `streams`.
absl::Status OpenRankStdio(const LaunchOptions& options, int rank, ChildStdio& stdio,
                           std::vector<PrefixedStream>& streams);

// Reads what is available on the streams that poll marked in `ready` (every
// stream when drain) and writes whole prefixed lines; at EOF (or when draining)
// the last partial line too. A stream at EOF is closed.
void PumpStreams(std::vector<PrefixedStream>& streams, const std::vector<pollfd>& ready, bool drain);

}  // namespace tpserve
