// tpserve-make-model OUT --arch llama|qwen3|qwen2 [options]: see make_model.h and --help.
#include <cstdio>
#include <string>
#include <vector>

#include "tools/make_model/make_model.h"

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  for (const std::string& a : args) {
    if (a == "--help" || a == "-h") {
      std::printf("%s", tpserve::make_model::Usage().c_str());
      return 0;
    }
  }
  absl::StatusOr<tpserve::make_model::MakeModelOptions> options = tpserve::make_model::ParseArgs(args);
  if (!options.ok()) {
    std::fprintf(stderr, "%s\n", std::string(options.status().message()).c_str());
    return 2;
  }
  if (absl::Status s = tpserve::make_model::MakeModel(*options); !s.ok()) {
    std::fprintf(stderr, "tpserve-make-model: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  return 0;
}
