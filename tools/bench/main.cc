// tpserve-bench: a load generator for tpserve-coordinator's public API that
// reports what vLLM's benchmark_serving reports, defined the same way
// (serving_stats.h).
//
//   tpserve-bench throughput [--num-prompts 256] [--input-len 100..1024] [--output-len 100..1024]
//   tpserve-bench serve --request-rate 1,2,4 [--max-concurrency N] [--burstiness B] [--slo ttft:MS,tpot:MS]
//
// Both take --server, --api-key-file and the TLS flags (tools/connect/connect.h),
// --json FILE (every figure and the whole configuration) and, for serve,
// --plot FILE.png. Against a speculating server each run also reports the
// acceptance rate, the acceptance length and the per-position acceptance of
// the drafts it verified meanwhile (GetServerInfo before and after the run).
// Exit 0 when the runs finished (failed requests are counted,
// not fatal), 1 when the server could not be asked, 2 for bad usage.
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "absl/strings/str_cat.h"
#include "base/flag_spelling.h"
#include "base/tool_usage.h"
#include "nlohmann/json.hpp"
#include "tools/bench/report.h"
#include "tools/bench/runner.h"
#include "tools/bench/serving_stats.h"
#include "tools/bench/workload.h"
#include "tools/connect/connect.h"
#include "tpserve/v1/generation.grpc.pb.h"

ABSL_FLAG(int64_t, num_prompts, 256, "requests per run (at most 100000)");
ABSL_FLAG(std::string, input_len, "100..1024", "random prompts: input length in tokens, N or MIN..MAX (uniform)");
ABSL_FLAG(std::string, output_len, "100..1024", "output length in tokens, N or MIN..MAX (uniform)");
ABSL_FLAG(std::string, dataset, "",
          "JSON-lines prompts instead of random ones: {\"prompt\": TEXT | \"prompt_token_ids\": [...], "
          "\"output_len\": N}");
ABSL_FLAG(int64_t, conversations, 0,
          "a shared-prefix multi-turn workload instead of independent prompts: --num-prompts requests as this many "
          "conversations, each turn resending its history (--input-len: each turn's new tokens; 0 = off)");
ABSL_FLAG(int64_t, shared_prefix_len, 0, "with --conversations: tokens of a prefix every conversation starts with");
ABSL_FLAG(uint64_t, seed, 0,
          "seed of the random prompts and the arrival times (run k of a --request-rate list uses seed + k)");
ABSL_FLAG(std::string, request_rate, "inf", "serve: requests/s of Poisson arrivals, or a list (one run each), or inf");
ABSL_FLAG(int64_t, max_concurrency, 0, "serve: most requests in flight (0 = 1024)");
ABSL_FLAG(double, burstiness, 1.0, "serve: gamma shape of the arrival gaps (1 = Poisson, < 1 burstier)");
ABSL_FLAG(std::string, percentiles, "50,90,99", "percentiles of TTFT, TPOT, ITL and E2EL to report");
ABSL_FLAG(std::string, slo, "", "goodput objectives in ms, e.g. ttft:200,tpot:50 (keys ttft, tpot, e2el)");
ABSL_FLAG(std::string, json, "", "write every figure and the configuration to this JSON file");
ABSL_FLAG(std::string, plot, "", "serve: draw TTFT, TPOT and ITL percentiles against request rate to this PNG (gnuplot)");
ABSL_FLAG(double, timeout, 600, "each request's deadline in seconds");
ABSL_FLAG(double, max_seconds, 3600, "each run's deadline in seconds: requests still open then fail");
ABSL_FLAG(bool, ignore_eos, true, "generate exactly the output length (past end-of-sequence tokens)");
ABSL_FLAG(double, temperature, 0, "sampling temperature (0 = greedy)");
ABSL_FLAG(std::string, regex, "",
          "constrain every request's output to this regular expression (structured_output; EOS is then not "
          "ignored: a request ends when its grammar does, or at the output length)");
ABSL_FLAG(std::string, json_schema, "", "constrain every request's output to the JSON Schema in this FILE (as --regex)");

