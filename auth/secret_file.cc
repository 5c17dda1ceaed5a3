#include "auth/secret_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <openssl/crypto.h>
#include <openssl/rand.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace tpserve {

namespace {
constexpr off_t kMaxSecretFileBytes = 1 << 20;
}  // namespace

absl::StatusOr<std::string> ReadSecretFile(const std::filesystem::path& path, absl::string_view flag) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const std::string why = std::strerror(errno);
    const std::string msg = absl::StrCat(flag, ": cannot open ", path.string(), ": ", why);
    return errno == ENOENT ? absl::NotFoundError(msg) : absl::PermissionDeniedError(msg);
  }
  struct stat st {};
  std::string bytes;
  absl::Status status;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    status = absl::InvalidArgumentError(absl::StrCat(flag, ": ", path.string(), " is not a regular file"));
  } else if ((st.st_mode & 077) != 0) {
    status = absl::InvalidArgumentError(absl::StrFormat(
        "%s: %s may be read by other users (mode %04o); a secret must be private: chmod 600 %s", flag,
        path.string(), st.st_mode & 07777, path.string()));
  } else if (st.st_size > kMaxSecretFileBytes) {
    status = absl::InvalidArgumentError(
        absl::StrCat(flag, ": ", path.string(), " is ", st.st_size, " bytes; a secret file holds at most 1 MiB"));
  } else {
    bytes.resize(static_cast<size_t>(st.st_size));
    size_t done = 0;
    while (done < bytes.size()) {
      const ssize_t n = read(fd, bytes.data() + done, bytes.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        status = absl::DataLossError(absl::StrCat(flag, ": reading ", path.string(), " failed"));
        break;
      }
      done += static_cast<size_t>(n);
    }
  }
  close(fd);
  if (!status.ok()) return status;
  return bytes;
}

absl::Status WriteSecretFile(const std::filesystem::path& path, absl::string_view secret) {
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    return absl::PermissionDeniedError(absl::StrCat("cannot create ", path.string(), ": ", std::strerror(errno)));
  }
  size_t done = 0;
  while (done < secret.size()) {
    const ssize_t n = write(fd, secret.data() + done, secret.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  close(fd);
  if (done != secret.size()) return absl::DataLossError(absl::StrCat("writing ", path.string(), " failed"));
  return absl::OkStatus();
}

std::string RandomBytes(size_t size) {
  std::string bytes(size, '\0');
  if (size > 0 && RAND_bytes(reinterpret_cast<unsigned char*>(bytes.data()), static_cast<int>(size)) != 1) {
    // No entropy is a broken machine; going on with predictable secrets is worse.
    std::fprintf(stderr, "tpserve: the random generator failed (OpenSSL RAND_bytes)\n");
    std::abort();
  }
  return bytes;
}

bool ConstantTimeEquals(absl::string_view a, absl::string_view b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace tpserve
