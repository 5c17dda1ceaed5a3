#!/usr/bin/env python3
"""Writes the seed inputs and libFuzzer dictionaries for scripts/fuzz.sh.

    scripts/fuzz_seeds.py WORK   ->  WORK/<fuzzer>/seeds/* and WORK/<fuzzer>/dict

Seeds are valid inputs and near misses, so the fuzzers start where the code does
its work instead of at the first byte check. Nothing is downloaded.
"""
import json
import os
import struct
import sys


def write(work, fuzzer, seeds, tokens):
    folder = os.path.join(work, fuzzer, "seeds")
    os.makedirs(folder, exist_ok=True)
    for name, data in seeds.items():
        with open(os.path.join(folder, name), "wb") as f:
            f.write(data if isinstance(data, bytes) else data.encode())
    with open(os.path.join(work, fuzzer, "dict"), "w") as f:
        for t in tokens:
            raw = t if isinstance(t, bytes) else t.encode()
            f.write('"' + "".join(c if 0x20 <= ord(c) < 0x7F and c not in '"\\' else "\\x%02X" % ord(c)
                                  for c in raw.decode("latin-1")) + '"\n')


def safetensors(work):
    """tests/model/fuzz_safetensors_header.cc: [u64 LE header length][JSON header][data]."""
    def image(header, data=b"", pad=True, length=None):
        h = header if isinstance(header, bytes) else json.dumps(header, separators=(",", ":")).encode()
        if pad:
            h += b" " * (-len(h) % 8)
        return struct.pack("<Q", len(h) if length is None else length) + h + data

    def entry(dtype, shape, begin, end):
        return {"dtype": dtype, "shape": shape, "data_offsets": [begin, end]}

    meta = {"__metadata__": {"format": "pt"}}
    seeds = {
        "valid_two": image({**meta, "a": entry("F32", [3, 5], 0, 60), "b": entry("BF16", [4], 60, 68)}, bytes(68)),
        "valid_dtypes": image({"h": entry("F16", [2, 3], 0, 12), "i": entry("I64", [2], 12, 28),
                               "u": entry("U8", [3], 28, 31), "s": entry("F32", [], 31, 35),
                               "z": entry("BF16", [0, 7], 35, 35)}, bytes(35), pad=False),
        "valid_empty": image({}, pad=False),
        "truncated": image({"a": entry("F32", [3, 5], 0, 60)}, bytes(20)),
        "bad_json": image(b'{"a":{"dtype":"F32","shape":[3,5'),
        "overlap": image({"a": entry("F32", [3, 5], 0, 60), "b": entry("F32", [4], 52, 68)}, bytes(68)),
        "wrong_size": image({"a": entry("F16", [3, 5], 0, 60)}, bytes(60)),
        "unknown_dtype": image({"a": entry("Q4", [3, 5], 0, 60)}, bytes(60)),
        "length_past_end": image({"a": entry("F32", [1], 0, 4)}, bytes(4), length=1 << 40),
        "short": b"\x10\x00\x00",
    }
    tokens = ['"dtype"', '"shape"', '"data_offsets"', '"__metadata__"', '"format"', '"pt"', '"F32"', '"F16"',
              '"BF16"', '"I64"', '"U8"', '"BOOL"', '"F8_E4M3"', "18446744073709551615", "-1", "1e30", "[]", "{}"]
    write(work, "fuzz_safetensors_header", seeds, tokens)


