#include "http/openai_request.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <utility>

#include "absl/strings/cord.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "base/status_macros.h"
#include "json/strict_json.h"
#include "nlohmann/json.hpp"

namespace tpserve::http {
namespace {

namespace v1 = tpserve::v1;
using nlohmann::json;

constexpr char kParamPayload[] = "tpserve.http/param";

const char* TypeName(const json& v) {
  if (v.is_boolean()) return "a boolean";
  if (v.is_number_integer() || v.is_number_unsigned()) return "an integer";
  if (v.is_number()) return "a number";
  if (v.is_string()) return "a string";
  if (v.is_array()) return "an array";
  if (v.is_object()) return "an object";
  return "null";
}

absl::Status WrongType(absl::string_view field, const json& v, absl::string_view want) {
  return InvalidField(field, absl::StrCat("expected ", want, ", got ", TypeName(v)));
}

absl::StatusOr<bool> Bool(const json& v, absl::string_view field) {
  if (!v.is_boolean()) return WrongType(field, v, "a boolean");
  return v.get<bool>();
}

absl::StatusOr<std::string> String(const json& v, absl::string_view field) {
  if (!v.is_string()) return WrongType(field, v, "a string");
  return v.get<std::string>();
}

absl::StatusOr<float> Float(const json& v, absl::string_view field) {
  if (!v.is_number()) return WrongType(field, v, "a number");
  const double d = v.get<double>();
  if (!std::isfinite(d) || std::abs(d) > std::numeric_limits<float>::max()) {
    return InvalidField(field, absl::StrCat(d, " is not a finite 32-bit float"));
  }
  return static_cast<float>(d);
}

// An integer in [lo, hi].
absl::StatusOr<int64_t> Integer(const json& v, absl::string_view field, int64_t lo, int64_t hi) {
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(hi) || static_cast<int64_t>(u) < lo) {
      return InvalidField(field, absl::StrCat(u, " is outside [", lo, ", ", hi, "]"));
    }
    return static_cast<int64_t>(u);
  }
  if (!v.is_number_integer()) return WrongType(field, v, "an integer");
  const int64_t i = v.get<int64_t>();
  if (i < lo || i > hi) return InvalidField(field, absl::StrCat(i, " is outside [", lo, ", ", hi, "]"));
  return i;
}

absl::StatusOr<uint32_t> Uint32(const json& v, absl::string_view field) {
  absl::StatusOr<int64_t> i = Integer(v, field, 0, std::numeric_limits<uint32_t>::max());
  if (!i.ok()) return i.status();
  return static_cast<uint32_t>(*i);
}

// A list of token ids (each a uint32).
absl::Status TokenIds(const json& v, absl::string_view field, v1::TokenIds* out) {
  if (!v.is_array()) return WrongType(field, v, "an array of token ids");
  for (size_t i = 0; i < v.size(); ++i) {
    absl::StatusOr<uint32_t> id = Uint32(v[i], absl::StrCat(field, "[", i, "]"));
    if (!id.ok()) return id.status();
    out->add_ids(*id);
  }
  return absl::OkStatus();
}

// Sets `set` from a field's value, or says what is wrong with it.
using FieldSetter = std::function<absl::Status(const json& value, OpenAiRequest& r)>;

template <typename T, typename Get, typename Apply>
FieldSetter Setter(Get get, Apply apply, std::string field) {
  return [get, apply, field](const json& v, OpenAiRequest& r) -> absl::Status {
    absl::StatusOr<T> value = get(v, field);
    if (!value.ok()) return value.status();
    return apply(r, *value);
  };
}

FieldSetter FloatField(std::string field, void (v1::SamplingParams::*set)(float)) {
  return Setter<float>(Float, [set](OpenAiRequest& r, float f) {
    (r.grpc.mutable_sampling()->*set)(f);
    return absl::OkStatus();
  }, std::move(field));
}

FieldSetter BoolField(std::string field, std::function<void(OpenAiRequest&, bool)> set) {
  return Setter<bool>(Bool, [set](OpenAiRequest& r, bool b) {
    set(r, b);
    return absl::OkStatus();
  }, std::move(field));
}

absl::Status SetStop(const json& v, OpenAiRequest& r) {
  v1::StoppingParams* st = r.grpc.mutable_stopping();
  if (v.is_string()) {
    st->add_stop(v.get<std::string>());
    return absl::OkStatus();
  }
  if (!v.is_array()) return WrongType("stop", v, "a string or an array of strings");
  for (size_t i = 0; i < v.size(); ++i) {
    absl::StatusOr<std::string> s = String(v[i], absl::StrCat("stop[", i, "]"));
    if (!s.ok()) return s.status();
    st->add_stop(*s);
  }
  return absl::OkStatus();
}

