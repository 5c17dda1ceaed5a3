// The tiny-model fixture: a small random-weight model in the Hugging Face
// layout (config.json, tokenizer, safetensors), written in-process with
// tools/make_model's library, for the tests that load or serve a whole model.
#pragma once

#include <filesystem>
#include <span>
#include <string>
#include <string_view>

namespace tpserve::testing_util {

// Writes the model that `args` describe (tpserve-make-model's options after OUT,
// e.g. {"--arch", "qwen3", "--hidden", "64", "--seed", "5"}) into `dir`. Bad
// options or a failed write fail the calling test (ADD_FAILURE) and return false.
bool MakeModel(const std::filesystem::path& dir, std::span<const std::string> args);
// The same with the options in one string, split at spaces ("--arch qwen3 --hidden 64").
bool MakeModel(const std::filesystem::path& dir, std::string_view args);

}  // namespace tpserve::testing_util