def model_config(work):
    """tests/model/fuzz_model_config.cc: config.json, then NUL and generation_config.json."""
    llama = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
             "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
             "num_key_value_heads": 2, "vocab_size": 300, "max_position_embeddings": 256,
             "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "hidden_act": "silu", "tie_word_embeddings": True,
             "bos_token_id": 1, "eos_token_id": [2, 3], "torch_dtype": "bfloat16",
             "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                              "high_freq_factor": 4.0, "original_max_position_embeddings": 64}}
    qwen2 = {**llama, "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "rope_scaling": None,
             "use_sliding_window": False, "eos_token_id": 2}
    qwen3 = {**llama, "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "head_dim": 32,
             "attention_bias": False, "rope_scaling": {"type": "default"}}
    gen = {"temperature": 0.6, "top_p": 0.9, "top_k": 20, "repetition_penalty": 1.05, "eos_token_id": [2, 4]}
    dump = json.dumps
    seeds = {
        "llama": dump(llama), "qwen2": dump(qwen2), "qwen3": dump(qwen3),
        "llama_gen": dump(llama) + "\0" + dump(gen),
        "qwen3_gen_bad": dump(qwen3) + "\0" + dump({**gen, "top_p": 1.5}),
        "gen_huge": dump(qwen2) + "\0" + dump({"temperature": 1e300, "top_k": 1 << 40, "repetition_penalty": 1e39}),
        "heads_mismatch": dump({**llama, "num_key_value_heads": 3}),
        "odd_head_dim": dump({**qwen3, "head_dim": 7}),
        "no_arch": dump({k: v for k, v in llama.items() if k != "architectures"}),
        "huge": dump({**llama, "hidden_size": 1 << 40, "vocab_size": 1 << 40}),
        "not_object": "[1,2,3]", "broken": dump(llama)[:50],
    }
    tokens = ['"architectures"', '"LlamaForCausalLM"', '"Qwen2ForCausalLM"', '"Qwen3ForCausalLM"', '"model_type"',
              '"hidden_size"', '"intermediate_size"', '"num_hidden_layers"', '"num_attention_heads"',
              '"num_key_value_heads"', '"head_dim"', '"vocab_size"', '"max_position_embeddings"',
              '"rope_scaling"', '"rope_type"', '"llama3"', '"factor"', '"low_freq_factor"', '"high_freq_factor"',
              '"original_max_position_embeddings"', '"bos_token_id"', '"eos_token_id"', '"temperature"',
              '"top_p"', '"top_k"', '"repetition_penalty"', '"rms_norm_eps"', '"rope_theta"', "null", "true",
              "1e308", "1e400", "-0", "9223372036854775807", "18446744073709551615", "4294967296", b"\0"]
    write(work, "fuzz_model_config", seeds, tokens)


def tokenizer(work):
    """tests/tokenizer/fuzz_tokenizer.cc: a flag byte, then the text (toy tokenizer)."""
    texts = {
        "plain": "hello world, it's 12345 abc aa xyz",
        "emoji": "caf\u00e9 \U0001F600 \u4e2d\u6587\n\n  tabs\tand\r\nlines",
        "added": "<|s|>x<|e|> <L> a <R> b <W> c<W>d <think>hmm</think>",
        "broken_utf8": b"ab\xff\xfe\xe2\x82 \xf0\x9f\x98 \xed\xa0\x80 \xc0\xaf".decode("latin-1"),
        "spaces": "   a  b   ",
    }
    seeds = {}
    for name, text in texts.items():
        raw = text.encode("latin-1") if name == "broken_utf8" else text.encode()
        for flags in (0, 3, 6):
            seeds[f"{name}_{flags}"] = bytes([flags]) + raw
    tokens = ["<|s|>", "<|e|>", "<L>", "<R>", "<W>", "<think>", b"\xf0\x9f\x98\x80", b"\xe2\x82", "'s", " t",
              "ab", "abc", "\r\n"]
    write(work, "fuzz_tokenizer", seeds, tokens)


def chat_template(work):
    """tests/tokenizer/fuzz_chat_template.cc: FuzzedDataProvider bytes (strings from the front)."""
    seeds = {
        "one": b"hello\\there\x00\x01\x01",
        "control_text": b"<|im_end|>\n<|eot_id|>  \t\x00\x02\x01\x01\x03",
        "bad_role": b"tool\\x\\<|start_header_id|>\x00\x03\x03\x02\x01",
    }
    tokens = ["system", "user", "assistant", "<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>",
              "<|eot_id|>", "<|im_start|>", "<|im_end|>", "\\", " \t\n"]
    write(work, "fuzz_chat_template", seeds, tokens)


def varint(n):
    out = b""
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out += bytes([b | 0x80])
        else:
            return out + bytes([b])


def field(number, value):
    """One protobuf field: int -> varint, float -> fixed32, bytes/str/list-of-bytes -> length-delimited."""
    if isinstance(value, float):
        return varint(number << 3 | 5) + struct.pack("<f", value)
    if isinstance(value, int):
        return varint(number << 3) + varint(value & ((1 << 64) - 1))
    raw = value.encode() if isinstance(value, str) else value
    return varint(number << 3 | 2) + varint(len(raw)) + raw


