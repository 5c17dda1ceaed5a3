// tpserve-client: talks to a tpserve-coordinator.
//
//   tpserve-client generate --server ADDR (--prompt TEXT | --prompt-ids 1,2,3 | --chat TEXT)
//       [--system TEXT] [--tools-json JSON] [--chat-template-kwargs JSON] [--max-tokens N] [--temperature T] [--top-p P] [--top-k K]
//       [--min-p P] [--seed S] [--stop STR]... [--ignore-eos] [--logprobs N]
//       [--request-id ID] [--timeout SECONDS] [--json]
//   tpserve-client info   --server ADDR      (model and server info as one JSON object)
//   tpserve-client health --server ADDR [--service tpserve.liveness|tpserve.readiness]
//                                            (SERVING / NOT_SERVING; exit 0 only when SERVING)
//   tpserve-client abort  --server ADDR --request-id ID
//   tpserve-client tokenize --server ADDR (--prompt TEXT | --chat TEXT [--system TEXT] ...)
//       [--no-add-special-tokens] [--allow-special-tokens] [--json]
//                                            (the ids, comma separated, as --prompt-ids takes them)
//   tpserve-client detokenize --server ADDR --token-ids 1,2,3 [--skip-special-tokens] [--pieces] [--json]
//                                            (the text; --pieces: each id decoded alone, one per line)
//
// generate prints the text as it streams, then a summary line on stderr; with
// --json one JSON line per chunk {"token_ids": [...], "text": "..."} and a final
// {"finish_reason", "matched_stop", "usage", "timing"} line. An error prints
// "tpserve-client: CODE: message" and exits 1 (2 for bad usage).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "base/flag_spelling.h"
#include "base/tool_usage.h"
#include "health.grpc.pb.h"
#include "nlohmann/json.hpp"
#include "tools/connect/connect.h"
#include "tpserve/v1/generation.grpc.pb.h"

ABSL_FLAG(std::string, prompt, "", "prompt text");
ABSL_FLAG(std::string, prompt_ids, "", "prompt token ids, comma separated");
ABSL_FLAG(std::string, chat, "", "a user message (rendered with the model's chat format)");
ABSL_FLAG(std::string, system, "", "a system message before --chat");
ABSL_FLAG(std::string, tools_json, "", "with --chat: the tools, a JSON array of OpenAI tool schemas");
ABSL_FLAG(std::string, tool_choice, "",
          "with --tools-json: auto, none, required (the output is a valid call of a listed tool), or a "
          "function's name (a call of that function)");
ABSL_FLAG(bool, parallel_tool_calls, true, "with --tool-choice required or a name: one or more calls (false: one)");
ABSL_FLAG(std::string, json_schema, "", "constrain the output to a JSON Schema: the schema's FILE");
ABSL_FLAG(bool, json_object, false, "constrain the output to a JSON object");
ABSL_FLAG(std::string, regex, "", "constrain the output to a regular expression (the whole output matches)");
ABSL_FLAG(std::string, grammar, "", "constrain the output to a GBNF grammar (start rule root): the grammar's FILE");
ABSL_FLAG(std::string, choice, "", "constrain the output to one of these strings, comma separated");
ABSL_FLAG(bool, indented, false, "with --json-schema / --json-object: JSON as json.dumps(indent=2) lays it out");
ABSL_FLAG(std::string, chat_template_kwargs, "",
          "with --chat: a JSON object of chat template variables, e.g. '{\"enable_thinking\": false}'");
ABSL_FLAG(int64_t, max_tokens, 0, "tokens to generate (unset: up to the model's maximum length)");
ABSL_FLAG(double, temperature, 1.0, "0 = greedy (unset: the model's default)");
ABSL_FLAG(double, top_p, 1.0, "nucleus sampling mass in (0, 1]");
ABSL_FLAG(int32_t, top_k, -1, "keep the k most likely tokens (-1 = off)");
ABSL_FLAG(double, min_p, 0.0, "min-p filter in [0, 1]");
ABSL_FLAG(uint64_t, seed, 0, "sampling seed (same seed, same tokens)");
ABSL_FLAG(bool, ignore_eos, false, "keep generating past end-of-sequence tokens");
ABSL_FLAG(int32_t, logprobs, -1, "log-probs of the chosen token and this many alternatives");
ABSL_FLAG(std::string, request_id, "", "request id (generate: optional; abort: required)");
ABSL_FLAG(double, timeout, 0, "deadline in seconds (0 = none)");
ABSL_FLAG(bool, json, false, "JSON lines instead of text");
ABSL_FLAG(std::string, service, "",
          "health: the grpc.health.v1 service to ask: tpserve.liveness, tpserve.readiness (\"\" = readiness)");
