// GlooStoreAdapter: lets gloo's rendezvous (gloo::rendezvous::Context::
// connectFullMesh) use a tpserve Store. gloo expects exceptions, so errors from
// the Store are thrown as gloo::IoException carrying the Store's message.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include <gloo/rendezvous/store.h>

#include "comm/store.h"

namespace tpserve::comm_internal {

class GlooStoreAdapter : public gloo::rendezvous::Store {
 public:
  // `timeout` bounds get() and wait() calls that come without their own.
  GlooStoreAdapter(tpserve::Store& store, std::chrono::milliseconds timeout)
      : store_(store), timeout_(timeout) {}

  void set(const std::string& key, const std::vector<char>& data) override;
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override;

 private:
  tpserve::Store& store_;
  std::chrono::milliseconds timeout_;
};

}  // namespace tpserve::comm_internal
