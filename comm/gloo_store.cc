#include "comm/gloo_store.h"

#include <gloo/common/error.h>

namespace tpserve::comm_internal {

void GlooStoreAdapter::set(const std::string& key, const std::vector<char>& data) {
  absl::Status s = store_.Set(key, std::string_view(data.data(), data.size()));
  if (!s.ok()) throw gloo::IoException(std::string(s.message()));
}

std::vector<char> GlooStoreAdapter::get(const std::string& key) {
  absl::StatusOr<std::string> value = store_.Get(key, timeout_);
  if (!value.ok()) throw gloo::IoException(std::string(value.status().message()));
  return std::vector<char>(value->begin(), value->end());
}

void GlooStoreAdapter::wait(const std::vector<std::string>& keys) { wait(keys, timeout_); }

void GlooStoreAdapter::wait(const std::vector<std::string>& keys,
                            const std::chrono::milliseconds& timeout) {
  // gloo passes kNoTimeout (zero) for "use the default".
  absl::Status s = store_.Wait(keys, timeout.count() > 0 ? timeout : timeout_);
  if (!s.ok()) throw gloo::IoException(std::string(s.message()));
}

}  // namespace tpserve::comm_internal
