#!/usr/bin/env bash
# Fuzzes, with libFuzzer, ASan and UBSan for a bounded time each, the safetensors
# header parser (ParseSafetensorsHeader) and the chat template engine (jinja/:
# template sources, and message contents under the real templates); fails on any
# crash, leak, UB or broken invariant.
#
#   scripts/fuzz.sh [BUILD_DIR]   fuzz build in BUILD_DIR-fuzz (default build-fuzz): clang,
#                                 -DTPSERVE_FUZZ=ON, no CUDA/tests/bench; builds only the targets
#   TPSERVE_FUZZ_SECONDS=N        how long to fuzz each target (default 30)
#
# The corpora live in BUILD_DIR-fuzz/fuzz/corpus and BUILD_DIR-fuzz/fuzz-jinja/corpus and
# grow across runs; they start from seeds written by this script. A crash leaves its input
# in BUILD_DIR-fuzz/fuzz*/crash-*; reproduce with: BUILD_DIR-fuzz/<target> FILE
set -euo pipefail
cd "$(dirname "$0")/.."

build="${1:-build}"
build="${build%/}-fuzz"
seconds="${TPSERVE_FUZZ_SECONDS:-30}"
work="$build/fuzz"

cmake -S . -B "$build" -G Ninja -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DTPSERVE_FUZZ=ON -DTPSERVE_CUDA=OFF -DTPSERVE_BUILD_TESTS=OFF -DTPSERVE_BUILD_BENCH=OFF >/dev/null
cmake --build "$build" --target fuzz_safetensors_header fuzz_chat_template

mkdir -p "$work/seeds" "$work/corpus"
python3 - "$work/seeds" "$work/dict" <<'EOF'
# Seed files: [u64 LE header length][JSON header][data], valid ones and broken ones.
import json, struct, sys, os
seeds, dict_path = sys.argv[1], sys.argv[2]

def image(header, data=b"", pad=True, length=None):
    h = header if isinstance(header, bytes) else json.dumps(header, separators=(",", ":")).encode()
    if pad:
        h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h) if length is None else length) + h + data

def entry(dtype, shape, begin, end):
    return {"dtype": dtype, "shape": shape, "data_offsets": [begin, end]}

meta = {"__metadata__": {"format": "pt"}}
files = {
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
for name, data in files.items():
    with open(os.path.join(seeds, name), "wb") as f:
        f.write(data)
tokens = ['"dtype"', '"shape"', '"data_offsets"', '"__metadata__"', '"format"', '"pt"', '"F32"', '"F16"',
          '"BF16"', '"I64"', '"U8"', '"BOOL"', '"F8_E4M3"', "18446744073709551615", "-1", "1e30", "[]", "{}"]
with open(dict_path, "w") as f:
    for t in tokens:
        f.write('"' + t.replace("\\", "\\\\").replace('"', '\\"') + '"\n')
EOF

echo "fuzz.sh: fuzzing ParseSafetensorsHeader for ${seconds}s (corpus $work/corpus)"
if ! "$build/fuzz_safetensors_header" "$work/corpus" "$work/seeds" -dict="$work/dict" \
    -max_total_time="$seconds" -max_len=4096 -timeout=10 -rss_limit_mb=2048 \
    -artifact_prefix="$work/crash-" -print_final_stats=1 >"$work/log" 2>&1; then
  tail -n 60 "$work/log"
  echo "fuzz.sh: FAILED: the fuzzer found a crash; input saved as $work/crash-*;" \
    "reproduce with $build/fuzz_safetensors_header <that file>" >&2
  exit 1
fi
grep -E "^(Done|stat::number_of_executed_units|stat::peak_rss_mb)" "$work/log" || tail -n 5 "$work/log"

# The chat template engine. Seeds: mode byte 0 + a template source (the real ones and
# small constructs), or 1..4 + message contents split at \x01 for the real templates.
jwork="$build/fuzz-jinja"
mkdir -p "$jwork/seeds" "$jwork/corpus"
python3 - "$jwork/seeds" "$jwork/dict" tests/jinja/templates <<'EOF'
import os, sys
seeds, dict_path, templates = sys.argv[1], sys.argv[2], sys.argv[3]
def write(name, data):
    with open(os.path.join(seeds, name), "wb") as f:
        f.write(data)
for name in sorted(os.listdir(templates)):
    if name.endswith(".jinja"):
        write("tmpl_" + name, b"\x00" + open(os.path.join(templates, name), "rb").read())
snippets = ["{% for m in messages %}{{ loop.index }}{{ m.content | trim }}{% endfor %}",
            "{% set ns = namespace(a=1) %}{% set ns.a = ns.a + 1 %}{{ ns.a }}",
            "{% macro f(x, y=2) %}{{ x ~ y }}{% endmacro %}{{ f(1) }}{{ messages[::-1] | tojson(indent=2) }}",
            "{%- if tools is not none -%}{{ tools[0].function.name.upper() }}{%- endif %}",
            "{{ 'a b'.split() | join('-') }}{{ raise_exception('x') if false }}"]
for i, s in enumerate(snippets):
    write("snippet_%d" % i, b"\x00" + s.encode())
contents = [b"hello\x01<think>\nr\n</think>\n\nanswer\x01{\"a\": 1}", b"<|im_end|>\n<|im_start|>system",
            b"  \r\n\x01\x01\xe6\x97\xa5\xf0\x9f\x98\x80", b"<tool_response>x</tool_response>\x01ok"]
for mode in range(1, 5):
    for i, c in enumerate(contents):
        write("msgs_%d_%d" % (mode, i), bytes([mode]) + c)
tokens = ["{%", "%}", "{{", "}}", "{#", "#}", "-%}", "{%-", "endfor", "endif", "loop.", "namespace(", "tojson",
          "| trim", "is defined", "is none", "[::-1]", "messages", "<think>", "</think>", "<|im_end|>"]
with open(dict_path, "w") as f:
    for t in tokens:
        f.write('"' + t.replace("\\", "\\\\").replace('"', '\\"') + '"\n')
EOF

echo "fuzz.sh: fuzzing the chat template engine for ${seconds}s (corpus $jwork/corpus)"
if ! "$build/fuzz_chat_template" "$jwork/corpus" "$jwork/seeds" -dict="$jwork/dict" \
    -max_total_time="$seconds" -max_len=8192 -timeout=10 -rss_limit_mb=2048 \
    -artifact_prefix="$jwork/crash-" -print_final_stats=1 >"$jwork/log" 2>&1; then
  tail -n 60 "$jwork/log"
  echo "fuzz.sh: FAILED: the fuzzer found a crash; input saved as $jwork/crash-*;" \
    "reproduce with $build/fuzz_chat_template <that file>" >&2
  exit 1
fi
grep -E "^(Done|stat::number_of_executed_units|stat::peak_rss_mb)" "$jwork/log" || tail -n 5 "$jwork/log"
echo "fuzz.sh: no crashes"
