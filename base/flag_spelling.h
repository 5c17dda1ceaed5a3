// Command-line flags are spelled with dashes (--max-tokens) and with
// underscores (--max_tokens); absl knows only the underscore form.
#pragma once

#include <string>
#include <vector>

namespace tpserve {

// argv with every "--flag-name[=value]" rewritten to "--flag_name[=value]",
// and "--no-flag-name" (false for a bool flag) to absl's "--noflag_name"
// (values and positional arguments untouched; "--" ends the flags).
std::vector<std::string> UnderscoreFlagNames(int argc, char** argv);

// absl::ParseCommandLine over UnderscoreFlagNames(argc, argv): the positional
// arguments (argv[0] first), as strings.
std::vector<std::string> ParseFlagsWithDashes(int argc, char** argv);

}  // namespace tpserve