absl::Status SetMaxTokens(const json& v, OpenAiRequest& r, absl::string_view field) {
  absl::StatusOr<uint32_t> n = Uint32(v, field);
  if (!n.ok()) return n.status();
  v1::StoppingParams* st = r.grpc.mutable_stopping();
  if (st->has_max_tokens() && st->max_tokens() != *n) {
    return InvalidField(field, "max_tokens and max_completion_tokens disagree; give one of them");
  }
  st->set_max_tokens(*n);
  return absl::OkStatus();
}

// temperature, top_p, min_p, the penalties, top_k, seed: GenerateRequest.sampling.
void AddSamplingFields(std::map<std::string, FieldSetter>& f) {
  f["temperature"] = FloatField("temperature", &v1::SamplingParams::set_temperature);
  f["top_p"] = FloatField("top_p", &v1::SamplingParams::set_top_p);
  f["min_p"] = FloatField("min_p", &v1::SamplingParams::set_min_p);
  f["presence_penalty"] = FloatField("presence_penalty", &v1::SamplingParams::set_presence_penalty);
  f["frequency_penalty"] = FloatField("frequency_penalty", &v1::SamplingParams::set_frequency_penalty);
  f["repetition_penalty"] = FloatField("repetition_penalty", &v1::SamplingParams::set_repetition_penalty);
  f["top_k"] = [](const json& v, OpenAiRequest& r) -> absl::Status {
    absl::StatusOr<int64_t> k = Integer(v, "top_k", -1, std::numeric_limits<int32_t>::max());
    if (!k.ok()) return k.status();
    r.grpc.mutable_sampling()->set_top_k(static_cast<int32_t>(*k));
    return absl::OkStatus();
  };
  f["seed"] = [](const json& v, OpenAiRequest& r) -> absl::Status {
    // OpenAI's seed is any 64-bit integer; a negative one keeps its bits.
    if (v.is_number_unsigned()) {
      r.grpc.mutable_sampling()->set_seed(v.get<uint64_t>());
      return absl::OkStatus();
    }
    if (!v.is_number_integer()) return WrongType("seed", v, "an integer");
    r.grpc.mutable_sampling()->set_seed(static_cast<uint64_t>(v.get<int64_t>()));
    return absl::OkStatus();
  };
}

// OpenAI's logit_bias: {"token id": bias, ...}, the ids as strings of digits.
// Count, ids and range are the coordinator's (sampling.logit_bias).
absl::Status SetLogitBias(const json& v, OpenAiRequest& r) {
  if (!v.is_object()) return WrongType("logit_bias", v, "an object of token ids (as strings) to numbers");
  auto* bias = r.grpc.mutable_sampling()->mutable_logit_bias();
  for (const auto& [key, value] : v.items()) {
    uint64_t id = 0;
    const bool digits = !key.empty() && key.size() <= 10 &&
                        std::all_of(key.begin(), key.end(), [](char c) { return c >= '0' && c <= '9'; });
    if (digits) id = std::stoull(key);
    if (!digits || id > std::numeric_limits<uint32_t>::max()) {
      return InvalidField("logit_bias", absl::StrCat("key \"", absl::CEscape(key.substr(0, 32)),
                                                     "\" is not a token id; write ids as strings of digits (\"50256\")"));
    }
    absl::StatusOr<float> b = Float(value, absl::StrCat("logit_bias[", key, "]"));
    if (!b.ok()) return b.status();
    (*bias)[static_cast<uint32_t>(id)] = *b;
  }
  return absl::OkStatus();
}

// vLLM's bad_words: an array of strings.
absl::Status SetBadWords(const json& v, OpenAiRequest& r) {
  if (!v.is_array()) return WrongType("bad_words", v, "an array of strings");
  for (size_t i = 0; i < v.size(); ++i) {
    absl::StatusOr<std::string> w = String(v[i], absl::StrCat("bad_words[", i, "]"));
    if (!w.ok()) return w.status();
    r.grpc.mutable_sampling()->add_bad_words(*w);
  }
  return absl::OkStatus();
}

