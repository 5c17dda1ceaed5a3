// What a command-line tool says about itself when asked with --help.
//
// abseil's own --help lists only the flags of a file named after the program
// (tpserve-client.cc), so for tools whose flags live in main.cc it printed
// "No flags matched". Each tool instead calls InitToolUsage first thing in
// main: --help (also -h, -help, --helpshort) prints the tool's usage text and
// then every flag defined in the tool's own source folder, spelled as users
// type them (--max-tokens), with description and default, and exits 0.
// --helpfull stays abseil's (every flag linked in, abseil's own included).
#pragma once

#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace tpserve {

// `usage`: what the tool does, how it is called and an example or two (plain
// text, lines ending in '\n'). `flag_files`: __FILE__ of the files that define
// the tool's flags (its main.cc first, then any flag library it links, e.g.
// tools/connect/connect.h's kConnectFlagsFile); flags defined in any file of
// those folders are listed. Returns the text --help prints.
std::string ToolHelp(absl::string_view usage, const std::vector<std::string>& flag_files);

// Sets absl's program usage message to `usage` (shown with flag errors) and,
// when argv[1..] holds --help, -h, -help or --helpshort before any "--",
// prints ToolHelp(usage, flag_files) to stdout and exits 0.
void InitToolUsage(int argc, char** argv, absl::string_view usage, const std::vector<std::string>& flag_files);

}  // namespace tpserve
