#include "comm/store.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace tpserve {
namespace {

using Clock = std::chrono::steady_clock;

bool IsPlain(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '-' || c == '.';
}

// A key as one file name: plain characters stay, everything else is %XX (so "/"
// cannot escape the directory and a leading "." cannot hide the file).
std::string EscapeKey(std::string_view key) {
  std::string out = "k_";
  for (char c : key) {
    if (IsPlain(c)) {
      out += c;
    } else {
      out += absl::StrCat("%", absl::Hex(static_cast<unsigned char>(c), absl::kZeroPad2));
    }
  }
  return out;
}

}  // namespace

absl::Status Store::Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  std::vector<std::string> missing;
  for (const std::string& key : keys) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (!missing.empty() || left.count() < 0) left = std::chrono::milliseconds(0);
    absl::StatusOr<std::string> value = Get(key, left);
    if (value.ok()) continue;
    if (!absl::IsDeadlineExceeded(value.status())) return value.status();
    missing.push_back(key);
  }
  if (missing.empty()) return absl::OkStatus();
  return absl::DeadlineExceededError(
      absl::StrCat("rendezvous store: keys [", absl::StrJoin(missing, ", "), "] were not set within ",
                   timeout.count(), " ms (the ranks that write them did not arrive)"));
}

absl::StatusOr<std::unique_ptr<FileStore>> FileStore::Open(std::string dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec || !std::filesystem::is_directory(dir)) {
    return absl::InternalError(absl::StrCat("FileStore: cannot create directory '", dir,
                                            "': ", ec.message(),
                                            "; give a writable directory that all ranks share"));
  }
  return std::unique_ptr<FileStore>(new FileStore(std::move(dir)));
}

std::string FileStore::PathFor(std::string_view key) const {
  return absl::StrCat(dir_, "/", EscapeKey(key));
}

absl::Status FileStore::Set(std::string_view key, std::string_view value) {
  static std::atomic<uint64_t> counter{0};
  const std::string path = PathFor(key);
  const std::string tmp =
      absl::StrCat(dir_, "/.tmp.", getpid(), ".", counter.fetch_add(1), ".", EscapeKey(key));
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    return absl::InternalError(absl::StrCat("FileStore: cannot create '", tmp,
                                            "': ", std::strerror(errno)));
  }
  size_t done = 0;
  while (done < value.size()) {
    ssize_t n = ::write(fd, value.data() + done, value.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      std::string err = std::strerror(errno);
      ::close(fd);
      ::unlink(tmp.c_str());
      return absl::InternalError(absl::StrCat("FileStore: writing '", tmp, "' failed: ", err));
    }
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    std::string err = std::strerror(errno);
    ::unlink(tmp.c_str());
    return absl::InternalError(
        absl::StrCat("FileStore: renaming '", tmp, "' to '", path, "' failed: ", err));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> FileStore::Get(std::string_view key,
                                           std::chrono::milliseconds timeout) {
  const std::string path = PathFor(key);
  const auto deadline = Clock::now() + timeout;
  auto pause = std::chrono::milliseconds(1);
  while (true) {
    std::ifstream in(path, std::ios::binary);
    if (in) {
      std::ostringstream buf;
      buf << in.rdbuf();
      return buf.str();
    }
    if (Clock::now() >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("FileStore: key '", std::string(key), "' was not set in '", dir_, "' within ",
                       timeout.count(), " ms"));
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(20));
  }
}

absl::Status PrefixStore::Set(std::string_view key, std::string_view value) {
  return inner_.Set(absl::StrCat(prefix_, "/", std::string(key)), value);
}

absl::StatusOr<std::string> PrefixStore::Get(std::string_view key,
                                             std::chrono::milliseconds timeout) {
  return inner_.Get(absl::StrCat(prefix_, "/", std::string(key)), timeout);
}

}  // namespace tpserve
