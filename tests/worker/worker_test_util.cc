#include "tests/worker/worker_test_util.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>

#include "gtest/gtest.h"

namespace tpserve::testing_util {

TempDir::TempDir() {
  const char* base = std::getenv("TEST_TMPDIR");
  std::string templ = std::string(base != nullptr && *base ? base : "/tmp") + "/tpserve-worker-XXXXXX";
  if (mkdtemp(templ.data()) == nullptr) {
    ADD_FAILURE() << "mkdtemp " << templ << " failed";
  }
  path_ = templ;
}

TempDir::~TempDir() {
  std::error_code ignored;
  std::filesystem::remove_all(path_, ignored);
}

std::string GenerateTool() { return std::string(TPSERVE_BINARY_DIR) + "/tools/engine_cli/tpserve-generate"; }

int RunCommand(const std::string& command, std::string* out) {
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return -1;
  std::array<char, 65536> buf;
  std::string text;
  size_t n = 0;
  while ((n = fread(buf.data(), 1, buf.size(), pipe)) > 0) text.append(buf.data(), n);
  const int status = pclose(pipe);
  if (out != nullptr) *out = std::move(text);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

double RelativeError(std::span<const float> a, std::span<const float> b) {
  if (a.size() != b.size()) return INFINITY;
  double diff = 0, scale = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, std::abs(static_cast<double>(a[i]) - b[i]));
    scale = std::max(scale, std::abs(static_cast<double>(b[i])));
  }
  return scale > 0 ? diff / scale : diff;
}

std::string PythonWithNumpy() {
  for (const char* py : {"/usr/bin/python3", "python3"}) {
    if (RunCommand(std::string(py) + " -c 'import numpy' >/dev/null 2>&1") == 0) return py;
  }
  return "";
}

int64_t Argmax(std::span<const float> v) {
  return std::max_element(v.begin(), v.end()) - v.begin();
}

}  // namespace tpserve::testing_util