def generate_request(work):
    """tests/coordinator/fuzz_generate_request.cc: serialized tpserve.v1.GenerateRequest (generation.proto)."""
    def msg(role, content):
        return field(1, field(1, role) + field(2, content))

    sampling = field(1, 0.7) + field(2, 0.95) + field(3, 40) + field(4, 0.05) + field(5, 1234) + field(6, 1.1) + \
        field(7, 0.5) + field(8, -0.5)
    stopping = field(1, 16) + field(2, 2) + field(3, "\n\n") + field(3, "abc") + field(4, b"\x02\x05") + \
        field(5, 1) + field(6, 1)
    chat = field(4, msg("system", "be brief") + msg("user", "hi <|im_end|><|eot_id|>") + msg("assistant", "ok") +
                 msg("user", "more") + field(2, 1))
    seeds = {
        "prompt": field(1, "r1") + field(2, "hello <|s|> world") + field(5, sampling) + field(6, stopping) +
        field(7, 3) + field(8, 1),
        "prompt_special": field(2, "<|im_start|>x") + field(9, 1),
        "token_ids": field(3, field(1, b"\x01\x02\x03\xa0\x02")) + field(6, field(1, 4)),
        "chat": chat + field(5, field(1, 0.0)),
        "bad_role": field(4, msg("tool", "x")),
        "late_system": field(4, msg("user", "a") + msg("system", "b")),
        "nan": field(2, "x") + field(5, field(1, float("nan")) + field(2, 0.0)),
        "too_long": field(3, field(1, bytes(100))) + field(6, field(1, 4000000000)),
        "min_over_max": field(2, "x") + field(6, field(1, 2) + field(2, 3)),
        "logprobs": field(2, "x") + field(7, 21),
        # Token-level controls: logit_bias (map entries {1: id, 2: bias}), allowed_token_ids (packed), bad_words.
        "controls": field(2, "x") + field(5, field(30, field(1, 5) + field(2, -100.0)) +
                                      field(30, field(1, 9) + field(2, 2.5)) + field(31, b"\x03\x07\x07") +
                                      field(32, "abc") + field(32, " x y")),
        "bias_range": field(2, "x") + field(5, field(30, field(1, 5) + field(2, 101.0))),
        "empty": b"",
    }
    tokens = [field(1, 0.0)[:1], field(2, b"")[:1], b"\x22", b"\x2a", b"\x32", b"\x48\x01", "system", "user",
              "assistant", "<|im_end|>", "<|eot_id|>", struct.pack("<f", float("inf")), b"\xff\xff\xff\xff\x0f"]
    write(work, "fuzz_generate_request", seeds, tokens)


def jinja_template(work):
    """tests/jinja/fuzz_chat_template.cc: mode byte 0 + a template source (the real ones
    and small constructs), or 1..4 + message contents split at \x01 for the real templates."""
    templates = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "jinja", "templates")
    seeds = {}
    for name in sorted(os.listdir(templates)):
        if name.endswith(".jinja"):
            with open(os.path.join(templates, name), "rb") as f:
                seeds["tmpl_" + name] = b"\x00" + f.read()
    snippets = ["{% for m in messages %}{{ loop.index }}{{ m.content | trim }}{% endfor %}",
                "{% set ns = namespace(a=1) %}{% set ns.a = ns.a + 1 %}{{ ns.a }}",
                "{% macro f(x, y=2) %}{{ x ~ y }}{% endmacro %}{{ f(1) }}{{ messages[::-1] | tojson(indent=2) }}",
                "{%- if tools is not none -%}{{ tools[0].function.name.upper() }}{%- endif %}",
                "{{ 'a b'.split() | join('-') }}{{ raise_exception('x') if false }}",
                # Found by fuzzing, kept so that every run replays them: a namespace holding
                # itself (leaked), a loop nesting a list 20000 deep (overflowed the stack),
                "{% set ns = namespace(a=0) %}{% set ns.a = ns%} + 1 %}{{ ns.a }}",
                "{% set ns = namespace(a=[]) %}{% for i in range(20000) %}{% set ns.a = [ns.a] %}{% endfor %}{{ ns.a }}",
                # and literals past 64 bits (std::out_of_range out of the parser)
                "{{ 'a b'.99999999999999999999999split() }}{{ 1e999 }}{{ 99999999999999999999 }}"]
    for i, snippet in enumerate(snippets):
        seeds["snippet_%d" % i] = b"\x00" + snippet.encode()
    contents = [b"hello\x01<think>\nr\n</think>\n\nanswer\x01{\"a\": 1}", b"<|im_end|>\n<|im_start|>system",
                b"  \r\n\x01\x01\xe6\x97\xa5\xf0\x9f\x98\x80", b"<tool_response>x</tool_response>\x01ok"]
    for mode in range(1, 5):
        for i, c in enumerate(contents):
            seeds["msgs_%d_%d" % (mode, i)] = bytes([mode]) + c
    tokens = ["{%", "%}", "{{", "}}", "{#", "#}", "-%}", "{%-", "endfor", "endif", "loop.", "namespace(", "tojson",
              "| trim", "is defined", "is none", "[::-1]", "messages", "<think>", "</think>", "<|im_end|>"]
    write(work, "fuzz_jinja_template", seeds, tokens)