// vLLM's structured_outputs: exactly one of json (a schema, as an object or
// JSON text), regex, choice (strings), grammar (GBNF).
absl::Status SetStructuredOutputs(const json& v, OpenAiRequest& r) {
  if (!v.is_object()) return WrongType("structured_outputs", v, "an object");
  v1::StructuredOutput* so = r.grpc.mutable_structured_output();
  int given = 0;
  for (const auto& [key, value] : v.items()) {
    if (value.is_null()) continue;
    const std::string field = absl::StrCat("structured_outputs.", key);
    ++given;
    if (key == "json") {
      if (!value.is_object() && !value.is_string()) return WrongType(field, value, "a JSON Schema object");
      so->set_json_schema(value.is_string() ? value.get<std::string>() : value.dump());
    } else if (key == "regex" || key == "grammar") {
      absl::StatusOr<std::string> text = String(value, field);
      if (!text.ok()) return text.status();
      key == "regex" ? so->set_regex(*text) : so->set_ebnf(*text);
    } else if (key == "choice") {
      if (!value.is_array() || value.empty()) return WrongType(field, value, "a non-empty array of strings");
      for (size_t i = 0; i < value.size(); ++i) {
        absl::StatusOr<std::string> c = String(value[i], absl::StrCat(field, "[", i, "]"));
        if (!c.ok()) return c.status();
        so->mutable_choice()->add_choices(*c);
      }
    } else {
      return InvalidField(field, "unknown field; known: json, regex, choice, grammar");
    }
  }
  if (given != 1) return InvalidField("structured_outputs", "give exactly one of json, regex, choice, grammar");
  return absl::OkStatus();
}

// The fields both endpoints take.
std::map<std::string, FieldSetter> CommonFields() {
  std::map<std::string, FieldSetter> f;
  f["model"] = Setter<std::string>(String, [](OpenAiRequest& r, std::string m) {
    r.model = std::move(m);
    return absl::OkStatus();
  }, "model");
  f["stream"] = BoolField("stream", [](OpenAiRequest& r, bool b) { r.stream = b; });
  f["stream_options"] = [](const json& v, OpenAiRequest& r) -> absl::Status {
    if (!v.is_object()) return WrongType("stream_options", v, "an object");
    for (const auto& [key, value] : v.items()) {
      const std::string field = absl::StrCat("stream_options.", key);
      if (key != "include_usage") return InvalidField(field, "unknown field; the one known is include_usage");
      if (value.is_null()) continue;
      absl::StatusOr<bool> b = Bool(value, field);
      if (!b.ok()) return b.status();
      r.include_usage = *b;
    }
    return absl::OkStatus();
  };
  f["max_tokens"] = [](const json& v, OpenAiRequest& r) { return SetMaxTokens(v, r, "max_tokens"); };
  // vLLM's: each prompt token's log-prob, rank and this many alternatives.
  f["prompt_logprobs"] = Setter<uint32_t>(Uint32, [](OpenAiRequest& r, uint32_t n) {
    r.prompt_logprobs = true;
    r.grpc.set_prompt_logprobs(n);
    return absl::OkStatus();
  }, "prompt_logprobs");
  f["min_tokens"] = Setter<uint32_t>(Uint32, [](OpenAiRequest& r, uint32_t n) {
    r.grpc.mutable_stopping()->set_min_tokens(n);
    return absl::OkStatus();
  }, "min_tokens");
  f["stop"] = SetStop;
  f["stop_token_ids"] = [](const json& v, OpenAiRequest& r) {
    v1::TokenIds ids;
    absl::Status s = TokenIds(v, "stop_token_ids", &ids);
    for (uint32_t id : ids.ids()) r.grpc.mutable_stopping()->add_stop_token_ids(id);
    return s;
  };
  f["ignore_eos"] = BoolField("ignore_eos", [](OpenAiRequest& r, bool b) {
    r.grpc.mutable_stopping()->set_ignore_eos(b);
  });
  f["include_stop_str_in_output"] = BoolField("include_stop_str_in_output", [](OpenAiRequest& r, bool b) {
    r.grpc.mutable_stopping()->set_include_stop_str_in_output(b);
  });
  f["skip_special_tokens"] = BoolField("skip_special_tokens", [](OpenAiRequest& r, bool b) {
    r.grpc.set_skip_special_tokens(b);
  });
  f["spaces_between_special_tokens"] = BoolField("spaces_between_special_tokens", [](OpenAiRequest& r, bool b) {
    r.grpc.set_spaces_between_special_tokens(b);
  });
  f["logit_bias"] = SetLogitBias;
  f["allowed_token_ids"] = [](const json& v, OpenAiRequest& r) {
    v1::TokenIds ids;
    absl::Status s = TokenIds(v, "allowed_token_ids", &ids);
    for (uint32_t id : ids.ids()) r.grpc.mutable_sampling()->add_allowed_token_ids(id);
    return s;
  };
  f["bad_words"] = SetBadWords;
  f["return_tokens_as_token_ids"] = BoolField("return_tokens_as_token_ids",
                                              [](OpenAiRequest& r, bool b) { r.tokens_as_ids = b; });
  AddSamplingFields(f);
  f["structured_outputs"] = SetStructuredOutputs;
  f["n"] = [](const json& v, OpenAiRequest& r) -> absl::Status {
    absl::StatusOr<int64_t> n = Integer(v, "n", 1, 128);  // OpenAI's bound (coordinator/request.h kMaxChoices)
    if (!n.ok()) return n.status();
    r.grpc.set_n(static_cast<uint32_t>(*n));
    return absl::OkStatus();
  };
  f["user"] = [](const json& v, OpenAiRequest&) -> absl::Status {
    return v.is_string() ? absl::OkStatus() : WrongType("user", v, "a string");
  };
  return f;
}

