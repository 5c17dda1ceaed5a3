#include "coordinator/request.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"
#include "base/status_macros.h"
#include "jinja/value.h"
#include "json/strict_json.h"

namespace tpserve {
namespace {

namespace v1 = tpserve::v1;

absl::Status Invalid(absl::string_view field, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", what));
}

// Whether `message` starts with a field path of the chat and ": "
// ("chat.messages[1].role: ..."), as tpserve-http reads it (OpenAiParam).
bool StartsWithChatField(absl::string_view message) {
  const size_t colon = message.find(": ");
  return absl::StartsWith(message, "chat.") && colon != absl::string_view::npos &&
         message.substr(0, colon).find(' ') == absl::string_view::npos;
}

absl::Status CheckTokenIds(absl::string_view field,
                           const google::protobuf::RepeatedField<uint32_t>& ids, int32_t vocab) {
  for (int i = 0; i < ids.size(); ++i) {
    if (ids[i] >= static_cast<uint32_t>(vocab)) {
      return Invalid(absl::StrCat(field, "[", i, "]"),
                     absl::StrCat("token id ", ids[i], " is outside the vocabulary (ids 0..",
                                  vocab - 1, ")"));
    }
  }
  return absl::OkStatus();
}

// Checked before anything of the chat is built or rendered: the messages'
// count bounds what rendering costs (a few KB each), as kMaxChatJsonValues
// bounds its JSON.
absl::Status CheckToolChoice(const v1::Chat& chat) {
  const v1::ToolChoice& tc = chat.tool_choice();
  switch (tc.mode()) {
    case v1::ToolChoice::AUTO:
    case v1::ToolChoice::NONE:
      return absl::OkStatus();
    case v1::ToolChoice::REQUIRED:
    case v1::ToolChoice::FUNCTION:
      if (chat.tools_json().empty()) return Invalid("chat.tool_choice.mode", "REQUIRED and FUNCTION need tools_json");
      if (tc.mode() == v1::ToolChoice::FUNCTION && tc.function_name().empty()) {
        return Invalid("chat.tool_choice.function_name", "is empty; name the function the model must call");
      }
      return absl::OkStatus();  // the tools themselves: ToolCallConstraint
    default:
      return Invalid("chat.tool_choice.mode", absl::StrCat(tc.mode(), " is not a ToolChoice.Mode"));
  }
}

absl::Status CheckChat(const v1::Chat& chat, int32_t max_messages) {
  if (chat.messages().empty()) return Invalid("chat.messages", "is empty; give at least one message");
  if (chat.messages_size() > max_messages) {
    return Invalid("chat.messages", absl::StrCat(chat.messages_size(), " messages are more than the limit of ",
                                                 max_messages, " (--max-chat-messages); drop or summarize "
                                                 "older turns, or raise --max-chat-messages"));
  }
  for (int i = 0; i < chat.messages_size(); ++i) {
    const std::string& role = chat.messages(i).role();
    const std::string field = absl::StrCat("chat.messages[", i, "].role");
    if (role != "system" && role != "user" && role != "assistant" && role != "tool" && role != "ipython") {
      return Invalid(field, absl::StrCat("\"", role, "\" is not one of system, user, assistant, tool, ipython"));
    }
  }  // the order of roles is the chat template's to judge (tokenizer/chat_template.h)
  return absl::OkStatus();
}

using OJson = nlohmann::ordered_json;

// The messages wrap a tool call's arguments in 6 levels (messages, message,
// tool_calls, call, function, arguments): within the template engine's bound.
static_assert(kMaxChatJsonDepth + 6 <= jinja::Value::kMaxJsonDepth);

// Parses the request's JSON text in `field` with its nesting and size checked
// before any value is built (json/strict_json.h): nlohmann's copy, dump and
// comparison recurse, so a value nested 100,000 deep would overflow the stack
// later (a remote crash), and a million tiny values would cost gigabytes once
// rendered. Every value counts against `values_left`, shared by the whole
// chat. Malformed text is a discarded value (the caller says what was
// expected); a bound passed is INVALID_ARGUMENT naming `field`.
absl::StatusOr<OJson> ParseChatJson(absl::string_view field, const std::string& text, int64_t& values_left) {
  JsonFault fault = JsonFault::kNone;
  int64_t values = 0;
  const JsonLimits limits{.max_depth = kMaxChatJsonDepth, .allow_duplicate_keys = true, .max_values = values_left};
  CheckJson(text, limits, &fault, &values).IgnoreError();  // the fault says what
  switch (fault) {
    case JsonFault::kNone:
      values_left -= values;
      return OJson::parse(text, nullptr, /*allow_exceptions=*/false);
    case JsonFault::kTooDeep:
      return Invalid(field, absl::StrCat("nests deeper than ", kMaxChatJsonDepth,
                                         " levels of arrays and objects; flatten it"));
    case JsonFault::kTooManyValues:
      return Invalid(field, absl::StrCat("the chat's JSON (tools_json, tool call arguments and "
                                         "chat_template_kwargs together) holds more than ",
                                         kMaxChatJsonValues, " values; send fewer or smaller tools"));
    case JsonFault::kSyntax:
    case JsonFault::kDuplicateKey:
      break;
  }
  return OJson(OJson::value_t::discarded);
}

// A tool call's arguments: a JSON object as a mapping (as vLLM passes it to the
// template), anything else as the string itself.
absl::StatusOr<OJson> ToolCallArguments(absl::string_view field, const std::string& text, int64_t& values_left) {
  absl::StatusOr<OJson> args = ParseChatJson(field, text, values_left);
  if (!args.ok()) return args.status();
  if (args->is_discarded() || !args->is_object()) return OJson(text);
  return args;
}

// The path of kwarg `key`: chat.chat_template_kwargs["enable_thinking"], or
// without the key when it is not a plain name (a space or ": " in it would
// cut the path short where tpserve-http reads it; the message quotes it).
std::string KwargField(const std::string& key) {
  const bool plain = !key.empty() && std::all_of(key.begin(), key.end(), [](char c) {
    return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.';
  });
  return plain ? absl::StrCat("chat.chat_template_kwargs[\"", key, "\"]") : "chat.chat_template_kwargs";
}

// Message `i` as the template sees it.
absl::StatusOr<OJson> MessageJson(const v1::ChatMessage& m, int i, int64_t& values_left) {
  OJson j = {{"role", m.role()}, {"content", m.content()}};
  if (m.has_reasoning_content()) j["reasoning_content"] = m.reasoning_content();
  for (int k = 0; k < m.tool_calls_size(); ++k) {
    const v1::ToolCall& tc = m.tool_calls(k);
    const std::string field = absl::StrCat("chat.messages[", i, "].tool_calls[", k, "].arguments");
    values_left -= 4;  // the call, its function, name and type: many empty calls cost too
    absl::StatusOr<OJson> args = ToolCallArguments(field, tc.arguments(), values_left);
    if (!args.ok()) return args.status();
    OJson call = {{"type", tc.type().empty() ? "function" : tc.type()},
                  {"function", {{"name", tc.name()}, {"arguments", *std::move(args)}}}};
    if (!tc.id().empty()) call["id"] = tc.id();
    j["tool_calls"].push_back(std::move(call));
  }
  if (!m.tool_call_id().empty()) j["tool_call_id"] = m.tool_call_id();
  if (!m.name().empty()) j["name"] = m.name();
  return j;
}

// The chat as the template's variables. INVALID_ARGUMENT for malformed tools or
// kwargs JSON, and for JSON past the bounds (ParseChatJson).
absl::StatusOr<ChatInput> ChatInputOf(const v1::Chat& chat) {
  ChatInput in;
  int64_t values_left = kMaxChatJsonValues;
  for (int i = 0; i < chat.messages_size(); ++i) {
    absl::StatusOr<OJson> m = MessageJson(chat.messages(i), i, values_left);
    if (!m.ok()) return m.status();
    in.messages.push_back(*std::move(m));
  }
  if (!chat.tools_json().empty() && chat.tool_choice().mode() != v1::ToolChoice::NONE) {
    absl::StatusOr<OJson> tools = ParseChatJson("chat.tools_json", chat.tools_json(), values_left);
    if (!tools.ok()) return tools.status();
    if (tools->is_discarded() || !tools->is_array()) {
      return Invalid("chat.tools_json", "is not a JSON array of tool schemas ([{\"type\": \"function\", \"function\": {...}}])");
    }
    in.tools = *std::move(tools);
  }
  for (const auto& [key, value] : chat.chat_template_kwargs()) {
    const std::string field = KwargField(key);
    --values_left;  // the key
    absl::StatusOr<OJson> v = ParseChatJson(field, value, values_left);
    if (!v.ok()) return v.status();
    if (v->is_discarded()) {
      return Invalid(field, absl::StrCat("the value of \"", absl::CEscape(key),
                                         "\" is not JSON text; write values as JSON (false, 1, \"text\")"));
    }
    in.kwargs[key] = *std::move(v);
  }
  in.add_generation_prompt = true;  // the server always asks the model for the next turn
  return in;
}

// The coordinator's upper bounds on fields the sampler accepts up to any finite
// value: beyond them the distribution no longer changes meaningfully.
constexpr float kMaxTemperature = 1e6f;
constexpr float kMaxRepetitionPenalty = 1e6f;

// A float field: OK when finite and in [lo, hi] (lo_open: (lo, hi]); otherwise
// "field: value is outside RANGE; what", the range written as accepted.
absl::Status CheckFloat(absl::string_view field, float v, float lo, float hi, bool lo_open,
                        absl::string_view what) {
  if (std::isfinite(v) && (lo_open ? v > lo : v >= lo) && v <= hi) return absl::OkStatus();
  return Invalid(field, absl::StrCat(v, " is outside ", lo_open ? "(" : "[", lo, ", ", hi, "]; ", what));
}

absl::Status CheckInput(const v1::GenerateRequest& request, const RequestLimits& limits) {
  switch (request.input_case()) {
    case v1::GenerateRequest::kPrompt:
      if (request.prompt().empty()) return Invalid("prompt", "is empty; give some text");
      return absl::OkStatus();
    case v1::GenerateRequest::kPromptTokenIds:
      if (request.prompt_token_ids().ids().empty()) {
        return Invalid("prompt_token_ids.ids", "is empty; give at least one token id");
      }
      return CheckTokenIds("prompt_token_ids.ids", request.prompt_token_ids().ids(), limits.vocab_size);
    case v1::GenerateRequest::kChat:
      TPSERVE_RETURN_IF_ERROR(CheckToolChoice(request.chat()));
      return CheckChat(request.chat(), limits.max_chat_messages);
    case v1::GenerateRequest::INPUT_NOT_SET:
      break;
  }
  return Invalid("prompt", "no input; set one of prompt, prompt_token_ids or chat");
}

// Constrained output: structured_output names one format, and is not combined
// with a tool_choice that constrains the output itself. What the engine
// thinks of its text is ConstraintOf's.
absl::Status CheckConstraints(const v1::GenerateRequest& request) {
  if (!request.has_structured_output()) return absl::OkStatus();
  const v1::StructuredOutput& so = request.structured_output();
  if (so.format_case() == v1::StructuredOutput::FORMAT_NOT_SET) {
    return Invalid("structured_output", "no format; set one of json_schema, json_object, regex, ebnf, choice");
  }
  if (so.has_choice() && so.choice().choices().empty()) {
    return Invalid("structured_output.choice.choices", "is empty; list at least one choice");
  }
  const v1::ToolChoice::Mode mode = request.chat().tool_choice().mode();
  if (request.has_chat() && (mode == v1::ToolChoice::REQUIRED || mode == v1::ToolChoice::FUNCTION)) {
    return Invalid("structured_output", "cannot be combined with chat.tool_choice REQUIRED or FUNCTION (which "
                                        "constrain the output to tool calls); give one or the other");
  }
  if (request.stopping().ignore_eos()) {
    return Invalid("stopping.ignore_eos", "cannot be combined with structured_output: a complete output ends "
                                          "with EOS; leave ignore_eos off");
  }
  return absl::OkStatus();
}

// The token-level controls' counts and ranges (their ids against `vocab`);
// bad words are checked again once tokenized (TokenControlsOf).
absl::Status CheckTokenControls(const v1::SamplingParams& s, int32_t vocab) {
  if (s.logit_bias_size() > kMaxLogitBias) {
    return Invalid("sampling.logit_bias", absl::StrCat(s.logit_bias_size(), " entries are more than the limit of ",
                                                       kMaxLogitBias, "; bias at most 300 tokens"));
  }
  for (const auto& [token, bias] : s.logit_bias()) {
    const std::string field = absl::StrCat("sampling.logit_bias[", token, "]");
    if (token >= static_cast<uint32_t>(vocab)) {
      return Invalid(field, absl::StrCat("token id ", token, " is outside the vocabulary (ids 0..", vocab - 1, ")"));
    }
    TPSERVE_RETURN_IF_ERROR(CheckFloat(field, bias, -kMaxLogitBiasValue, kMaxLogitBiasValue, false,
                                       "-100 all but bans the token, 100 all but forces it"));
  }
  if (s.allowed_token_ids_size() > kMaxAllowedTokenIds) {
    return Invalid("sampling.allowed_token_ids", absl::StrCat(s.allowed_token_ids_size(), " ids are more than the limit of ",
                                                              kMaxAllowedTokenIds));
  }
  TPSERVE_RETURN_IF_ERROR(CheckTokenIds("sampling.allowed_token_ids", s.allowed_token_ids(), vocab));
  if (s.bad_words_size() > kMaxBadWords) {
    return Invalid("sampling.bad_words", absl::StrCat(s.bad_words_size(), " words are more than the limit of ",
                                                      kMaxBadWords, "; give fewer"));
  }
  for (int i = 0; i < s.bad_words_size(); ++i) {
    if (absl::StripLeadingAsciiWhitespace(s.bad_words(i)).empty()) {
      return Invalid(absl::StrCat("sampling.bad_words[", i, "]"), "is empty; give a word or drop the entry");
    }
  }
  return absl::OkStatus();
}

// vLLM's tokenization of bad words: each as written (leading spaces dropped),
// and also with one leading space when that gives another first token and as
// many tokens (the word inside a text, for tokenizers that mark word starts).
std::vector<std::vector<int32_t>> BadWordTokens(const v1::SamplingParams& s, const Tokenizer& tokenizer) {
  std::vector<std::vector<int32_t>> out;
  for (const std::string& word : s.bad_words()) {
    const absl::string_view stripped = absl::StripLeadingAsciiWhitespace(word);
    const std::string bare(stripped.data(), stripped.size());
    std::vector<int32_t> plain = tokenizer.Encode(bare, /*add_special_tokens=*/false, SpecialTokensInText::kAsText);
    std::vector<int32_t> spaced =
        tokenizer.Encode(" " + bare, /*add_special_tokens=*/false, SpecialTokensInText::kAsText);
    const bool add_spaced = !spaced.empty() && !plain.empty() && spaced[0] != plain[0] && spaced.size() == plain.size();
    if (!plain.empty()) out.push_back(std::move(plain));
    if (add_spaced) out.push_back(std::move(spaced));
  }
  return out;
}

// The request's token-level controls for the workers, sorted and validated
// (sampling/token_controls.h); nullptr when it has none.
absl::StatusOr<std::shared_ptr<const TokenControls>> TokenControlsOf(const v1::SamplingParams& s,
                                                                     const Tokenizer& tokenizer, int32_t vocab) {
  if (s.logit_bias().empty() && s.allowed_token_ids().empty() && s.bad_words().empty()) return nullptr;
  auto c = std::make_shared<TokenControls>();
  for (const auto& [token, bias] : s.logit_bias()) c->logit_bias.emplace_back(static_cast<int32_t>(token), bias);
  c->allowed_token_ids.assign(s.allowed_token_ids().begin(), s.allowed_token_ids().end());
  c->bad_words = BadWordTokens(s, tokenizer);
  NormalizeTokenControls(*c);
  if (absl::Status valid = ValidateTokenControls(*c, vocab); !valid.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("sampling.", valid.message()));
  }
  return c;
}

absl::Status CheckSampling(const v1::SamplingParams& s, int32_t vocab) {
  if (s.has_temperature()) {
    TPSERVE_RETURN_IF_ERROR(CheckFloat("sampling.temperature", s.temperature(), 0.f, kMaxTemperature, false,
                                       "0 = greedy, 1 = the model's distribution"));
  }
  if (s.has_top_p()) TPSERVE_RETURN_IF_ERROR(CheckFloat("sampling.top_p", s.top_p(), 0.f, 1.f, true, "1 = off"));
  if (s.has_top_k() && s.top_k() < -1) {
    return Invalid("sampling.top_k", absl::StrCat(s.top_k(), " is outside [-1, 2^31); -1 or 0 = off, "
                                                  "k >= 1 keeps the k most likely tokens"));
  }
  if (s.has_min_p()) TPSERVE_RETURN_IF_ERROR(CheckFloat("sampling.min_p", s.min_p(), 0.f, 1.f, false, "0 = off"));
  if (s.has_repetition_penalty()) {
    TPSERVE_RETURN_IF_ERROR(CheckFloat("sampling.repetition_penalty", s.repetition_penalty(), 0.f,
                                       kMaxRepetitionPenalty, true, "1 = off"));
  }
  TPSERVE_RETURN_IF_ERROR(CheckFloat("sampling.presence_penalty", s.presence_penalty(), -2.f, 2.f, false, "0 = off"));
  TPSERVE_RETURN_IF_ERROR(CheckFloat("sampling.frequency_penalty", s.frequency_penalty(), -2.f, 2.f, false, "0 = off"));
  return CheckTokenControls(s, vocab);
}

absl::Status CheckStopping(const v1::StoppingParams& st, const RequestLimits& limits) {
  if (st.has_max_tokens() && st.max_tokens() == 0) {
    return Invalid("stopping.max_tokens", "0 is below the minimum of 1; leave it unset for what the prompt leaves "
                                          "of the model's maximum length");
  }
  if (st.has_max_tokens() && st.min_tokens() > st.max_tokens()) {
    return Invalid("stopping.min_tokens", absl::StrCat(st.min_tokens(), " is above stopping.max_tokens (",
                                                       st.max_tokens(), "); it must be in [0, max_tokens]"));
  }
  // Without max_tokens: at least one prompt token, so at most max_model_len - 1
  // generated (PrepareRequest checks the room the prompt actually leaves).
  if (limits.max_model_len > 0 && st.min_tokens() >= limits.max_model_len) {
    return Invalid("stopping.min_tokens",
                   absl::StrCat(st.min_tokens(), " is outside [0, ", limits.max_model_len - 1,
                                "] (the model's maximum length ", limits.max_model_len, " less the prompt)"));
  }
  std::vector<std::string> stop(st.stop().begin(), st.stop().end());
  if (auto status = ValidateStopStrings(stop); !status.ok()) return status;
  return CheckTokenIds("stopping.stop_token_ids", st.stop_token_ids(), limits.vocab_size);
}

// How a chat's output comes apart (chat_output.h): the reasoning, when the
// model writes <think> tags and the request leaves separate_reasoning on; the
// tool calls, in the format the model's template teaches, when the request
// gives tools.
ChatOutputOptions ChatOutputOf(const v1::GenerateRequest& request, const Tokenizer& tokenizer,
                               const ChatTemplate& format, const std::vector<int32_t>& prompt) {
  ChatOutputOptions o;
  const std::optional<int32_t> open = tokenizer.TokenToId("<think>"), close = tokenizer.TokenToId("</think>");
  if ((!request.has_separate_reasoning() || request.separate_reasoning()) && open && close) {
    o.reasoning = ReasoningFormat::kThinkTags;
    // The prompt opened a <think> it did not close (a thinking-only template).
    o.starts_in_reasoning = std::find(prompt.rbegin(), prompt.rend(), *open) <
                            std::find(prompt.rbegin(), prompt.rend(), *close);
  }
  const v1::Chat& chat = request.chat();
  if (!chat.tools_json().empty() && chat.tool_choice().mode() != v1::ToolChoice::NONE) {
    const std::string_view t = format.source();
    if (t.find("<tool_call>") != std::string_view::npos) {
      o.tool_calls = ToolCallFormat::kHermes;
    } else if (t.find("<|python_tag|>") != std::string_view::npos || t.find("\"parameters\"") != std::string_view::npos) {
      o.tool_calls = ToolCallFormat::kLlama3Json;
    }
  }
  return o;
}

// The functions tool_choice REQUIRED (all of tools_json) or FUNCTION (the
// named one) lets the model call, with their parameters' schemas.
absl::StatusOr<std::vector<ToolFunction>> CallableFunctions(const v1::Chat& chat) {
  const OJson tools = OJson::parse(chat.tools_json(), nullptr, /*allow_exceptions=*/false);  // checked by EncodeChat
  std::vector<ToolFunction> out;
  std::vector<std::string> names;
  for (size_t i = 0; tools.is_array() && i < tools.size(); ++i) {
    const OJson& f = tools[i].is_object() ? tools[i].value("function", OJson()) : OJson();
    if (!f.is_object() || !f.contains("name") || !f["name"].is_string()) {
      return Invalid(absl::StrCat("chat.tools_json[", i, "]"),
                     "is not {\"type\": \"function\", \"function\": {\"name\": ..., \"parameters\": {...}}}");
    }
    const std::string name = f["name"].get<std::string>();
    names.push_back(name);
    if (chat.tool_choice().mode() == v1::ToolChoice::FUNCTION && name != chat.tool_choice().function_name()) continue;
    const OJson params = f.value("parameters", OJson());
    if (!params.is_null() && !params.is_object()) {
      return Invalid(absl::StrCat("chat.tools_json[", i, "].function.parameters"), "is not a JSON Schema object");
    }
    out.push_back(ToolFunction{.name = name, .parameters_json = params.is_null() ? "" : params.dump()});
  }
  if (out.empty() && chat.tool_choice().mode() != v1::ToolChoice::FUNCTION) {
    return Invalid("chat.tools_json", "lists no function to call");
  }
  if (out.empty()) {
    return Invalid("chat.tool_choice.function_name",
                   absl::StrCat("\"", chat.tool_choice().function_name(), "\" is not one of the tools (",
                                absl::StrJoin(names, ", "), ")"));
  }
  return out;
}

// What the output is constrained to (structured_output, or a tool call for
// tool_choice REQUIRED / FUNCTION), and in which field the request said so;
// nullopt for free text.
absl::StatusOr<std::optional<std::pair<OutputConstraint, std::string>>> ConstraintOf(
    const v1::GenerateRequest& request, const ChatOutputOptions& chat_output) {
  OutputConstraint c;
  std::string field = "structured_output";
  using K = OutputConstraint::Kind;
  const v1::StructuredOutput& so = request.structured_output();
  const v1::ToolChoice::Mode mode = request.chat().tool_choice().mode();
  if (request.has_structured_output()) {
    switch (so.format_case()) {
      case v1::StructuredOutput::kJsonSchema: c.kind = K::kJsonSchema, c.text = so.json_schema(), field += ".json_schema"; break;
      case v1::StructuredOutput::kJsonObject: c.kind = K::kJsonObject, field += ".json_object"; break;
      case v1::StructuredOutput::kRegex: c.kind = K::kRegex, c.text = so.regex(), field += ".regex"; break;
      case v1::StructuredOutput::kEbnf: c.kind = K::kEbnf, c.text = so.ebnf(), field += ".ebnf"; break;
      case v1::StructuredOutput::kChoice:
        c.kind = K::kChoice, c.choices.assign(so.choice().choices().begin(), so.choice().choices().end());
        field += ".choice";
        break;
      case v1::StructuredOutput::FORMAT_NOT_SET: break;  // refused by CheckConstraints
    }
    c.indented = so.indented();
  } else if (request.has_chat() && (mode == v1::ToolChoice::REQUIRED || mode == v1::ToolChoice::FUNCTION)) {
    field = mode == v1::ToolChoice::FUNCTION ? "chat.tool_choice.function_name" : "chat.tool_choice.mode";
    if (chat_output.tool_calls == ToolCallFormat::kNone) {
      return Invalid(field, "this model's chat template shows no tool-call format (Hermes <tool_call> or Llama 3 "
                            "JSON calls), so a call cannot be required; use AUTO");
    }
    if (request.stopping().ignore_eos()) {
      return Invalid("stopping.ignore_eos", "cannot be combined with a required tool call; leave it off");
    }
    TPSERVE_ASSIGN_OR_RETURN(c.functions, CallableFunctions(request.chat()));
    c.kind = K::kToolCalls;
    c.tool_format = chat_output.tool_calls == ToolCallFormat::kHermes ? OutputConstraint::ToolFormat::kHermes
                                                                     : OutputConstraint::ToolFormat::kLlama3Json;
    const v1::ToolChoice& tc = request.chat().tool_choice();
    c.parallel_tool_calls = !tc.has_parallel_tool_calls() || tc.parallel_tool_calls();
  } else {
    return std::nullopt;
  }
  return std::make_pair(std::move(c), std::move(field));
}

// The request's constraint, compiled by `limits.constraints` (the engine's
// refusal is INVALID_ARGUMENT naming the field), with the model's reasoning
// tokens: only the answer after </think> is constrained
// (constrained/sequence_constraint.h). nullptr for free text.
absl::StatusOr<std::shared_ptr<const OutputConstraint>> CompiledConstraint(
    const v1::GenerateRequest& request, const Tokenizer& tokenizer, const ChatTemplate& format,
    const std::vector<int32_t>& prompt, const RequestLimits& limits) {
  const ChatOutputOptions chat_output =
      request.has_chat() ? ChatOutputOf(request, tokenizer, format, prompt) : ChatOutputOptions{};
  TPSERVE_ASSIGN_OR_RETURN(auto constraint, ConstraintOf(request, chat_output));
  if (!constraint) return std::shared_ptr<const OutputConstraint>();
  auto& [c, field] = *constraint;
  if (limits.constraints == nullptr) return Invalid(field, "constrained output is not served by this server");
  if (absl::StatusOr<std::shared_ptr<const grammar::CompiledGrammar>> compiled = limits.constraints->Compile(c);
      !compiled.ok()) {
    return Invalid(field, compiled.status().message());
  }
  const std::optional<int32_t> open = tokenizer.TokenToId("<think>"), close = tokenizer.TokenToId("</think>");
  if (open && close) {
    c.think_start = *open;
    c.think_end = *close;
    c.starts_in_reasoning = std::find(prompt.rbegin(), prompt.rend(), *open) <
                            std::find(prompt.rbegin(), prompt.rend(), *close);
  }
  return std::make_shared<const OutputConstraint>(std::move(c));
}

}  // namespace

