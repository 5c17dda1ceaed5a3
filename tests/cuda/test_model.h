// A generated random-weight model in the Hugging Face layout for the GPU tests
// that run whole models (the tiny-model fixture, tests/testing/tiny_model.h).
#pragma once

#include <unistd.h>

#include <filesystem>
#include <string>

#include "tests/testing/tiny_model.h"

namespace tpserve::cuda_test {

// Writes the model that `args` (tpserve-make-model's options after OUT) describe
// into <temp>/<prefix>_<pid>_<name> and returns the folder; a failure fails the
// calling test.
inline std::filesystem::path MakeTestModel(const std::string& prefix, const std::string& name,
                                           const std::string& args) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / (prefix + "_" + std::to_string(::getpid()) + "_" + name);
  testing_util::MakeModel(dir, args);
  return dir;
}

}  // namespace tpserve::cuda_test