// The text of a message's content: a string, or an array of {"type": "text", "text"} parts.
absl::StatusOr<std::string> ContentText(const json& v, const std::string& field) {
  if (v.is_string()) return v.get<std::string>();
  if (!v.is_array()) return WrongType(field, v, "a string or an array of text parts");
  std::string text;
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string part = absl::StrCat(field, "[", i, "]");
    if (!v[i].is_object()) return WrongType(part, v[i], "an object {\"type\": \"text\", \"text\": ...}");
    const auto type = v[i].find("type");
    if (type == v[i].end() || *type != "text") {
      return InvalidField(absl::StrCat(part, ".type"), "only \"text\" parts are supported");
    }
    const auto t = v[i].find("text");
    if (t == v[i].end()) return InvalidField(absl::StrCat(part, ".text"), "missing");
    absl::StatusOr<std::string> s = String(*t, absl::StrCat(part, ".text"));
    if (!s.ok()) return s.status();
    text += *s;
  }
  return text;
}

absl::Status ToolCalls(const json& v, const std::string& field, v1::ChatMessage* m) {
  if (!v.is_array()) return WrongType(field, v, "an array of tool calls");
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string call = absl::StrCat(field, "[", i, "]");
    if (!v[i].is_object()) return WrongType(call, v[i], "an object");
    v1::ToolCall* c = m->add_tool_calls();
    for (const auto& [key, value] : v[i].items()) {
      const std::string f = absl::StrCat(call, ".", key);
      if (key == "id" || key == "type") {
        absl::StatusOr<std::string> s = String(value, f);
        if (!s.ok()) return s.status();
        key == "id" ? c->set_id(*s) : c->set_type(*s);
      } else if (key == "function") {
        if (!value.is_object()) return WrongType(f, value, "an object {\"name\", \"arguments\"}");
        for (const auto& [fk, fv] : value.items()) {
          const std::string ff = absl::StrCat(f, ".", fk);
          if (fk != "name" && fk != "arguments") return InvalidField(ff, "unknown field; known: name, arguments");
          absl::StatusOr<std::string> s = String(fv, ff);
          if (!s.ok()) return s.status();
          fk == "name" ? c->set_name(*s) : c->set_arguments(*s);
        }
      } else {
        return InvalidField(f, "unknown field; known: id, type, function");
      }
    }
  }
  return absl::OkStatus();
}

absl::Status Message(const json& v, const std::string& field, v1::ChatMessage* m) {
  if (!v.is_object()) return WrongType(field, v, "an object {\"role\", \"content\"}");
  if (!v.contains("role")) return InvalidField(absl::StrCat(field, ".role"), "missing");
  for (const auto& [key, value] : v.items()) {
    const std::string f = absl::StrCat(field, ".", key);
    if (value.is_null()) continue;
    if (key == "content") {
      absl::StatusOr<std::string> text = ContentText(value, f);
      if (!text.ok()) return text.status();
      m->set_content(*text);
    } else if (key == "tool_calls") {
      TPSERVE_RETURN_IF_ERROR(ToolCalls(value, f, m));
    } else if (key == "role" || key == "name" || key == "tool_call_id" || key == "reasoning_content") {
      absl::StatusOr<std::string> s = String(value, f);
      if (!s.ok()) return s.status();
      if (key == "role") m->set_role(*s);
      if (key == "name") m->set_name(*s);
      if (key == "tool_call_id") m->set_tool_call_id(*s);
      if (key == "reasoning_content") m->set_reasoning_content(*s);
    } else {
      return InvalidField(f, "unknown field; known: role, content, name, tool_calls, tool_call_id, reasoning_content");
    }
  }
  return absl::OkStatus();
}

