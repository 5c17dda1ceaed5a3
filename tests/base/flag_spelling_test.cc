// Flags spelled with dashes reach absl with underscores; --no-flag-name is
// absl's --noflag_name (a bool flag set to false); values, positional
// arguments and everything after "--" stay as they were.
#include "base/flag_spelling.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace tpserve {
namespace {

std::vector<std::string> Normalized(std::vector<std::string> args) {
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  return UnderscoreFlagNames(static_cast<int>(argv.size()), argv.data());
}

TEST(FlagSpelling, DashesBecomeUnderscoresInNamesOnly) {
  EXPECT_EQ(Normalized({"prog", "--max-model-len=4096", "--model", "/m-1/x-y", "pos-arg", "--max_tokens", "3"}),
            (std::vector<std::string>{"prog", "--max_model_len=4096", "--model", "/m-1/x-y", "pos-arg",
                                      "--max_tokens", "3"}));
}

TEST(FlagSpelling, NoDashIsAbslsNegatedBool) {
  EXPECT_EQ(Normalized({"prog", "--no-overlap", "--no-enable-prefix-caching", "--overlap=false"}),
            (std::vector<std::string>{"prog", "--nooverlap", "--noenable_prefix_caching", "--overlap=false"}));
}

TEST(FlagSpelling, NothingAfterTheDoubleDashChanges) {
  EXPECT_EQ(Normalized({"prog", "--nproc-per-node", "2", "--", "tpserve-worker", "--no-x", "--a-b"}),
            (std::vector<std::string>{"prog", "--nproc_per_node", "2", "--", "tpserve-worker", "--no-x", "--a-b"}));
}

}  // namespace
}  // namespace tpserve
