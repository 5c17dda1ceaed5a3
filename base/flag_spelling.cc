#include "base/flag_spelling.h"

#include <algorithm>

#include "absl/flags/parse.h"

namespace tpserve {

std::vector<std::string> UnderscoreFlagNames(int argc, char** argv) {
  std::vector<std::string> args(argv, argv + argc);
  for (size_t i = 1; i < args.size(); ++i) {
    std::string& a = args[i];
    if (a == "--") break;
    if (a.rfind("--", 0) != 0) continue;
    // --no-enable-prefix-caching is absl's --noenable_prefix_caching (a bool
    // flag set to false).
    if (a.rfind("--no-", 0) == 0) a.erase(4, 1);
    const size_t end = std::min(a.find('='), a.size());
    std::replace(a.begin() + 2, a.begin() + static_cast<std::ptrdiff_t>(end), '-', '_');
  }
  return args;
}

std::vector<std::string> ParseFlagsWithDashes(int argc, char** argv) {
  std::vector<std::string> normalized = UnderscoreFlagNames(argc, argv);
  std::vector<char*> pointers;
  for (std::string& a : normalized) pointers.push_back(a.data());
  pointers.push_back(nullptr);
  const std::vector<char*> positional = absl::ParseCommandLine(argc, pointers.data());
  return std::vector<std::string>(positional.begin(), positional.end());
}

}  // namespace tpserve