absl::Status SetMessages(const json& v, OpenAiRequest& r) {
  if (!v.is_array()) return WrongType("messages", v, "an array of messages");
  if (v.empty()) return InvalidField("messages", "give at least one message");
  v1::Chat* chat = r.grpc.mutable_chat();
  chat->set_add_generation_prompt(true);
  for (size_t i = 0; i < v.size(); ++i) {
    TPSERVE_RETURN_IF_ERROR(Message(v[i], absl::StrCat("messages[", i, "]"), chat->add_messages()));
  }
  return absl::OkStatus();
}

// tool_choice: "auto" | "none" | "required" | {"type": "function", "function": {"name": NAME}}.
absl::Status SetToolChoice(const json& v, OpenAiRequest& r) {
  v1::ToolChoice* tc = r.grpc.mutable_chat()->mutable_tool_choice();
  if (v.is_string()) {
    const std::string mode = v.get<std::string>();
    if (mode == "auto") return absl::OkStatus();
    if (mode == "none") return tc->set_mode(v1::ToolChoice::NONE), absl::OkStatus();
    if (mode == "required") return tc->set_mode(v1::ToolChoice::REQUIRED), absl::OkStatus();
    return InvalidField("tool_choice", "is \"auto\", \"none\", \"required\" or {\"type\": \"function\", "
                                       "\"function\": {\"name\": ...}}");
  }
  if (!v.is_object()) return WrongType("tool_choice", v, "a string or an object");
  const json type = v.value("type", json()), function = v.value("function", json());
  if (type != "function" || !function.is_object() || !function.value("name", json()).is_string()) {
    return InvalidField("tool_choice", "an object names a function: {\"type\": \"function\", \"function\": "
                                       "{\"name\": ...}}");
  }
  tc->set_mode(v1::ToolChoice::FUNCTION);
  tc->set_function_name(function["name"].get<std::string>());
  return absl::OkStatus();
}

// response_format: {"type": "text" | "json_object" | "json_schema", "json_schema": {"name", "schema", "strict"}}.
absl::Status SetResponseFormat(const json& v, OpenAiRequest& r) {
  if (!v.is_object()) return WrongType("response_format", v, "an object {\"type\": ...}");
  const json type = v.value("type", json());
  if (type == "text") return absl::OkStatus();
  if (type == "json_object") return r.grpc.mutable_structured_output()->set_json_object(true), absl::OkStatus();
  if (type != "json_schema") {
    return InvalidField("response_format.type", "is \"text\", \"json_object\" or \"json_schema\"");
  }
  const json spec = v.value("json_schema", json());
  if (!spec.is_object() || !spec.contains("schema") || !spec["schema"].is_object()) {
    return InvalidField("response_format.json_schema", "give {\"name\": ..., \"schema\": {...}}");
  }
  r.grpc.mutable_structured_output()->set_json_schema(spec["schema"].dump());
  return absl::OkStatus();
}

std::map<std::string, FieldSetter> ChatFields() {
  std::map<std::string, FieldSetter> f = CommonFields();
  f["messages"] = SetMessages;
  f["max_completion_tokens"] = [](const json& v, OpenAiRequest& r) {
    return SetMaxTokens(v, r, "max_completion_tokens");
  };
  f["logprobs"] = BoolField("logprobs", [](OpenAiRequest& r, bool b) { r.logprobs = b; });
  f["top_logprobs"] = Setter<uint32_t>(Uint32, [](OpenAiRequest& r, uint32_t n) {
    r.grpc.set_logprobs(n);
    return absl::OkStatus();
  }, "top_logprobs");
  f["tools"] = [](const json& v, OpenAiRequest& r) -> absl::Status {
    if (!v.is_array()) return WrongType("tools", v, "an array of tool schemas");
    if (!v.empty()) r.grpc.mutable_chat()->set_tools_json(v.dump());
    return absl::OkStatus();
  };
  f["tool_choice"] = SetToolChoice;
  f["parallel_tool_calls"] = BoolField("parallel_tool_calls", [](OpenAiRequest& r, bool b) {
    r.grpc.mutable_chat()->mutable_tool_choice()->set_parallel_tool_calls(b);
  });
  f["response_format"] = SetResponseFormat;
  f["separate_reasoning"] = BoolField("separate_reasoning", [](OpenAiRequest& r, bool b) {
    r.grpc.set_separate_reasoning(b);
  });
  f["chat_template_kwargs"] = [](const json& v, OpenAiRequest& r) -> absl::Status {
    if (!v.is_object()) return WrongType("chat_template_kwargs", v, "an object");
    auto& kwargs = *r.grpc.mutable_chat()->mutable_chat_template_kwargs();
    for (const auto& [key, value] : v.items()) kwargs[key] = value.dump();
    return absl::OkStatus();
  };
  return f;
}

