#include "launcher/rank_output.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string_view>

#include "absl/strings/str_cat.h"

namespace tpserve {
namespace {

void WriteAll(int fd, std::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t n = write(fd, bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // the reader is gone: drop the output, keep the ranks running
    bytes.remove_prefix(static_cast<size_t>(n));
  }
}

absl::Status ErrnoError(const std::string& what) {
  return absl::InternalError(absl::StrCat(what, ": ", std::strerror(errno)));
}

}  // namespace

void CloseFd(int& fd) {
  if (fd >= 0) close(fd);
  fd = -1;
}

ChildStdio::~ChildStdio() {
  CloseFd(in);
  CloseFd(out);
  CloseFd(err);
}

absl::Status OpenRankStdio(const LaunchOptions& options, int rank, ChildStdio& stdio,
                           std::vector<PrefixedStream>& streams) {
  stdio.in = open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (stdio.in < 0) return ErrnoError("cannot open /dev/null for the ranks' stdin");
  int* child[2] = {&stdio.out, &stdio.err};
  for (int s = 0; s < 2; ++s) {
    if (options.output == OutputMode::kLogFiles) {
      const std::string file = absl::StrCat(options.log_dir, "/rank-", rank, s == 0 ? ".stdout" : ".stderr");
      *child[s] = open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
      if (*child[s] < 0) return ErrnoError(absl::StrCat("cannot create log file ", file, " (check --log-dir)"));
    } else if (options.output == OutputMode::kPrefix) {
      int p[2];
      if (pipe2(p, O_CLOEXEC) != 0) return ErrnoError("pipe2 for a rank's output failed");
      fcntl(p[0], F_SETFL, fcntl(p[0], F_GETFL) | O_NONBLOCK);
      *child[s] = p[1];
      streams.push_back(PrefixedStream{p[0], s + 1, LinePrefixer(absl::StrCat("[rank ", rank, "] "))});
    }
  }
  return absl::OkStatus();
}

void PumpStreams(std::vector<PrefixedStream>& streams, const std::vector<pollfd>& ready, bool drain) {
  char buf[16384];
  for (PrefixedStream& s : streams) {
    if (s.fd < 0) continue;
    bool readable = drain;
    for (const pollfd& p : ready) {
      if (p.fd == s.fd && p.revents != 0) readable = true;
    }
    if (!readable) continue;
    for (;;) {  // until EAGAIN (nothing more now) or EOF
      const ssize_t n = read(s.fd, buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n > 0) {
        WriteAll(s.target, s.prefixer.Feed(std::string_view(buf, static_cast<size_t>(n))));
        continue;
      }
      const bool eof = n == 0 || errno != EAGAIN;
      if (eof || drain) WriteAll(s.target, s.prefixer.Flush());
      if (eof) CloseFd(s.fd);
      break;
    }
  }
}

}  // namespace tpserve
