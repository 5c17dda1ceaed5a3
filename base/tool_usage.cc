#include "base/tool_usage.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/strip.h"

namespace tpserve {
namespace {

// The folder of a source file, without leading "/" and "./": absl reports a
// flag's file so (its normalize_filename), __FILE__ may be absolute.
absl::string_view Folder(absl::string_view path) {
  while (absl::ConsumePrefix(&path, "/") || absl::ConsumePrefix(&path, "./")) {
  }
  const size_t slash = path.rfind('/');
  return slash == absl::string_view::npos ? absl::string_view() : path.substr(0, slash);
}

// "--name-with-dashes (default: X)\n      description\n".
std::string FlagLine(const absl::CommandLineFlag& flag) {
  std::string name = absl::StrReplaceAll(flag.Name(), {{"_", "-"}});
  std::string line = absl::StrCat("  --", name);
  const std::string value = flag.DefaultValue();
  if (flag.IsOfType<bool>()) {
    absl::StrAppend(&line, value == "true" ? absl::StrCat("  (default on; --no-", name, " turns it off)")
                                          : std::string("  (default off)"));
  } else if (value.empty()) {
    absl::StrAppend(&line, "  (default: none)");
  } else {
    absl::StrAppend(&line, "  (default: ", value, ")");
  }
  absl::StrAppend(&line, "\n      ", flag.Help(), "\n");
  return line;
}

}  // namespace

std::string ToolHelp(absl::string_view usage, const std::vector<std::string>& flag_files) {
  std::vector<const absl::CommandLineFlag*> flags;
  for (const auto& [name, flag] : absl::GetAllFlags()) {
    if (flag->IsRetired()) continue;
    const std::string file = flag->Filename();
    for (const std::string& f : flag_files) {
      if (Folder(file) == Folder(f)) {
        flags.push_back(flag);
        break;
      }
    }
  }
  std::sort(flags.begin(), flags.end(),
            [](const absl::CommandLineFlag* a, const absl::CommandLineFlag* b) { return a->Name() < b->Name(); });
  std::string text(usage);
  if (!text.empty() && text.back() != '\n') text += '\n';
  if (flags.empty()) return text;
  absl::StrAppend(&text, "\nFlags (also spelled with underscores: --max_tokens):\n");
  for (const absl::CommandLineFlag* flag : flags) absl::StrAppend(&text, FlagLine(*flag));
  return text;
}

void InitToolUsage(int argc, char** argv, absl::string_view usage, const std::vector<std::string>& flag_files) {
  absl::SetProgramUsageMessage(usage);
  for (int i = 1; i < argc; ++i) {
    const absl::string_view a = argv[i];
    if (a == "--") return;
    if (a == "--help" || a == "-h" || a == "-help" || a == "--helpshort") {
      const std::string text = ToolHelp(usage, flag_files);
      std::fwrite(text.data(), 1, text.size(), stdout);
      std::fflush(stdout);
      std::exit(0);
    }
  }
}

}  // namespace tpserve
