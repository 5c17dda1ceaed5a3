#include "tools/bench/workload.h"

#include <cmath>
#include <fstream>
#include <limits>
#include <random>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "nlohmann/json.hpp"

namespace tpserve::bench {

absl::StatusOr<LengthRange> ParseLengthRange(absl::string_view text, absl::string_view flag) {
  std::vector<absl::string_view> parts = absl::StrSplit(text, "..");
  LengthRange r;
  bool ok = parts.size() <= 2 && absl::SimpleAtoi(parts.front(), &r.min);
  r.max = r.min;
  if (ok && parts.size() == 2) ok = absl::SimpleAtoi(parts[1], &r.max);
  if (!ok || r.min < 1 || r.max < r.min) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, ": \"", text, "\" is not N or MIN..MAX with 1 <= MIN <= MAX; e.g. ", flag, " 100..1024"));
  }
  return r;
}

std::vector<BenchPrompt> RandomPrompts(int64_t n, LengthRange input, LengthRange output, int64_t vocab_size,
                                       uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int64_t> in_len(input.min, input.max), out_len(output.min, output.max);
  std::uniform_int_distribution<uint32_t> token(0, static_cast<uint32_t>(vocab_size - 1));
  std::vector<BenchPrompt> prompts(static_cast<size_t>(n));
  for (BenchPrompt& p : prompts) {
    p.token_ids.resize(static_cast<size_t>(in_len(rng)));
    p.output_len = out_len(rng);
    for (uint32_t& id : p.token_ids) id = token(rng);
  }
  return prompts;
}

std::vector<BenchPrompt> MultiTurnPrompts(int64_t conversations, int64_t turns, int64_t shared_prefix_len,
                                          LengthRange question, LengthRange output, int64_t vocab_size,
                                          uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int64_t> q_len(question.min, question.max), out_len(output.min, output.max);
  std::uniform_int_distribution<uint32_t> token(0, static_cast<uint32_t>(vocab_size - 1));
  auto append = [&](std::vector<uint32_t>& to, int64_t n) {
    for (int64_t i = 0; i < n; ++i) to.push_back(token(rng));
  };
  std::vector<uint32_t> shared;
  append(shared, shared_prefix_len);
  std::vector<std::vector<uint32_t>> history(static_cast<size_t>(conversations), shared);
  std::vector<BenchPrompt> prompts;
  prompts.reserve(static_cast<size_t>(conversations * turns));
  for (int64_t t = 0; t < turns; ++t) {
    for (std::vector<uint32_t>& h : history) {
      append(h, q_len(rng));  // this turn's question
      BenchPrompt p;
      p.token_ids = h;
      p.output_len = out_len(rng);
      append(h, p.output_len);  // the stand-in answer the next turn resends
      prompts.push_back(std::move(p));
    }
  }
  return prompts;
}

namespace {

absl::StatusOr<BenchPrompt> ParsePromptLine(const std::string& line, const std::string& where,
                                            int64_t default_output_len) {
  const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
  if (!j.is_object()) return absl::InvalidArgumentError(absl::StrCat(where, ": not a JSON object"));
  BenchPrompt p;
  p.output_len = default_output_len;
  if (j.contains("output_len")) {
    if (!j["output_len"].is_number_integer() || j["output_len"].get<int64_t>() < 1) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": \"output_len\" must be a positive integer"));
    }
    p.output_len = j["output_len"].get<int64_t>();
  }
  if (j.contains("prompt") && j["prompt"].is_string() && !j["prompt"].get<std::string>().empty()) {
    p.text = j["prompt"].get<std::string>();
    return p;
  }
  if (j.contains("prompt_token_ids") && j["prompt_token_ids"].is_array() && !j["prompt_token_ids"].empty()) {
    for (const nlohmann::json& id : j["prompt_token_ids"]) {
      if (!id.is_number_unsigned()) {
        return absl::InvalidArgumentError(absl::StrCat(where, ": \"prompt_token_ids\" holds a non-id ", id.dump()));
      }
      p.token_ids.push_back(id.get<uint32_t>());
    }
    return p;
  }
  return absl::InvalidArgumentError(
      absl::StrCat(where, ": give a non-empty \"prompt\" string or \"prompt_token_ids\" array"));
}

}  // namespace

absl::StatusOr<std::vector<BenchPrompt>> LoadPrompts(const std::string& path, int64_t n,
                                                     int64_t default_output_len) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("--dataset: cannot read ", path));
  std::vector<BenchPrompt> file;
  std::string line;
  for (int line_no = 1; std::getline(in, line); ++line_no) {
    if (absl::StripAsciiWhitespace(line).empty()) continue;
    absl::StatusOr<BenchPrompt> p = ParsePromptLine(line, absl::StrCat(path, ":", line_no), default_output_len);
    if (!p.ok()) return p.status();
    file.push_back(*std::move(p));
  }
  if (file.empty()) return absl::InvalidArgumentError(absl::StrCat("--dataset: ", path, " holds no prompt"));
  std::vector<BenchPrompt> prompts;
  for (int64_t i = 0; i < n; ++i) prompts.push_back(file[static_cast<size_t>(i) % file.size()]);
  return prompts;
}

std::vector<double> ArrivalTimes(int64_t n, double rate, double burstiness, uint64_t seed) {
  std::vector<double> times(static_cast<size_t>(n), 0.0);
  if (std::isinf(rate)) return times;
  std::mt19937_64 rng(seed);
  std::gamma_distribution<double> gap(burstiness, 1.0 / (rate * burstiness));
  for (size_t i = 1; i < times.size(); ++i) times[i] = times[i - 1] + gap(rng);
  return times;
}

absl::StatusOr<std::vector<double>> ParseRates(absl::string_view text) {
  std::vector<double> rates;
  for (absl::string_view piece : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    piece = absl::StripAsciiWhitespace(piece);
    double r = 0;
    if (piece == "inf") {
      r = std::numeric_limits<double>::infinity();
    } else if (!absl::SimpleAtod(piece, &r) || !(r > 0) || !std::isfinite(r)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--request-rate: \"", piece, "\" is not a positive number of requests/s or inf; e.g. --request-rate 1,2,4"));
    }
    rates.push_back(r);
  }
  if (rates.empty()) return absl::InvalidArgumentError("--request-rate: give at least one rate, e.g. 4 or inf");
  return rates;
}

}  // namespace tpserve::bench