ABSL_FLAG(bool, allow_special_tokens, false,
          "encode special-token text in --prompt / --chat as the special tokens (off: as plain text)");
// Never set by absl: main() takes every --stop out of argv first (a stop string
// may hold commas, and the flag may repeat). Declared so --help lists it.
ABSL_FLAG(std::string, stop, "",
          "generate: a stop string; repeat for more (--stop A --stop B), each taken as written");
ABSL_FLAG(bool, add_special_tokens, true,
          "tokenize --prompt: add the model's special tokens (BOS), as generate encodes a prompt");
ABSL_FLAG(std::string, token_ids, "", "detokenize: the token ids, comma separated");
ABSL_FLAG(bool, skip_special_tokens, false, "detokenize: leave special tokens out of the text");
ABSL_FLAG(bool, pieces, false,
          "detokenize: also each id decoded alone, one line each: the id, a tab, the piece as a JSON string");

namespace {

namespace v1 = tpserve::v1;

int RpcError(const grpc::Status& status) {
  std::fprintf(stderr, "tpserve-client: %s: %s\n", tpserve::GrpcCodeName(status.error_code()),
               status.error_message().c_str());
  return 1;
}

int Usage(std::string_view message) {
  std::fprintf(stderr, "tpserve-client: %.*s\n", static_cast<int>(message.size()), message.data());
  return 2;
}

// Flag names seen on the command line (underscored), so unset fields stay unset.
std::set<std::string>& GivenFlags() {
  static std::set<std::string> given;
  return given;
}
bool Given(const std::string& name) { return GivenFlags().contains(name); }

constexpr double kMaxTimeoutSeconds = 365.0 * 24 * 3600;

// The connection of every call (--server, API key, TLS: tools/connect/connect.h).
tpserve::ClientConnection& Connection() {
  static tpserve::ClientConnection connection;
  return connection;
}

// Every call's deadline (--timeout) and API key.
void SetDeadline(grpc::ClientContext& context) {
  tpserve::AddApiKey(Connection(), context);
  // At most a year: a larger value (or inf) would overflow the microseconds.
  const double timeout = std::min(absl::GetFlag(FLAGS_timeout), kMaxTimeoutSeconds);
  if (timeout > 0) {
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::microseconds(static_cast<int64_t>(timeout * 1e6)));
  }
}

std::string FinishName(v1::FinishReason reason) {
  switch (reason) {
    case v1::LENGTH: return "length";
    case v1::EOS: return "eos";
    case v1::STOP_SEQUENCE: return "stop";
    case v1::ABORTED: return "aborted";
    default: return "unspecified";
  }
}

// The chat of --chat (+ --system, --tools-json, --chat-template-kwargs); a
// usage error, or empty when they fit.
std::string SetChatFromFlags(v1::Chat& chat) {
  chat.set_add_generation_prompt(true);
  if (Given("system")) {
    v1::ChatMessage* m = chat.add_messages();
    m->set_role("system");
    m->set_content(absl::GetFlag(FLAGS_system));
  }
  v1::ChatMessage* m = chat.add_messages();
  m->set_role("user");
  m->set_content(absl::GetFlag(FLAGS_chat));
  chat.set_tools_json(absl::GetFlag(FLAGS_tools_json));  // the server checks it
  if (Given("chat_template_kwargs")) {
    const nlohmann::json kwargs = nlohmann::json::parse(absl::GetFlag(FLAGS_chat_template_kwargs), nullptr, false);
    if (!kwargs.is_object()) return "--chat-template-kwargs: give a JSON object, e.g. '{\"enable_thinking\": false}'";
    for (const auto& [k, v] : kwargs.items()) (*chat.mutable_chat_template_kwargs())[k] = v.dump();
  }
  return "";
}