absl::Status ValidateRequestFields(const v1::GenerateRequest& request, const RequestLimits& limits) {
  if (auto s = CheckInput(request, limits); !s.ok()) return s;
  if (auto s = CheckConstraints(request); !s.ok()) return s;
  if (auto s = CheckSampling(request.sampling(), limits.vocab_size); !s.ok()) return s;
  if (auto s = CheckStopping(request.stopping(), limits); !s.ok()) return s;
  if (request.n() > static_cast<uint32_t>(kMaxChoices)) {
    return Invalid("n", absl::StrCat(request.n(), " is outside [1, ", kMaxChoices, "]; ask for fewer choices"));
  }
  if (request.has_logprobs() && request.logprobs() > static_cast<uint32_t>(limits.max_logprobs)) {
    return Invalid("logprobs", absl::StrCat(request.logprobs(), " is outside [0, ", limits.max_logprobs,
                                            "] (alternatives per token); leave it unset for none"));
  }
  if (request.has_prompt_logprobs() && request.prompt_logprobs() > static_cast<uint32_t>(limits.max_logprobs)) {
    return Invalid("prompt_logprobs", absl::StrCat(request.prompt_logprobs(), " is outside [0, ", limits.max_logprobs,
                                                   "] (alternatives per prompt token); leave it unset for none"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<int32_t>> EncodeChat(const v1::Chat& chat, const Tokenizer& tokenizer,
                                                const ChatTemplate& chat_template, bool allow_special_tokens,
                                                int32_t max_messages) {
  if (auto s = CheckChat(chat, max_messages); !s.ok()) return s;
  absl::StatusOr<ChatInput> input = ChatInputOf(chat);
  if (!input.ok()) return input.status();
  absl::StatusOr<std::vector<ChatSegment>> segments = chat_template.RenderSegments(*input);
  if (!segments.ok()) {
    // The built-in formats name the field ("chat.messages[1].role: ..."); a
    // template's own complaint (raise_exception, "line N: ...") is about the messages.
    const absl::string_view why = segments.status().message();
    if (StartsWithChatField(why)) return absl::InvalidArgumentError(why);
    return Invalid("chat.messages", why);
  }
  return EncodeChatSegments(*segments, tokenizer, allow_special_tokens);
}

absl::StatusOr<std::vector<int32_t>> EncodeTokenizeRequest(const v1::TokenizeRequest& request,
                                                           const Tokenizer& tokenizer,
                                                           const absl::StatusOr<ChatTemplate>& format,
                                                           int32_t max_chat_messages) {
  const bool allow = request.allow_special_tokens_in_input();
  if (request.has_chat()) {
    if (!format.ok()) {
      return Invalid("chat", absl::StrCat("this model's chat format is unknown: ", format.status().message()));
    }
    return EncodeChat(request.chat(), tokenizer, *format, allow, max_chat_messages);
  }
  return tokenizer.Encode(request.text(), request.add_special_tokens(),
                          allow ? SpecialTokensInText::kMatch : SpecialTokensInText::kAsText);
}

absl::StatusOr<PreparedRequest> PrepareRequest(const v1::GenerateRequest& request,
                                               const Tokenizer& tokenizer, const ChatTemplate& format,
                                               const RequestLimits& limits) {
  if (auto s = ValidateRequestFields(request, limits); !s.ok()) return s;
  PreparedRequest out;
  absl::string_view input_field = "prompt";
  switch (request.input_case()) {
    case v1::GenerateRequest::kPrompt:
      out.prompt = tokenizer.Encode(request.prompt(), /*add_special_tokens=*/true,
                                    request.allow_special_tokens_in_input() ? SpecialTokensInText::kMatch
                                                                            : SpecialTokensInText::kAsText);
      break;
    case v1::GenerateRequest::kPromptTokenIds:
      input_field = "prompt_token_ids.ids";
      out.prompt.assign(request.prompt_token_ids().ids().begin(), request.prompt_token_ids().ids().end());
      break;
    case v1::GenerateRequest::kChat: {
      input_field = "chat.messages";
      absl::StatusOr<std::vector<int32_t>> ids = EncodeChat(
          request.chat(), tokenizer, format, request.allow_special_tokens_in_input(), limits.max_chat_messages);
      if (!ids.ok()) return ids.status();
      out.prompt = std::move(*ids);
      break;
    }
    case v1::GenerateRequest::INPUT_NOT_SET:
      break;  // rejected above
  }
  const int64_t n = static_cast<int64_t>(out.prompt.size());
  if (n == 0) return Invalid(input_field, "encodes to no tokens; give some text");
  if (n >= limits.max_model_len) {
    return Invalid(input_field, absl::StrCat("the prompt has ", n, " tokens; the model's maximum length is ",
                                             limits.max_model_len,
                                             " tokens including at least one generated token"));
  }
  const int64_t room = limits.max_model_len - n;
  const v1::StoppingParams& st = request.stopping();
  if (st.has_max_tokens() && st.max_tokens() > room) {
    return Invalid("stopping.max_tokens",
                   absl::StrCat(st.max_tokens(), " is outside [1, ", room, "]: the prompt's ", n,
                                " tokens leave room for ", room, " (maximum length ",
                                limits.max_model_len, ")"));
  }
  if (st.min_tokens() > room) {  // with max_tokens set, min_tokens <= max_tokens <= room already
    return Invalid("stopping.min_tokens",
                   absl::StrCat(st.min_tokens(), " is outside [0, ", room, "]: the prompt's ", n,
                                " tokens leave room for ", room, " (maximum length ",
                                limits.max_model_len, ")"));
  }

  const v1::SamplingParams& s = request.sampling();
  const GenerationDefaults& d = limits.defaults;
  SamplingParams& w = out.sampling;
  w.temperature = s.has_temperature() ? s.temperature() : static_cast<float>(d.temperature.value_or(1.0));
  w.top_p = s.has_top_p() ? s.top_p() : static_cast<float>(d.top_p.value_or(1.0));
  w.top_k = s.has_top_k() ? s.top_k() : static_cast<int32_t>(d.top_k.value_or(-1));
  w.min_p = s.has_min_p() ? s.min_p() : 0.f;
  w.repetition_penalty = s.has_repetition_penalty() ? s.repetition_penalty()
                                                    : static_cast<float>(d.repetition_penalty.value_or(1.0));
  w.presence_penalty = s.presence_penalty();
  w.frequency_penalty = s.frequency_penalty();
  if (s.has_seed()) w.seed = s.seed();
  w.logprobs = request.has_logprobs() ? static_cast<int32_t>(request.logprobs()) : -1;
  w.prompt_logprobs = request.has_prompt_logprobs() ? static_cast<int32_t>(request.prompt_logprobs()) : -1;
  TPSERVE_ASSIGN_OR_RETURN(w.controls, TokenControlsOf(s, tokenizer, limits.vocab_size));
  out.n = std::max<int32_t>(1, static_cast<int32_t>(request.n()));
  out.speculate = !request.disable_speculation();

  out.stop.max_tokens = st.has_max_tokens() ? st.max_tokens() : room;
  out.stop.min_tokens = st.min_tokens();
  out.stop.stop.assign(st.stop().begin(), st.stop().end());
  out.stop.stop_token_ids.assign(st.stop_token_ids().begin(), st.stop_token_ids().end());
  out.stop.ignore_eos = st.ignore_eos();
  out.stop.include_stop_str_in_output = st.include_stop_str_in_output();
  out.stop.skip_special_tokens = request.skip_special_tokens();
  // spaces_between_special_tokens: vLLM applies it only in its slow-tokenizer
  // path; with a tokenizer.json (fast) tokenizer, the only kind tpserve loads,
  // vLLM's text is the same for either value, and so is tpserve's (Decode).
  if (request.has_chat()) out.stop.chat_output = ChatOutputOf(request, tokenizer, format, out.prompt);
  TPSERVE_ASSIGN_OR_RETURN(out.sampling.constraint, CompiledConstraint(request, tokenizer, format, out.prompt, limits));
  return out;
}

}  // namespace tpserve