def openai_request(work):
    """tests/http/fuzz_openai_request.cc: a byte picking the parser, then an HTTP body."""
    chat = {"model": "m", "messages": [{"role": "system", "content": "be brief"},
                                       {"role": "user", "content": [{"type": "text", "text": "hi"}]},
                                       {"role": "assistant", "content": None, "tool_calls": [
                                           {"id": "c", "type": "function",
                                            "function": {"name": "f", "arguments": "{}"}}]},
                                       {"role": "tool", "tool_call_id": "c", "content": "1"}],
            "max_tokens": 5, "temperature": 0.5, "stop": ["a"], "logprobs": True, "top_logprobs": 2,
            "stream": True, "stream_options": {"include_usage": True}, "tools": [], "tool_choice": "auto",
            "chat_template_kwargs": {"enable_thinking": False}, "seed": -1, "n": 1}
    completion = {"prompt": [[1, 2, 3]], "max_tokens": 16, "logprobs": 1, "stop": "x", "top_k": -1,
                  "ignore_eos": True, "min_tokens": 2, "stop_token_ids": [7], "echo": False,
                  "logit_bias": {"5": -100, "9": 2.5}, "allowed_token_ids": [3, 7], "bad_words": ["ab", "c d"],
                  "spaces_between_special_tokens": False}
    seeds = {
        "chat": b"\x00" + json.dumps(chat).encode(),
        "completion": b"\x01" + json.dumps(completion).encode(),
        "completion_text": b"\x01" + json.dumps({"prompt": "hello", "stream": False}).encode(),
        "tokenize": b"\x02" + json.dumps({"messages": chat["messages"], "add_generation_prompt": False}).encode(),
        "detokenize": b"\x03" + json.dumps({"tokens": [1, 4294967295], "model": "m"}).encode(),
        "broken": b"\x00{\"messages\": [{\"role\": 1e999}",
        # Chat fields without messages: a crash the fuzzer found (the parser took it).
        "no_messages": b"\x00" + json.dumps({k: v for k, v in chat.items() if k != "messages"}).encode(),
        # Nesting past the parser's depth limit (80,000 levels once crashed
        # tpserve-http in a recursive dump; libFuzzer cuts that seed at -max_len,
        # so 1,900 levels are there whole too), and a key given twice.
        "deep_tools": b"\x00{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"tools\": "
                      + b"[" * 80000 + b"]" * 80000 + b"}",
        "deep_tools_whole": b"\x00{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"tools\": "
                            + b"[" * 1900 + b"]" * 1900 + b"}",
        "deep_kwargs": b"\x00{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], "
                       + b"\"chat_template_kwargs\": " + b"{\"a\": " * 200 + b"1" + b"}" * 201,
        "duplicate_key": b"\x01{\"prompt\": \"x\", \"max_tokens\": 1, \"max_tokens\": 2}",
    }
    tokens = ["\"messages\"", "\"prompt\"", "\"role\"", "\"content\"", "\"max_tokens\"", "\"stop\"",
              "\"logprobs\"", "\"top_logprobs\"", "\"stream\"", "\"stream_options\"", "\"include_usage\"",
              "\"tools\"", "\"tool_choice\"", "\"tool_calls\"", "\"function\"", "\"seed\"", "\"n\"",
              "\"tokens\"", "\"logit_bias\"", "\"allowed_token_ids\"", "\"bad_words\"", "null", "true", "false",
              "[]", "{}", "-1", "4294967296", "1e309", "\"\\u0000\""]
    write(work, "fuzz_openai_request", seeds, tokens)


