#include "tests/testing/tiny_model.h"

#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "tools/make_model/make_model.h"

namespace tpserve::testing_util {

bool MakeModel(const std::filesystem::path& dir, std::span<const std::string> args) {
  std::vector<std::string> argv{dir.string()};
  argv.insert(argv.end(), args.begin(), args.end());
  const absl::StatusOr<make_model::MakeModelOptions> options = make_model::ParseArgs(argv);
  if (!options.ok()) {
    ADD_FAILURE() << "tpserve-make-model " << absl::StrJoin(argv, " ") << ": " << options.status();
    return false;
  }
  if (const absl::Status made = make_model::MakeModel(*options); !made.ok()) {
    ADD_FAILURE() << "tpserve-make-model " << absl::StrJoin(argv, " ") << ": " << made;
    return false;
  }
  return true;
}

bool MakeModel(const std::filesystem::path& dir, std::string_view args) {
  const std::vector<std::string> split = absl::StrSplit(absl::string_view(args.data(), args.size()), ' ', absl::SkipEmpty());
  return MakeModel(dir, std::span<const std::string>(split));
}

}  // namespace tpserve::testing_util