namespace tpserve::bench {
namespace {

namespace v1 = tpserve::v1;

int Usage(const std::string& message) {
  std::fprintf(stderr, "tpserve-bench: %s\n", message.c_str());
  return 2;
}

// --regex / --json-schema into `options` (ignore_eos off: a constrained
// output ends with EOS, and the coordinator refuses ignore_eos with it).
absl::Status SetStructuredOutput(RunOptions& options) {
  const std::string regex = absl::GetFlag(FLAGS_regex), schema_file = absl::GetFlag(FLAGS_json_schema);
  if (regex.empty() && schema_file.empty()) return absl::OkStatus();
  if (!regex.empty() && !schema_file.empty()) return absl::InvalidArgumentError("give --regex or --json-schema, not both");
  tpserve::v1::StructuredOutput so;
  if (!regex.empty()) {
    so.set_regex(regex);
  } else {
    std::ifstream in(schema_file);
    if (!in) return absl::InvalidArgumentError(absl::StrCat("--json-schema: cannot read ", schema_file));
    std::stringstream text;
    text << in.rdbuf();
    so.set_json_schema(text.str());
  }
  options.structured_output = std::move(so);
  options.ignore_eos = false;
  return absl::OkStatus();
}

// The configuration for --json: every flag of this tool and of the connection, as given or defaulted.
nlohmann::json Configuration(const std::string& mode) {
  nlohmann::json config = {{"mode", mode}};
  for (const char* name : {"server", "num_prompts", "input_len", "output_len", "dataset", "conversations",
                           "shared_prefix_len", "seed", "request_rate",
                           "max_concurrency", "burstiness", "percentiles", "slo", "timeout", "max_seconds",
                           "ignore_eos", "temperature", "regex", "json_schema", "tls"}) {
    if (const absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name)) config[name] = flag->CurrentValue();
  }
  return config;
}

struct Workload {
  // [runs][prompts]: random prompts are drawn afresh for each run (seed + run
  // index), so a later run of a sweep does not find an earlier one's prompts
  // in the prefix cache; a --dataset file gives every run the same prompts.
  std::vector<std::vector<BenchPrompt>> prompts;
  std::vector<double> rates;
  std::vector<double> percentiles;
  Slo slo;
};

// --conversations: `n` requests as `c` conversations of n / c turns (rounded
// up; the last turn may have fewer), one draw per run; a usage error or "".
std::string MultiTurnWorkload(int64_t c, int64_t n, LengthRange in, LengthRange out, const v1::ModelInfo& model,
                              size_t runs, Workload& w) {
  const int64_t prefix = absl::GetFlag(FLAGS_shared_prefix_len);
  if (c < 1 || c > n) return "--conversations must be in [1, --num-prompts]";
  if (prefix < 0) return "--shared-prefix-len must be >= 0";
  if (!absl::GetFlag(FLAGS_dataset).empty()) return "--conversations draws its own prompts: drop --dataset";
  const int64_t turns = (n + c - 1) / c;
  if (prefix + turns * (in.max + out.max) > static_cast<int64_t>(model.max_model_len())) {
    return absl::StrCat("--shared-prefix-len ", prefix, " + ", turns, " turns x (--input-len max ", in.max,
                        " + --output-len max ", out.max, ") exceeds the server's max_model_len ",
                        model.max_model_len(), "; fewer turns (more --conversations) or shorter lengths");
  }
  for (size_t run = 0; run < runs; ++run) {
    std::vector<BenchPrompt> p =
        MultiTurnPrompts(c, turns, prefix, in, out, model.vocab_size(), absl::GetFlag(FLAGS_seed) + run);
    p.resize(static_cast<size_t>(n));
    w.prompts.push_back(std::move(p));
  }
  return "";
}

// Parses the workload flags against the server's model; a usage error or "".
std::string BuildWorkload(const std::string& mode, const v1::ModelInfo& model, Workload& w) {
  const int64_t n = absl::GetFlag(FLAGS_num_prompts);
  if (n < 1 || n > 100000) return "--num-prompts must be in [1, 100000]";
  absl::StatusOr<LengthRange> in = ParseLengthRange(absl::GetFlag(FLAGS_input_len), "--input-len");
  absl::StatusOr<LengthRange> out = ParseLengthRange(absl::GetFlag(FLAGS_output_len), "--output-len");
  absl::StatusOr<std::vector<double>> rates =
      mode == "serve" ? ParseRates(absl::GetFlag(FLAGS_request_rate)) : ParseRates("inf");
  absl::StatusOr<std::vector<double>> ps = ParsePercentiles(absl::GetFlag(FLAGS_percentiles));
  absl::StatusOr<Slo> slo = ParseSlo(absl::GetFlag(FLAGS_slo));
  for (const absl::Status& s : {in.status(), out.status(), rates.status(), ps.status(), slo.status()}) {
    if (!s.ok()) return std::string(s.message());
  }
  if (!(absl::GetFlag(FLAGS_burstiness) > 0)) return "--burstiness must be positive";
  if (!(absl::GetFlag(FLAGS_timeout) > 0) || !(absl::GetFlag(FLAGS_max_seconds) > 0)) {
    return "--timeout and --max-seconds must be positive";
  }
  if (const int64_t c = absl::GetFlag(FLAGS_conversations); c != 0) {
    if (std::string error = MultiTurnWorkload(c, n, *in, *out, model, rates->size(), w); !error.empty()) {
      return error;
    }
  } else if (absl::GetFlag(FLAGS_dataset).empty()) {
    if (in->max + out->max > static_cast<int64_t>(model.max_model_len())) {
      return absl::StrCat("--input-len max ", in->max, " + --output-len max ", out->max,
                          " exceeds the server's max_model_len ", model.max_model_len(), "; shorten them");
    }
    for (size_t run = 0; run < rates->size(); ++run) {
      w.prompts.push_back(RandomPrompts(n, *in, *out, model.vocab_size(), absl::GetFlag(FLAGS_seed) + run));
    }
  } else {
    absl::StatusOr<std::vector<BenchPrompt>> loaded = LoadPrompts(absl::GetFlag(FLAGS_dataset), n, out->max);
    if (!loaded.ok()) return std::string(loaded.status().message());
    w.prompts.assign(rates->size(), *std::move(loaded));
  }
  w.rates = *rates;
  w.percentiles = *ps;
  w.slo = *slo;
  return "";
}

// The server's speculative-decoding counters now (GetServerInfo), or none
// when it cannot be asked (said once on stderr; the run goes on without them).
std::optional<SpecDecodeCounts> ReadSpecDecodeCounts(const ClientConnection& connection) {
  grpc::ClientContext context;
  AddApiKey(connection, context);
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  v1::ServerInfo info;
  const grpc::Status s =
      v1::Generation::NewStub(connection.channel)->GetServerInfo(&context, v1::ServerInfoRequest(), &info);
  if (!s.ok()) {
    static bool said = false;
    if (!std::exchange(said, true)) {
      std::fprintf(stderr, "tpserve-bench: %s: GetServerInfo: %s: %s (no speculative-decoding figures)\n",
                   connection.server.c_str(), GrpcCodeName(s.error_code()), s.error_message().c_str());
    }
    return std::nullopt;
  }
  SpecDecodeCounts c{.drafts = info.spec_decode_num_drafts(),
                     .draft_tokens = info.spec_decode_num_draft_tokens(),
                     .accepted_tokens = info.spec_decode_num_accepted_tokens()};
  c.accepted_per_pos.assign(info.spec_decode_num_accepted_tokens_per_pos().begin(),
                            info.spec_decode_num_accepted_tokens_per_pos().end());
  return c;
}

// The distinct failure messages of a run, at most five.
std::vector<std::string> Errors(const std::vector<RequestRecord>& records) {
  std::set<std::string> distinct;
  for (const RequestRecord& r : records) {
    if (!r.success && distinct.size() < 5) distinct.insert(r.error);
  }
  return {distinct.begin(), distinct.end()};
}

int Main(int argc, char** argv) {
  InitToolUsage(argc, argv,
      "tpserve-bench MODE [flags]: load for tpserve-coordinator, measured as vLLM's benchmark_serving measures.\n"
      "\n"
      "Modes:\n"
      "  throughput  send --num-prompts requests at once (ignore_eos): duration, requests/s, tokens/s\n"
      "  serve       Poisson arrivals at each --request-rate (one run per rate), optional\n"
      "              --max-concurrency and --burstiness: TTFT, TPOT, ITL, end-to-end latency\n"
      "              (mean, median, std, --percentiles), goodput against --slo, peaks\n"
      "A progress bar shows on a terminal. Only --server is contacted (default loopback).\n"
      "\n"
      "Examples:\n"
      "  tpserve-bench throughput --server 127.0.0.1:50051        # nano-vllm's: 256 prompts, 100..1024 tokens\n"
      "  tpserve-bench serve --request-rate 1,2,4 --num-prompts 100 --input-len 128 --output-len 64 \\\n"
      "      --slo ttft:500,tpot:100 --json bench.json --plot bench.png\n",
      {__FILE__, kConnectFlagsFile});
  const std::vector<std::string> positional = ParseFlagsWithDashes(argc, argv);
  if (positional.size() != 2 || (positional[1] != "throughput" && positional[1] != "serve")) {
    return Usage("give one mode: throughput or serve (see --help)");
  }
  const std::string mode = positional[1];
  if (!absl::GetFlag(FLAGS_plot).empty() && mode != "serve") return Usage("--plot draws serve runs; use it with serve");
  absl::StatusOr<ClientConnection> connection = ConnectFromFlags();
  if (!connection.ok()) return Usage(std::string(connection.status().message()));

  v1::ModelInfo model;
  {
    grpc::ClientContext context;
    AddApiKey(*connection, context);
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    const grpc::Status s = v1::Generation::NewStub(connection->channel)->GetModelInfo(&context, {}, &model);
    if (!s.ok()) {
      std::fprintf(stderr, "tpserve-bench: %s: GetModelInfo: %s: %s\n", connection->server.c_str(),
                   GrpcCodeName(s.error_code()), s.error_message().c_str());
      return 1;
    }
  }
  Workload w;
  if (std::string error = BuildWorkload(mode, model, w); !error.empty()) return Usage(error);

  nlohmann::json doc = {{"configuration", Configuration(mode)}, {"model", model.model_name()},
                        {"runs", nlohmann::json::array()}};
  std::vector<RunReport> reports;
  for (size_t run = 0; run < w.rates.size(); ++run) {
    const double rate = w.rates[run];
    RunOptions options{.request_rate = rate,
                       .burstiness = absl::GetFlag(FLAGS_burstiness),
                       .max_concurrency = absl::GetFlag(FLAGS_max_concurrency),
                       .seed = absl::GetFlag(FLAGS_seed) + run,
                       .request_timeout_s = absl::GetFlag(FLAGS_timeout),
                       .max_seconds = absl::GetFlag(FLAGS_max_seconds),
                       .ignore_eos = absl::GetFlag(FLAGS_ignore_eos),
                       .temperature = static_cast<float>(absl::GetFlag(FLAGS_temperature)),
                       .progress = isatty(STDERR_FILENO) == 1};
    if (absl::Status s = SetStructuredOutput(options); !s.ok()) return Usage(std::string(s.message()));
    const std::optional<SpecDecodeCounts> spec_before = ReadSpecDecodeCounts(*connection);
    const RunResult result = RunBenchmark(*connection, w.prompts[run], options);
    RunReport report{.request_rate = rate,
                     .metrics = ComputeMetrics(result.records, result.duration_s, w.percentiles, w.slo),
                     .errors = Errors(result.records)};
    if (const std::optional<SpecDecodeCounts> spec_after = ReadSpecDecodeCounts(*connection);
        spec_before.has_value() && spec_after.has_value()) {
      report.metrics.spec_decode = ComputeSpecDecode(*spec_before, *spec_after);
    }
    std::cout << FormatTable(report, mode == "serve") << std::flush;
    doc["runs"].push_back(RunToJson(report));
    reports.push_back(std::move(report));
  }
  if (const std::string path = absl::GetFlag(FLAGS_json); !path.empty()) {
    std::ofstream out(path);
    out << doc.dump(2) << "\n";
    if (!out) return Usage(absl::StrCat("--json: cannot write ", path));
  }
  if (const std::string path = absl::GetFlag(FLAGS_plot); !path.empty()) {
    if (absl::Status s = PlotPercentiles(reports, path); !s.ok()) {
      std::fprintf(stderr, "tpserve-bench: %s\n", std::string(s.message()).c_str());
      return 1;
    }
  }
  return 0;
}

}  // namespace
}  // namespace tpserve::bench

int main(int argc, char** argv) { return tpserve::bench::Main(argc, argv); }