// The text of FILE for `flag`; a usage error in *error when it cannot be read.
std::string ReadFlagFile(absl::string_view flag, const std::string& path, std::string* error) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    *error = absl::StrCat(flag, ": cannot read ", path);
    return "";
  }
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// structured_output from --json-schema, --json-object, --regex, --grammar,
// --choice, and the chat's tool_choice from --tool-choice; a usage error, or
// empty when they fit (the server checks the schema, regex and grammar).
std::string SetConstraintFromFlags(v1::GenerateRequest& request) {
  const int formats = Given("json_schema") + Given("json_object") + Given("regex") + Given("grammar") + Given("choice");
  if (formats > 1) return "give at most one of --json-schema, --json-object, --regex, --grammar, --choice";
  v1::StructuredOutput* so = formats == 1 ? request.mutable_structured_output() : nullptr;
  std::string error;
  if (Given("json_schema")) so->set_json_schema(ReadFlagFile("--json-schema", absl::GetFlag(FLAGS_json_schema), &error));
  if (Given("json_object")) so->set_json_object(absl::GetFlag(FLAGS_json_object));
  if (Given("regex")) so->set_regex(absl::GetFlag(FLAGS_regex));
  if (Given("grammar")) so->set_ebnf(ReadFlagFile("--grammar", absl::GetFlag(FLAGS_grammar), &error));
  if (Given("choice")) {
    for (absl::string_view c : absl::StrSplit(absl::GetFlag(FLAGS_choice), ',')) so->mutable_choice()->add_choices(std::string(c));
  }
  if (so != nullptr) so->set_indented(absl::GetFlag(FLAGS_indented));
  if (!error.empty() || !Given("tool_choice")) return error;
  if (!request.has_chat()) return "--tool-choice needs --chat and --tools-json";
  v1::ToolChoice* tc = request.mutable_chat()->mutable_tool_choice();
  const std::string choice = absl::GetFlag(FLAGS_tool_choice);
  if (choice == "auto") {
    tc->set_mode(v1::ToolChoice::AUTO);
  } else if (choice == "none") {
    tc->set_mode(v1::ToolChoice::NONE);
  } else if (choice == "required") {
    tc->set_mode(v1::ToolChoice::REQUIRED);
  } else {
    tc->set_mode(v1::ToolChoice::FUNCTION);
    tc->set_function_name(choice);
  }
  if (Given("parallel_tool_calls")) tc->set_parallel_tool_calls(absl::GetFlag(FLAGS_parallel_tool_calls));
  return "";
}

// Comma-separated token ids of `flag`; a usage error, or empty when they parse.
std::string ParseIds(absl::string_view flag, const std::string& text, google::protobuf::RepeatedField<uint32_t>& ids) {
  for (absl::string_view piece : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    uint32_t id = 0;
    if (!absl::SimpleAtoi(piece, &id)) return absl::StrCat(flag, ": \"", piece, "\" is not a token id");
    ids.Add(id);
  }
  return "";
}

// The request's input from --prompt, --prompt-ids or --chat (+ --system);
// a usage error, or empty when they fit.
std::string SetInputFromFlags(v1::GenerateRequest& request) {
  const int inputs = Given("prompt") + Given("prompt_ids") + Given("chat");
  if (inputs != 1) return "generate: give exactly one of --prompt, --prompt-ids or --chat";
  if (Given("prompt")) {
    request.set_prompt(absl::GetFlag(FLAGS_prompt));
    return "";
  }
  if (Given("prompt_ids")) {
    return ParseIds("--prompt-ids", absl::GetFlag(FLAGS_prompt_ids), *request.mutable_prompt_token_ids()->mutable_ids());
  }
  return SetChatFromFlags(*request.mutable_chat());
}

// Sampling, stopping and log-prob fields from the flags given (unset flags stay
// unset: the server's defaults); a usage error, or empty when they fit.
std::string SetParamsFromFlags(const std::vector<std::string>& stops, v1::GenerateRequest& request) {
  v1::SamplingParams* s = request.mutable_sampling();
  if (Given("temperature")) s->set_temperature(static_cast<float>(absl::GetFlag(FLAGS_temperature)));
  if (Given("top_p")) s->set_top_p(static_cast<float>(absl::GetFlag(FLAGS_top_p)));
  if (Given("top_k")) s->set_top_k(absl::GetFlag(FLAGS_top_k));
  if (Given("min_p")) s->set_min_p(static_cast<float>(absl::GetFlag(FLAGS_min_p)));
  if (Given("seed")) s->set_seed(absl::GetFlag(FLAGS_seed));
  v1::StoppingParams* st = request.mutable_stopping();
  if (Given("max_tokens")) {
    const int64_t n = absl::GetFlag(FLAGS_max_tokens);
    if (n < 0) return "--max-tokens must not be negative";
    st->set_max_tokens(static_cast<uint32_t>(n));
  }
  for (const std::string& stop : stops) st->add_stop(stop);
  st->set_ignore_eos(absl::GetFlag(FLAGS_ignore_eos));
  request.set_allow_special_tokens_in_input(absl::GetFlag(FLAGS_allow_special_tokens));
  if (Given("logprobs")) {
    if (absl::GetFlag(FLAGS_logprobs) < 0) return "--logprobs must not be negative";
    request.set_logprobs(static_cast<uint32_t>(absl::GetFlag(FLAGS_logprobs)));
  }
  return "";
}

