// Every tool's --help: exit 0, an example, and the tool's main flags by name
// (abseil's own --help printed "No flags matched" for tools whose flags live
// in main.cc; base/tool_usage.h).
#include <sys/wait.h>

#include <cstdio>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace tpserve {
namespace {

struct Tool {
  const char* path;
  std::vector<std::string> flags;  // as --help must spell them
};

// stdout of `path --help`, and its exit status.
std::pair<std::string, int> RunHelp(const std::string& path) {
  const std::string command = "'" + path + "' --help 2>/dev/null";
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return {"", -1};
  std::string out;
  char buffer[4096];
  for (size_t n; (n = fread(buffer, 1, sizeof(buffer), pipe)) > 0;) out.append(buffer, n);
  const int status = pclose(pipe);
  return {out, WIFEXITED(status) ? WEXITSTATUS(status) : -1};
}

class ToolHelp : public ::testing::TestWithParam<Tool> {};

TEST_P(ToolHelp, ListsItsFlagsWithAnExampleAndExitsZero) {
  const Tool& tool = GetParam();
  const auto [out, status] = RunHelp(tool.path);
  EXPECT_EQ(status, 0) << tool.path;
  EXPECT_EQ(out.find("No flags matched"), std::string::npos) << out;
  EXPECT_NE(out.find("Example"), std::string::npos) << tool.path << " --help shows no example:\n" << out;
  for (const std::string& flag : tool.flags) {
    EXPECT_NE(out.find(flag), std::string::npos) << tool.path << " --help does not name " << flag << ":\n" << out;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Tools, ToolHelp,
    ::testing::Values(
        Tool{TPSERVE_CLIENT, {"--server", "--prompt", "--prompt-ids", "--chat", "--max-tokens", "--stop",
                              "--api-key-file", "--tls-ca", "generate", "tokenize", "detokenize", "--token-ids"}},
        Tool{TPSERVE_COORDINATOR, {"--model", "--tp", "--listen", "--spawn-workers", "--worker-listen",
                                   "--max-num-seqs", "--api-key-file", "--metrics-listen"}},
        Tool{TPSERVE_WORKER, {"--coordinator", "--rank", "--world-size", "--connect-timeout"}},
        Tool{TPSERVE_GENERATE, {"--model", "--tp", "--prompt-ids", "--max-tokens"}},
        Tool{TPSERVE_TOKENIZE, {"--model"}},
        Tool{TPSERVE_MAKE_MODEL, {"--arch", "--layers", "--hidden", "--shards"}},
        Tool{TPSERVE_LAUNCH, {"--nproc-per-node", "--log-dir"}},
        Tool{TPSERVE_HTTP, {"--server", "--listen", "--api-key-file", "--max-body-bytes"}},
        Tool{TPSERVE_LOGITS, {"--prompt-ids", "--steps", "--out", "--backend"}},
        Tool{TPSERVE_GRAMMAR, {"--model", "--json-schema", "--regex", "--ebnf", "--choice", "--check", "--json"}},
        Tool{TPSERVE_BENCH, {"--server", "--num-prompts", "--request-rate", "--percentiles", "--slo", "--json",
                             "--plot", "throughput", "serve"}}),
    [](const ::testing::TestParamInfo<Tool>& info) {
      std::string name = info.param.path;
      name = name.substr(name.rfind('/') + 1);
      for (char& c : name) c = (c == '-') ? '_' : c;
      return name;
    });

}  // namespace
}  // namespace tpserve
