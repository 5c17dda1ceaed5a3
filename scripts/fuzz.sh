#!/usr/bin/env bash
# Runs every libFuzzer target (ASan + UBSan) for a bounded time each; fails on any crash,
# leak, UB or broken invariant. The targets and what each checks:
#   fuzz_safetensors_header  ParseSafetensorsHeader on file images     tests/model/
#   fuzz_model_config        ParseModelConfig on config.json text       tests/model/
#   fuzz_tokenizer           Encode / Decode / the streaming detokenizer tests/tokenizer/
#   fuzz_chat_template       RenderChat / RenderChatSegments            tests/tokenizer/
#   fuzz_generate_request    the request validator on GenerateRequest   tests/coordinator/
#   fuzz_openai_request      tpserve-http's OpenAI request parsers      tests/http/
#   fuzz_jinja_template      the Jinja2 engine: template sources, and    tests/jinja/
#                            message contents under the real templates
#   fuzz_grammar             the grammar engine: GBNF and regexes        tests/grammar/
#                            compiled, the matcher walked and rolled back
#   fuzz_proposers           the speculative proposers on token          tests/speculative/
#                            sequences: n-gram against brute force, the
#                            suffix tries' strings, bounds and eviction
#
#   scripts/fuzz.sh [BUILD_DIR]   fuzz build in BUILD_DIR-fuzz (default build-fuzz): clang,
#                                 -DTPSERVE_FUZZ=ON, no CUDA/tests/bench; builds only the fuzzers
#   TPSERVE_FUZZ_SECONDS=N        how long to fuzz each target (default 30; 9 targets, 2 at a time
#                                 on 2 cores: 2.5 min; TPSERVE_FUZZ_JOBS=N sets how many at once)
#   TPSERVE_FUZZ_TARGETS="a b"    run only these targets
#
# Each target's corpus lives in BUILD_DIR-fuzz/fuzz/<target>/corpus and grows across runs;
# it starts from seeds and a dictionary written by scripts/fuzz_seeds.py. A crash leaves its
# input in BUILD_DIR-fuzz/fuzz/<target>/crash-*; reproduce with: BUILD_DIR-fuzz/<target> FILE
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/stage-times.sh
source scripts/lib/ccache.sh
source scripts/lib/debug-info.sh
stage_table_on_exit
ccache_setup

build="${1:-build}"
build="${build%/}-fuzz"
seconds="${TPSERVE_FUZZ_SECONDS:-30}"
targets=(${TPSERVE_FUZZ_TARGETS:-fuzz_safetensors_header fuzz_model_config fuzz_tokenizer fuzz_chat_template
  fuzz_generate_request fuzz_openai_request fuzz_jinja_template fuzz_grammar fuzz_proposers})
work="$build/fuzz"

# The compiler launcher (ccache) comes from scripts/lib/ccache.sh.
debug_info_args RelWithDebInfo
stage_run "fuzz build: configure" cmake -S . -B "$build" -G Ninja -DCMAKE_C_COMPILER=clang \
  -DCMAKE_CXX_COMPILER=clang++ -DTPSERVE_FUZZ=ON -DTPSERVE_CUDA=OFF -DTPSERVE_BUILD_TESTS=OFF \
  -DTPSERVE_BUILD_BENCH=OFF "${debug_info[@]}" >/dev/null
stage_run "fuzz build" cmake --build "$build" --target "${targets[@]}"
ccache_note "fuzz build"

mkdir -p "$work"
python3 scripts/fuzz_seeds.py "$work"

# TPSERVE_FUZZ_JOBS targets fuzz at once (default nproc): each libFuzzer process
# is one thread, so on 2 cores the targets take half their summed seconds.
jobs=${TPSERVE_FUZZ_JOBS:-$(nproc)}

# One target: its log in $dir/log, its exit status in $dir/status.
fuzz_one() {
  local target=$1 dir="$work/$1" status=0
  # detect_leaks is on by default with ASan; say so, since a leak must fail the run.
  ASAN_OPTIONS=detect_leaks=1 "$build/$target" "$dir/corpus" "$dir/seeds" -dict="$dir/dict" \
    -max_total_time="$seconds" -max_len=4096 -timeout=10 -rss_limit_mb=2048 \
    -artifact_prefix="$dir/crash-" -print_final_stats=1 >"$dir/log" 2>&1 || status=$?
  echo "$status" >"$dir/status"
}

# $jobs targets at a time, each for $seconds; their results after, in order.
# Fails when any target failed (the stage table says so).
fuzz_all() {
  local running=0 target
  for target in "${targets[@]}"; do
    mkdir -p "$work/$target/corpus"
    rm -f "$work/$target/status"
    if [[ $running -ge $jobs ]]; then
      wait -n || true
      running=$((running - 1))
    fi
    echo "fuzz.sh: fuzzing $target for ${seconds}s (corpus $work/$target/corpus)"
    fuzz_one "$target" &
    running=$((running + 1))
  done
  wait
  for target in "${targets[@]}"; do
    [[ "$(cat "$work/$target/status" 2>/dev/null)" == 0 ]] || return 1
  done
}
stage_run "fuzzing (${#targets[@]} x ${seconds}s, $jobs at once)" fuzz_all || true  # each failure below

failed=()
for target in "${targets[@]}"; do
  dir="$work/$target"
  if [[ "$(cat "$dir/status" 2>/dev/null)" != 0 ]]; then
    tail -n 60 "$dir/log"
    echo "fuzz.sh: FAILED: $target found a crash; input saved as $dir/crash-*;" \
      "reproduce with $build/$target <that file>" >&2
    failed+=("$target")
    continue
  fi
  echo "fuzz.sh: $target:"
  grep -E "^(Done|stat::number_of_executed_units|stat::peak_rss_mb)" "$dir/log" || tail -n 5 "$dir/log"
done
if [[ ${#failed[@]} -gt 0 ]]; then
  echo "fuzz.sh: FAILED: ${failed[*]}" >&2
  exit 1
fi
echo "fuzz.sh: no crashes in ${targets[*]}"