void PrintJsonLine(const nlohmann::json& line) {
  std::cout << line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n" << std::flush;
}

// One streamed chunk: its text, or with --json a {"token_ids", "text"[, "logprobs"]} line.
void PrintChunk(const v1::Chunk& chunk, bool json) {
  if (!json) {
    std::cout << chunk.text() << std::flush;
    return;
  }
  nlohmann::json line = {{"token_ids", std::vector<uint32_t>(chunk.token_ids().begin(), chunk.token_ids().end())},
                         {"text", chunk.text()}};
  if (!chunk.logprobs().empty()) {
    nlohmann::json lps = nlohmann::json::array();
    for (const v1::TokenLogprob& lp : chunk.logprobs()) {
      nlohmann::json top = nlohmann::json::array();
      for (const v1::TopLogprob& t : lp.top()) top.push_back({{"token_id", t.token_id()}, {"logprob", t.logprob()}});
      lps.push_back({{"token_id", lp.token_id()}, {"logprob", lp.logprob()}, {"top", top}});
    }
    line["logprobs"] = lps;
  }
  PrintJsonLine(line);
}

// The end of a request: a summary line on stderr, or with --json one JSON line.
void PrintComplete(const v1::GenerateResponse& response, bool json) {
  const v1::Complete& c = response.complete();
  nlohmann::json calls = nlohmann::json::array();  // the answer's tool calls, as OpenAI's message carries them
  for (const v1::ToolCall& t : c.tool_calls()) {
    calls.push_back({{"id", t.id()}, {"type", "function"}, {"function", {{"name", t.name()}, {"arguments", t.arguments()}}}});
  }
  if (json) {
    PrintJsonLine({{"request_id", response.request_id()},
                   {"tool_calls", calls},
                   {"finish_reason", FinishName(c.finish_reason())},
                   {"matched_stop", c.matched_stop()},
                   {"usage", {{"prompt_tokens", c.usage().prompt_tokens()},
                              {"completion_tokens", c.usage().completion_tokens()},
                              {"cached_tokens", c.usage().cached_tokens()}}},
                   {"timing", {{"queue_seconds", c.timing().queue_seconds()},
                               {"time_to_first_token_seconds", c.timing().time_to_first_token_seconds()},
                               {"prefill_seconds", c.timing().prefill_seconds()},
                               {"decode_seconds", c.timing().decode_seconds()},
                               {"total_seconds", c.timing().total_seconds()}}}});
    return;
  }
  std::cout << "\n";
  for (const nlohmann::json& call : calls) std::cout << "tool call: " << call.dump() << "\n";
  std::cout << std::flush;
  std::fprintf(stderr,
               "[%s; prompt %u, completion %u, cached %u tokens; queue %.3f s, first token %.3f s, "
               "total %.3f s]\n",
               FinishName(c.finish_reason()).c_str(), c.usage().prompt_tokens(), c.usage().completion_tokens(),
               c.usage().cached_tokens(), c.timing().queue_seconds(), c.timing().time_to_first_token_seconds(),
               c.timing().total_seconds());
}