// Prompts one completions request may list (each its own call; OpenAI's bound).
constexpr size_t kMaxPrompts = 2048;

// A completion prompt: text, token ids, or a list of those (several: one
// call each, OpenAiRequest::prompts).
absl::Status SetPrompt(const json& v, OpenAiRequest& r) {
  if (v.is_string()) {
    r.grpc.set_prompt(v.get<std::string>());
    return absl::OkStatus();
  }
  if (!v.is_array()) return WrongType("prompt", v, "a string, an array of token ids, or a list of those");
  if (v.empty()) return InvalidField("prompt", "the prompt is empty");
  if (!v[0].is_string() && !v[0].is_array()) return TokenIds(v, "prompt", r.grpc.mutable_prompt_token_ids());
  if (v.size() > kMaxPrompts) {
    return InvalidField("prompt", absl::StrCat("a list of ", v.size(), " prompts; at most ", kMaxPrompts));
  }
  std::vector<v1::GenerateRequest> prompts(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string field = absl::StrCat("prompt[", i, "]");
    if (v[i].is_string()) {
      prompts[i].set_prompt(v[i].get<std::string>());
    } else if (!v[i].is_array()) {
      return WrongType(field, v[i], "a string or an array of token ids, as the list's first");
    } else {
      TPSERVE_RETURN_IF_ERROR(TokenIds(v[i], field, prompts[i].mutable_prompt_token_ids()));
    }
  }
  r.grpc.MergeFrom(prompts[0]);
  if (prompts.size() > 1) r.prompts = std::move(prompts);
  return absl::OkStatus();
}

std::map<std::string, FieldSetter> CompletionFields() {
  std::map<std::string, FieldSetter> f = CommonFields();
  f["prompt"] = SetPrompt;
  // OpenAI's completions logprobs: the number of alternatives (0 = the chosen token only).
  f["logprobs"] = Setter<uint32_t>(Uint32, [](OpenAiRequest& r, uint32_t n) {
    r.logprobs = true;
    r.grpc.set_logprobs(n);
    return absl::OkStatus();
  }, "logprobs");
  // Dropped by vLLM too: the server would sample best_of and return the n most
  // likely. 1 (the same as absent) is accepted.
  f["best_of"] = [](const json& v, OpenAiRequest&) -> absl::Status {
    absl::StatusOr<int64_t> best_of = Integer(v, "best_of", 1, std::numeric_limits<int32_t>::max());
    if (!best_of.ok()) return best_of.status();
    if (*best_of != 1) {
      return InvalidField("best_of", absl::StrCat("best_of = ", *best_of, " is not supported (vLLM dropped it too); ask "
                                                 "for n choices with logprobs and pick the best yourself"));
    }
    return absl::OkStatus();
  };
  f["echo"] = Setter<bool>(Bool, [](OpenAiRequest& r, bool echo) {
    r.echo = echo;
    return absl::OkStatus();
  }, "echo");
  return f;
}

const std::map<std::string, FieldSetter>& Fields(Endpoint endpoint) {
  static const auto* chat = new std::map<std::string, FieldSetter>(ChatFields());
  static const auto* completion = new std::map<std::string, FieldSetter>(CompletionFields());
  return endpoint == Endpoint::kChatCompletions ? *chat : *completion;
}

std::string KnownFields(Endpoint endpoint) {
  std::string out;
  for (const auto& [name, setter] : Fields(endpoint)) absl::StrAppend(&out, out.empty() ? "" : ", ", name);
  return out;
}

// echo and prompt_logprobs: the prompt's tokens and log-probs come on each
// choice's first chunk (GenerateRequest.prompt_logprobs; streamed, that
// chunk's event carries the echoed prompt and its log-probs); echo asks for them
// with logprobs' alternatives (0 without logprobs: the echoed tokens' texts).
// max_tokens 0 with echo asks for one token, which the response drops.
absl::Status FinishEcho(OpenAiRequest& r) {
  if (r.echo && !r.grpc.has_prompt_logprobs()) r.grpc.set_prompt_logprobs(r.logprobs ? r.grpc.logprobs() : 0);
  if (r.echo && r.grpc.stopping().max_tokens() == 0) {
    r.echo_only = true;
    r.grpc.mutable_stopping()->set_max_tokens(1);
  }
  return absl::OkStatus();
}

