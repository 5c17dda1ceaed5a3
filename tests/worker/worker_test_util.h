// Helpers shared by the worker tests: temporary folders, running the tools,
// comparing logits. Generated models: MakeModel (tests/testing/tiny_model.h).
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "tests/testing/tiny_model.h"

namespace tpserve::testing_util {

// A fresh directory under the test's temporary folder, removed by the destructor.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

// The build's tools.
std::string GenerateTool();  // tpserve-generate

// Runs `command` through /bin/sh; returns its exit status and puts stdout in *out
// (stderr goes to the test's stderr).
int RunCommand(const std::string& command, std::string* out = nullptr);

// max |a - b| / max |b|: the relative error the tensor-parallel tests bound.
double RelativeError(std::span<const float> a, std::span<const float> b);

// An interpreter with numpy for tools/reference_forward.py, or "" (Debian's
// python3-numpy lives in /usr/bin/python3, which another python3 on PATH may shadow).
std::string PythonWithNumpy();

// Index of the largest value (first on ties).
int64_t Argmax(std::span<const float> v);

}  // namespace tpserve::testing_util