int Generate(v1::Generation::Stub& stub, const std::vector<std::string>& stops) {
  v1::GenerateRequest request;
  request.set_request_id(absl::GetFlag(FLAGS_request_id));
  if (std::string error = SetInputFromFlags(request); !error.empty()) return Usage(error);
  if (std::string error = SetParamsFromFlags(stops, request); !error.empty()) return Usage(error);
  if (std::string error = SetConstraintFromFlags(request); !error.empty()) return Usage(error);

  const bool json = absl::GetFlag(FLAGS_json);
  grpc::ClientContext context;
  SetDeadline(context);
  std::unique_ptr<grpc::ClientReader<v1::GenerateResponse>> reader = stub.Generate(&context, request);
  v1::GenerateResponse response;
  bool completed = false;
  bool printed_text = false;
  while (reader->Read(&response)) {
    if (response.has_chunk()) {
      PrintChunk(response.chunk(), json);
      printed_text = printed_text || (!json && !response.chunk().text().empty());
    } else if (response.has_complete()) {
      completed = true;
      PrintComplete(response, json);
    }
  }
  grpc::Status status = reader->Finish();
  if (!json && !completed && printed_text) std::cout << "\n" << std::flush;
  if (!status.ok()) return RpcError(status);
  return 0;
}

int Info(v1::Generation::Stub& stub) {
  v1::ModelInfo model;
  {
    grpc::ClientContext context;
    SetDeadline(context);
    grpc::Status s = stub.GetModelInfo(&context, v1::ModelInfoRequest(), &model);
    if (!s.ok()) return RpcError(s);
  }
  v1::ServerInfo server;
  {
    grpc::ClientContext context;
    SetDeadline(context);
    grpc::Status s = stub.GetServerInfo(&context, v1::ServerInfoRequest(), &server);
    if (!s.ok()) return RpcError(s);
  }
  nlohmann::json out = {
      {"model", {{"model_name", model.model_name()},
                 {"architecture", model.architecture()},
                 {"vocab_size", model.vocab_size()},
                 {"max_model_len", model.max_model_len()},
                 {"eos_token_ids", std::vector<uint32_t>(model.eos_token_ids().begin(), model.eos_token_ids().end())},
                 {"chat_format", model.chat_format()}}},
      {"server", {{"version", server.version()},
                  {"tensor_parallel_size", server.tensor_parallel_size()},
                  {"backend", server.backend()},
                  {"block_size", server.block_size()},
                  {"num_blocks", server.num_blocks()},
                  {"free_blocks", server.free_blocks()},
                  {"running", server.running()},
                  {"waiting", server.waiting()},
                  {"prefix_cache_hit_rate", server.prefix_cache_hit_rate()},
                  {"workers", std::vector<std::string>(server.workers().begin(), server.workers().end())}}}};
  nlohmann::json& s = out["server"];
  s["kv_cache_usage"] = server.kv_cache_usage();
  s["requests_finished"] = std::map<std::string, uint64_t>(server.requests_finished().begin(),
                                                           server.requests_finished().end());
  s["requests_failed"] = server.requests_failed();
  s["prompt_tokens_total"] = server.prompt_tokens_total();
  s["generation_tokens_total"] = server.generation_tokens_total();
  s["num_preemptions_total"] = server.num_preemptions_total();
  s["prefix_cache_queries_total"] = server.prefix_cache_queries_total();
  s["prefix_cache_hits_total"] = server.prefix_cache_hits_total();
  s["spec_decode_num_drafts"] = server.spec_decode_num_drafts();
  s["spec_decode_num_draft_tokens"] = server.spec_decode_num_draft_tokens();
  s["spec_decode_num_accepted_tokens"] = server.spec_decode_num_accepted_tokens();
  s["spec_decode_num_pipelined_drafts"] = server.spec_decode_num_pipelined_drafts();
  s["spec_decode_num_accepted_tokens_per_pos"] =
      std::vector<uint64_t>(server.spec_decode_num_accepted_tokens_per_pos().begin(),
                            server.spec_decode_num_accepted_tokens_per_pos().end());
  for (const v1::HistogramTotals& h : server.histograms()) s["histograms"][h.name()] = {{"count", h.count()}, {"sum", h.sum()}};
  std::cout << out.dump(2) << "\n";
  return 0;
}

// GetLoads as JSON: {"block_size", "groups": [{"dp_rank", "serving", "running", ...}]}.
int Loads(v1::Generation::Stub& stub) {
  v1::Loads loads;
  grpc::ClientContext context;
  SetDeadline(context);
  grpc::Status s = stub.GetLoads(&context, v1::LoadsRequest(), &loads);
  if (!s.ok()) return RpcError(s);
  nlohmann::json out = {{"block_size", loads.block_size()}, {"groups", nlohmann::json::array()}};
  for (const v1::GroupLoad& g : loads.groups()) {
    out["groups"].push_back({{"dp_rank", g.dp_rank()},
                             {"serving", g.serving()},
                             {"running", g.running()},
                             {"waiting", g.waiting()},
                             {"kv_blocks_used", g.kv_blocks_used()},
                             {"kv_blocks_total", g.kv_blocks_total()},
                             {"tokens_in_flight", g.tokens_in_flight()}});
  }
  std::cout << out.dump(2) << "\n";
  return 0;
}

