// Store: the rendezvous key-value store that the ranks of one communicator use
// to exchange connection details (gloo addresses, the ncclUniqueId).
//
// Transport-neutral and small on purpose: in production the coordinator
// implements it over its internal gRPC API (docs/architecture.md, "Start-up", point 2);
// tests and offline runs use FileStore (a directory shared by the ranks).
// Keys are written once; values are opaque bytes.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace tpserve {

class Store {
 public:
  virtual ~Store() = default;

  // Publishes `value` under `key` (visible to Get on every rank afterwards).
  virtual absl::Status Set(std::string_view key, std::string_view value) = 0;

  // Waits until `key` is set and returns its value; DEADLINE_EXCEEDED (naming
  // the key) when it is not set within `timeout`.
  virtual absl::StatusOr<std::string> Get(std::string_view key,
                                          std::chrono::milliseconds timeout) = 0;

  // Waits until every key is set; DEADLINE_EXCEEDED naming the missing keys.
  // The default implementation calls Get for each key within one deadline.
  virtual absl::Status Wait(const std::vector<std::string>& keys,
                            std::chrono::milliseconds timeout);
};

// A directory on a file system the ranks share (a fresh temporary directory in
// tests). Set writes "<dir>/<escaped key>" atomically (a temporary file, then
// rename), so a reader never sees a partial value. Get polls.
class FileStore : public Store {
 public:
  // Creates `dir` (and its parents) when missing; INTERNAL if that fails.
  static absl::StatusOr<std::unique_ptr<FileStore>> Open(std::string dir);

  absl::Status Set(std::string_view key, std::string_view value) override;
  absl::StatusOr<std::string> Get(std::string_view key,
                                  std::chrono::milliseconds timeout) override;

  const std::string& dir() const { return dir_; }

 private:
  explicit FileStore(std::string dir) : dir_(std::move(dir)) {}
  std::string PathFor(std::string_view key) const;

  std::string dir_;
};

// Keys of `inner` under "<prefix>/": lets several communicators (or retries)
// share one store without clashing.
class PrefixStore : public Store {
 public:
  PrefixStore(std::string prefix, Store& inner) : prefix_(std::move(prefix)), inner_(inner) {}
  absl::Status Set(std::string_view key, std::string_view value) override;
  absl::StatusOr<std::string> Get(std::string_view key,
                                  std::chrono::milliseconds timeout) override;

 private:
  std::string prefix_;
  Store& inner_;
};

}  // namespace tpserve