// What the body does not say itself: the input is required, the defaults of
// the endpoint, and the checks across fields.
absl::Status Finish(const json& body, OpenAiRequest& r) {
  const bool chat = r.endpoint == Endpoint::kChatCompletions;
  // tools or chat_template_kwargs alone create the chat message: its messages decide.
  if (chat && r.grpc.chat().messages().empty()) return InvalidField("messages", "missing: give the conversation");
  if (!chat && r.grpc.input_case() == v1::GenerateRequest::INPUT_NOT_SET) {
    return InvalidField("prompt", "missing: give the prompt");
  }
  if (!chat && !r.grpc.stopping().has_max_tokens()) r.grpc.mutable_stopping()->set_max_tokens(16);
  if (chat && body.value("tool_choice", json()) == "none") r.grpc.mutable_chat()->clear_tools_json();
  if (chat && r.grpc.chat().tool_choice().mode() >= v1::ToolChoice::REQUIRED && r.grpc.chat().tools_json().empty()) {
    return InvalidField("tool_choice", "needs tools: list the functions the model may call");
  }
  if (r.grpc.has_structured_output() && body.contains("response_format") && body.contains("structured_outputs")) {
    return InvalidField("structured_outputs", "give response_format or structured_outputs, not both");
  }
  if (chat && r.grpc.has_logprobs() && !r.logprobs) {
    return InvalidField("top_logprobs", "needs logprobs: true");
  }
  if (r.logprobs && !r.grpc.has_logprobs()) r.grpc.set_logprobs(0);
  if (!r.logprobs) r.grpc.clear_logprobs();
  if (r.include_usage && !r.stream) return InvalidField("stream_options", "only with stream: true");
  return FinishEcho(r);
}

}  // namespace

namespace {

// The body as a JSON object, nested at most kMaxJsonDepth deep and with no
// key twice in one object (json/strict_json.h): checked before any DOM exists.
absl::StatusOr<json> ParseObject(absl::string_view body) {
  absl::StatusOr<json> parsed = ParseJson(body, JsonLimits{.max_depth = kMaxJsonDepth});
  if (!parsed.ok()) return absl::InvalidArgumentError(absl::StrCat("the body ", parsed.status().message()));
  if (!parsed->is_object()) return absl::InvalidArgumentError("the body must be a JSON object");
  return parsed;
}

// The JSON that reaches the coordinator as text keeps the order its writer
// gave it: a schema's properties are the order of the output's members
// (grammar/json_schema.h) and the tools are rendered by the chat template as
// sent. `json` sorts an object's keys, so these few values are dumped again
// from an order-keeping parse of the same body (already checked).
absl::Status KeepWrittenOrder(absl::string_view body, const json& parsed, OpenAiRequest& r) {
  const bool from_format = parsed.contains("response_format") && parsed["response_format"].is_object() &&
                           parsed["response_format"].value("type", json()) == "json_schema";
  const bool from_outputs = parsed.contains("structured_outputs") && parsed["structured_outputs"].is_object() &&
                            parsed["structured_outputs"].value("json", json()).is_object();
  const bool schema_object = r.grpc.structured_output().has_json_schema() && (from_format || from_outputs);
  const bool tools = !r.grpc.chat().tools_json().empty();
  if (!schema_object && !tools) return absl::OkStatus();
  absl::StatusOr<nlohmann::ordered_json> ordered =
      ParseJson<nlohmann::ordered_json>(body, JsonLimits{.max_depth = kMaxJsonDepth});
  if (!ordered.ok()) return absl::InvalidArgumentError(absl::StrCat("the body ", ordered.status().message()));
  if (schema_object) {
    const nlohmann::ordered_json& schema = from_format
                                               ? (*ordered)["response_format"]["json_schema"]["schema"]
                                               : (*ordered)["structured_outputs"]["json"];
    r.grpc.mutable_structured_output()->set_json_schema(schema.dump());
  }
  if (tools) r.grpc.mutable_chat()->set_tools_json((*ordered)["tools"].dump());
  return absl::OkStatus();
}

}  // namespace

absl::Status InvalidField(absl::string_view field, absl::string_view what) {
  absl::Status status = absl::InvalidArgumentError(absl::StrCat(field, ": ", what));
  status.SetPayload(kParamPayload, absl::Cord(field));
  return status;
}