int Health(const std::shared_ptr<grpc::Channel>& channel) {
  auto stub = grpc::health::v1::Health::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(
      absl::GetFlag(FLAGS_timeout) > 0 ? static_cast<int64_t>(std::ceil(std::min(absl::GetFlag(FLAGS_timeout),
                                                                                  kMaxTimeoutSeconds)))
                                       : 10));
  grpc::health::v1::HealthCheckRequest request;
  request.set_service(absl::GetFlag(FLAGS_service));
  grpc::health::v1::HealthCheckResponse response;
  grpc::Status s = stub->Check(&context, request, &response);
  if (!s.ok()) return RpcError(s);
  std::cout << grpc::health::v1::HealthCheckResponse::ServingStatus_Name(response.status()) << "\n";
  return response.status() == grpc::health::v1::HealthCheckResponse::SERVING ? 0 : 1;
}

int Abort(v1::Generation::Stub& stub) {
  if (!Given("request_id")) return Usage("abort: give --request-id");
  grpc::ClientContext context;
  SetDeadline(context);
  v1::AbortRequest request;
  request.set_request_id(absl::GetFlag(FLAGS_request_id));
  v1::AbortResponse response;
  grpc::Status s = stub.Abort(&context, request, &response);
  if (!s.ok()) return RpcError(s);
  std::cout << (response.found() ? "aborted" : "not found") << "\n";
  return response.found() ? 0 : 1;
}

// tokenize: the ids of --prompt or --chat, encoded as generate encodes them,
// comma separated (what --prompt-ids and detokenize --token-ids take); with
// --json {"token_ids": [...], "count": N}.
int Tokenize(v1::Generation::Stub& stub) {
  v1::TokenizeRequest request;
  if (Given("prompt_ids")) return Usage("tokenize: --prompt-ids are tokens already; give --prompt or --chat");
  if (Given("prompt") == Given("chat")) return Usage("tokenize: give exactly one of --prompt or --chat");
  if (Given("prompt")) {
    request.set_text(absl::GetFlag(FLAGS_prompt));
    request.set_add_special_tokens(absl::GetFlag(FLAGS_add_special_tokens));
  } else if (std::string error = SetChatFromFlags(*request.mutable_chat()); !error.empty()) {
    return Usage(error);
  }
  request.set_allow_special_tokens_in_input(absl::GetFlag(FLAGS_allow_special_tokens));
  grpc::ClientContext context;
  SetDeadline(context);
  v1::TokenizeResponse response;
  grpc::Status s = stub.Tokenize(&context, request, &response);
  if (!s.ok()) return RpcError(s);
  const std::vector<uint32_t> ids(response.token_ids().begin(), response.token_ids().end());
  if (absl::GetFlag(FLAGS_json)) {
    PrintJsonLine({{"token_ids", ids}, {"count", ids.size()}});
  } else {
    std::cout << absl::StrJoin(ids, ",") << "\n";
  }
  return 0;
}