def grammar(work):
    """tests/grammar/fuzz_grammar.cc: [0 GBNF | 1 regex | 2 JSON Schema][text]\0[walk steering bytes]."""
    json_gbnf = (
        'root ::= object\n'
        'value ::= object | array | string | number | ("true" | "false" | "null") ws\n'
        'object ::= "{" ws ( string ":" ws value ("," ws string ":" ws value)* )? "}" ws\n'
        'array ::= "[" ws ( value ("," ws value)* )? "]" ws\n'
        'string ::= "\\"" ( [^"\\\\\\x7F\\x00-\\x1F] | "\\\\" (["\\\\bfnrt] | "u" [0-9a-fA-F]{4}) )* "\\"" ws\n'
        'number ::= ("-"? ([0-9] | [1-9] [0-9]{0,15})) ("." [0-9]+)? ([eE] [-+]? [0-9] [0-9]{0,15})? ws\n'
        'ws ::= | " " | "\\n" [ \\t]{0,20}\n')
    steer = bytes(range(1, 60))
    seeds = {
        "json_gbnf": b"\x00" + json_gbnf.encode() + b"\x00" + steer,
        "left_recursive": b"\x00root ::= root \"a\" | \"b\" list\nlist ::= list \",\" \"x\"{2,3} | \"(\" root \")\"\n\x00" + steer,
        "ambiguous_lexemes": b"\x00root ::= (w \" \"?)+\nw ::= [a-z]+ | \"(\" root \")\"\n\x00" + steer,
        "counted": b"\x00root ::= \"\\\"\" [a-z]{1,40} \"\\\"\" (\",\" root)?\n\x00" + steer,
        "regex_json_string": b"\x01\"(?:[^\"\\\\\\x00-\\x1F]|\\\\.){0,30}\"\x00" + steer,
        "regex_catastrophic": b"\x01(a|aa)*c|(a*)*b\x00" + steer,
        "regex_nested_counts": b"\x01((ab){3,5}){2,4}\x00" + steer,
        "regex_unicode": b"\x01[\\u00e0-\\u00ff\\d]+\\.?\x00" + steer,
        "schema_tool": b'\x02{"type":"object","properties":{"city":{"type":"string","maxLength":40},'
                       b'"unit":{"enum":["c","f"]},"days":{"type":"integer","minimum":1,"maximum":14}},'
                       b'"required":["city"],"additionalProperties":false}\x00' + steer,
        "schema_recursive": b'\x02{"$defs":{"n":{"type":"object","properties":{"a":{"type":"array",'
                            b'"items":{"$ref":"#/$defs/n"},"maxItems":3}}}},"$ref":"#/$defs/n"}\x00' + steer,
        "schema_open_object": b'\x05{"type":"object","properties":{"ab":{"type":"number"},"a":{"not":{}}},'
                              b'"minProperties":1}\x00' + steer,
        "schema_union": b'\x02{"anyOf":[{"type":"string","pattern":"^[a-z]{2,30}$"},{"type":"null"},'
                        b'{"oneOf":[{"const":1},{"const":"x"}]}]}\x00' + steer,
        "schema_unsatisfiable": b'\x02{"allOf":[{"type":"string"},{"type":"integer"}]}',
        "bad_gbnf": b"\x00root ::= (\"x\" \n",
        "bad_regex": b"\x01a(?=b)",
    }
    tokens = ["::=", "root", "|", "(", ")", "*", "+", "?", "{2,3}", "{0,}", "[a-z]", "[^a]", ".", "\\x41",
              "\\u00e9", "\"", "#", "\n", "(?:", "\\d", "\\w", "\\s", "{1000}", "^", "$", "\\",
              '"type"', '"object"', '"string"', '"properties"', '"required"', '"additionalProperties"',
              '"$ref"', '"#/$defs/n"', '"anyOf"', '"oneOf"', '"allOf"', '"not"', '"enum"', '"maxLength"',
              '"minimum"', '"pattern"', '"items"', '"maxItems"', ":", ",", "{", "}", "[", "]"]
    write(work, "fuzz_grammar", seeds, tokens)


def proposers(work):
    """tests/speculative/fuzz_proposers.cc: 8 option bytes, then tokens (< 0xF0) and sequence ends."""
    options = bytes([0x21, 0x53, 0x05, 0x47, 0x35, 0x20, 0x35, 0x7F])
    seeds = {
        "repeats": options + bytes([1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 3, 5, 1, 2, 3, 4, 1, 2] * 4),
        "two_sequences": options + bytes([9, 8, 7, 6, 5, 4, 0xF0, 1, 9, 8, 7, 6, 5, 2, 9, 8, 7]),
        "one_token": options + bytes([3] * 80),
        "small_window": bytes([0x01, 0x00, 0x00, 0x07, 0x07, 0x00, 0x00, 0x00]) + bytes(range(7)) * 12,
    }
    write(work, "fuzz_proposers", seeds, [bytes([0xF0]), bytes([1, 2, 3]), bytes([0, 0, 0, 0])])


def main():
    work = sys.argv[1]
    for make in (safetensors, model_config, tokenizer, chat_template, generate_request, openai_request,
                 jinja_template, grammar, proposers):
        make(work)


if __name__ == "__main__":
    main()