absl::StatusOr<OpenAiRequest> ParseRequest(Endpoint endpoint, absl::string_view body) {
  TPSERVE_ASSIGN_OR_RETURN(const json parsed, ParseObject(body));
  OpenAiRequest r;
  r.endpoint = endpoint;
  r.grpc.set_skip_special_tokens(true);  // OpenAI's text holds no special tokens
  const std::map<std::string, FieldSetter>& fields = Fields(endpoint);
  for (const auto& [key, value] : parsed.items()) {
    const auto it = fields.find(key);
    if (it == fields.end()) {
      return InvalidField(key, absl::StrCat("unknown field; this endpoint takes ", KnownFields(endpoint)));
    }
    if (!value.is_null()) TPSERVE_RETURN_IF_ERROR(it->second(value, r));
  }
  TPSERVE_RETURN_IF_ERROR(Finish(parsed, r));
  TPSERVE_RETURN_IF_ERROR(KeepWrittenOrder(body, parsed, r));
  return r;
}


absl::StatusOr<v1::TokenizeRequest> ParseTokenizeRequest(absl::string_view body, std::string* model) {
  TPSERVE_ASSIGN_OR_RETURN(const json parsed, ParseObject(body));
  v1::TokenizeRequest request;
  request.set_add_special_tokens(true);
  std::optional<bool> generation_prompt;
  for (const auto& [key, value] : parsed.items()) {
    if (value.is_null()) continue;
    if (key == "model") {
      TPSERVE_ASSIGN_OR_RETURN(*model, String(value, key));
    } else if (key == "prompt") {
      TPSERVE_ASSIGN_OR_RETURN(*request.mutable_text(), String(value, key));
    } else if (key == "messages") {
      OpenAiRequest chat;
      TPSERVE_RETURN_IF_ERROR(SetMessages(value, chat));
      *request.mutable_chat() = chat.grpc.chat();
    } else if (key == "add_special_tokens" || key == "add_generation_prompt") {
      TPSERVE_ASSIGN_OR_RETURN(const bool b, Bool(value, key));
      key == "add_special_tokens" ? request.set_add_special_tokens(b) : void(generation_prompt = b);
    } else {
      return InvalidField(key, "unknown field; known: model, prompt, messages, add_special_tokens, "
                               "add_generation_prompt");
    }
  }
  if (request.input_case() == v1::TokenizeRequest::INPUT_NOT_SET) {
    return InvalidField("prompt", "missing: give prompt or messages");
  }
  if (generation_prompt && request.has_chat()) request.mutable_chat()->set_add_generation_prompt(*generation_prompt);
  return request;
}

absl::StatusOr<v1::DetokenizeRequest> ParseDetokenizeRequest(absl::string_view body, std::string* model) {
  TPSERVE_ASSIGN_OR_RETURN(const json parsed, ParseObject(body));
  v1::DetokenizeRequest request;
  bool has_tokens = false;
  for (const auto& [key, value] : parsed.items()) {
    if (value.is_null()) continue;
    if (key == "model") {
      TPSERVE_ASSIGN_OR_RETURN(*model, String(value, key));
    } else if (key == "tokens") {
      v1::TokenIds ids;
      TPSERVE_RETURN_IF_ERROR(TokenIds(value, key, &ids));
      *request.mutable_token_ids() = ids.ids();
      has_tokens = true;
    } else {
      return InvalidField(key, "unknown field; known: model, tokens");
    }
  }
  if (!has_tokens) return InvalidField("tokens", "missing: give the token ids");
  return request;
}

std::optional<std::string> OpenAiParam(const absl::Status& status, Endpoint endpoint) {
  if (auto param = status.GetPayload(kParamPayload)) return std::string(*param);
  if (status.code() != absl::StatusCode::kInvalidArgument) return std::nullopt;
  const absl::string_view message = status.message();
  const size_t colon = message.find(": ");
  if (colon == absl::string_view::npos || message.substr(0, colon).find(' ') != absl::string_view::npos) {
    return std::nullopt;
  }
  absl::string_view field = message.substr(0, colon);
  const bool chat = endpoint == Endpoint::kChatCompletions;
  // The coordinator's proto fields (coordinator/request.cc) by their OpenAI names.
  for (absl::string_view prefix : {"sampling.", "stopping."}) {
    if (absl::ConsumePrefix(&field, prefix)) return std::string(field.substr(0, field.find('[')));
  }
  if (absl::ConsumePrefix(&field, "chat.")) {
    if (absl::ConsumePrefix(&field, "tools_json")) return "tools";
    return std::string(field);  // messages[i].role, chat_template_kwargs[...]
  }
  if (field == "chat") return "messages";
  if (field == "token_ids") return "tokens";  // Detokenize
  if (field == "logprobs") return chat ? "top_logprobs" : "logprobs";
  if (field == "prompt_logprobs") return std::string(field);
  if (absl::StartsWith(field, "prompt")) return chat ? "messages" : "prompt";
  return std::string(field);
}

}  // namespace tpserve::http