// detokenize: the text of --token-ids; with --pieces each id decoded alone
// after it, one "ID<tab>"PIECE"" line each; with --json {"text", "pieces"}.
int Detokenize(v1::Generation::Stub& stub) {
  if (!Given("token_ids")) return Usage("detokenize: give --token-ids 1,2,3");
  v1::DetokenizeRequest request;
  if (std::string error = ParseIds("--token-ids", absl::GetFlag(FLAGS_token_ids), *request.mutable_token_ids());
      !error.empty()) {
    return Usage(error);
  }
  request.set_skip_special_tokens(absl::GetFlag(FLAGS_skip_special_tokens));
  request.set_pieces(absl::GetFlag(FLAGS_pieces));
  grpc::ClientContext context;
  SetDeadline(context);
  v1::DetokenizeResponse response;
  grpc::Status s = stub.Detokenize(&context, request, &response);
  if (!s.ok()) return RpcError(s);
  const std::vector<std::string> pieces(response.pieces().begin(), response.pieces().end());
  if (absl::GetFlag(FLAGS_json)) {
    nlohmann::json line = {{"text", response.text()}};
    if (request.pieces()) line["pieces"] = pieces;
    PrintJsonLine(line);
    return 0;
  }
  std::cout << response.text() << "\n";
  for (size_t i = 0; i < pieces.size() && i < static_cast<size_t>(request.token_ids_size()); ++i) {
    std::cout << request.token_ids(static_cast<int>(i)) << "\t"
              << nlohmann::json(pieces[i]).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  }
  std::cout << std::flush;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  tpserve::InitToolUsage(argc, argv,
      "tpserve-client COMMAND --server HOST:PORT [flags]: a client of tpserve-coordinator's public API.\n"
      "\n"
      "Commands:\n"
      "  generate    stream a generation (give one of --prompt, --prompt-ids, --chat; --stop may repeat)\n"
      "  info        model and server info as one JSON object\n"
      "  loads       each data-parallel group's running, waiting, KV blocks and tokens in flight (JSON)\n"
      "  health      SERVING / NOT_SERVING (exit 0 only when SERVING); --service tpserve.liveness or\n"
      "              tpserve.readiness (the default)\n"
      "  abort       end the request --request-id\n"
      "  tokenize    the token ids of --prompt or --chat as generate encodes them, comma separated\n"
      "  detokenize  the text of --token-ids (--pieces: each id decoded alone too)\n"
      "\n"
      "Examples:\n"
      "  tpserve-client generate --server 127.0.0.1:50051 --chat \"Write a haiku about GPUs\" --max-tokens 64\n"
      "  tpserve-client generate --prompt-ids 1,2,3 --temperature 0.8 --seed 7 --json\n"
      "  tpserve-client generate --prompt \"Once upon a time\" --stop . --stop ! --max-tokens 32\n"
      "  tpserve-client tokenize --prompt \"Hello world\"\n"
      "  tpserve-client detokenize --token-ids 9707,1879 --pieces\n"
      "  tpserve-client info --server host:50051 --tls-ca ca.pem --api-key-file my-key\n",
      {__FILE__, tpserve::kConnectFlagsFile});
  // --stop may repeat: take every occurrence (and its value, as written) out
  // before absl parses the rest.
  std::vector<std::string> stops;
  std::vector<char*> rest = {argv[0]};
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a == "--stop") {
      if (i + 1 >= argc) return Usage("--stop needs a value");
      stops.emplace_back(argv[++i]);
    } else if (a.starts_with("--stop=")) {
      stops.emplace_back(a.substr(7));
    } else {
      rest.push_back(argv[i]);
    }
  }
  // Flag names are written with dashes (--max-tokens); absl wants underscores.
  std::vector<std::string> args = tpserve::UnderscoreFlagNames(static_cast<int>(rest.size()), rest.data());
  for (size_t i = 1; i < args.size() && args[i] != "--"; ++i) {
    if (!args[i].starts_with("--") || args[i].size() <= 2) continue;
    const std::string name = args[i].substr(2, args[i].find('=') - 2);
    GivenFlags().insert(name.starts_with("no") ? name.substr(2) : name);
  }
  std::vector<char*> pointers;
  for (std::string& a : args) pointers.push_back(a.data());
  std::vector<char*> positional = absl::ParseCommandLine(static_cast<int>(pointers.size()), pointers.data());
  if (positional.size() != 2) {
    return Usage("give one command: generate, info, loads, health, abort, tokenize or detokenize (see --help)");
  }
  const std::string command = positional[1];
  absl::StatusOr<tpserve::ClientConnection> connection = tpserve::ConnectFromFlags();
  if (!connection.ok()) return Usage(std::string(connection.status().message()));
  Connection() = *std::move(connection);
  const std::shared_ptr<grpc::Channel>& channel = Connection().channel;
  auto stub = v1::Generation::NewStub(channel);
  if (command == "generate") return Generate(*stub, stops);
  if (command == "info") return Info(*stub);
  if (command == "loads") return Loads(*stub);
  if (command == "health") return Health(channel);
  if (command == "abort") return Abort(*stub);
  if (command == "tokenize") return Tokenize(*stub);
  if (command == "detokenize") return Detokenize(*stub);
  return Usage(absl::StrCat("unknown command \"", command,
                            "\"; use generate, info, loads, health, abort, tokenize or detokenize"));
}
