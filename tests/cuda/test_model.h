// A generated random-weight model in the Hugging Face layout for the GPU tests
// that run whole models (tools/make_model's library, no process started).
#pragma once

#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "absl/strings/str_split.h"
#include "tools/make_model/make_model.h"

namespace tpserve::cuda_test {

// Writes the model that `args` (tpserve-make-model's options after OUT) describe
// into <temp>/<prefix>_<pid>_<name> and returns the folder; a failure fails the
// calling test.
inline std::filesystem::path MakeTestModel(const std::string& prefix, const std::string& name,
                                           const std::string& args) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / (prefix + "_" + std::to_string(::getpid()) + "_" + name);
  std::vector<std::string> argv{dir.string()};
  for (absl::string_view a : absl::StrSplit(args, ' ', absl::SkipEmpty())) argv.emplace_back(a);
  absl::StatusOr<make_model::MakeModelOptions> options = make_model::ParseArgs(argv);
  EXPECT_TRUE(options.ok()) << options.status();
  if (options.ok()) {
    const absl::Status made = make_model::MakeModel(*options);
    EXPECT_TRUE(made.ok()) << made;
  }
  return dir;
}

}  // namespace tpserve::cuda_test
