#!/usr/bin/env bash
# shellcheck disable=SC2317  # the phase functions run through "$self" __phase
# The whole GPU check in one call, on a machine with one NVIDIA GPU, the CUDA
# toolkit, CMake and ninja but none of the Debian packages and no network (the
# lent H200: README "GPUs"). What it needs from outside the repository comes
# packed by scripts/pack-gpu-deps.sh (GoogleTest sources, nlohmann-json,
# abseil, gloo and the libraries gloo needs).
#
#   scripts/gpu-check.sh [DEPS_DIR [OUT_DIR]]
#     DEPS_DIR  default $TPSERVE_GPU_DEPS, else shared/deps
#     OUT_DIR   default $TPSERVE_GPU_OUT, else $OUT (the device tool's folder), else gpu-check-out
#
# Phases, each with a time cap (seconds; TPSERVE_CAP_<PHASE>=N overrides), the
# caps summing to about 9 minutes: a phase cut at its cap is reported and the check
# goes on. A cap of 0 skips its phase (a rerun of some phases on a machine that
# kept the build: TPSERVE_CAP_PREFLIGHT=0 TPSERVE_CAP_CONFIGURE=0 ...).
#   preflight  first glibc >= 2.36 and GLIBCXX_3.4.30 (what the packed Debian libraries need,
#              every gap named in one line); then nvidia-smi, nvcc, the runtime's own word
#              (scripts/lib/cuda-probe.cc: device count or error, driver and runtime versions),
#              cuBLAS, NCCL, torch, the pack (ldd); whether compute-sanitizer and ncu work on
#              this machine's runtime (on gVisor they do not: their phases are then skipped,
#              saying why)
#   configure  GoogleTest from the pack, the engine-only build (-DTPSERVE_ENGINE_ONLY=ON,
#              CUDA for this GPU's architecture, TPSERVE_CUDA_ARCH=NN overrides); prints
#              which communicators were built
#   build      only what the check runs: every `gpu` test, comm_test_rank, the benches,
#              tpserve-make-model, tpserve-logits
#   deps       ldd of every built executable: nothing missing, nothing from outside the pack
#   tests      ctest -L gpu with TPSERVE_CUDA_SYNC_CHECK=1 (a fault names the op that launched it)
#   memcheck   compute-sanitizer --tool memcheck over the op-level suites, a few at a time
#              (TPSERVE_MEMCHECK_JOBS, default 3; kernels built with -lineinfo)
#   bench      gpu_bench: served decode (graphs + GPU sampler) at batch 1/8/64/256, prefill,
#              decode attention against the copy bandwidth, the 256-sequence offline workload
#   sampling   sampling_bench
#   parity     tools/hf_parity.py: logits and greedy tokens against transformers (fp32, bf16)
#   ncu        off unless TPSERVE_CAP_NCU=N: ncu over gpu_bench's batch-1 decode profile, when the
#              preflight found ncu working (-> ncu.txt); gpu_bench's own per-kernel profile
#              (CUDA events, in gpu_bench.md) needs no tool
# The tests and memcheck phases run with TPSERVE_REQUIRE_GPU=1: a GPU test that
# finds no device fails instead of skipping, so a run that tested nothing fails.
# Writes into OUT_DIR as it goes (at most 8 files, for the device tool):
#   gpu-check.log (every phase's full output), gpu_bench.md (after every bench section),
#   sampling_bench.md, parity.md, summary.md; copies the .md files to bench/results/.
# Prints a one-screen summary last. Exit status: 0 when every phase passed.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
self="$PWD/scripts/gpu-check.sh"
# shellcheck source=lib/gpu-host.sh
source "$PWD/scripts/lib/gpu-host.sh"
if [[ "${1:-}" != __phase ]]; then
  deps="${1:-${TPSERVE_GPU_DEPS:-shared/deps}}"
  out="${2:-${TPSERVE_GPU_OUT:-${OUT:-gpu-check-out}}}"
  mkdir -p "$out" bench/results
  TPSERVE_GPU_DEPS="$(realpath "$deps")"
  TPSERVE_GPU_OUT="$(realpath "$out")"
  export TPSERVE_GPU_DEPS TPSERVE_GPU_OUT
  export TPSERVE_GPU_BUILD="${TPSERVE_GPU_BUILD:-build-gpu}"
fi
deps="$TPSERVE_GPU_DEPS" out="$TPSERVE_GPU_OUT" build="$TPSERVE_GPU_BUILD"
cuda_bin="$(dirname "$(command -v nvcc 2>/dev/null || echo /usr/local/cuda/bin/nvcc)")"
sanitizer="$(command -v compute-sanitizer || ls "$cuda_bin"/compute-sanitizer \
  "$cuda_bin"/../compute-sanitizer/compute-sanitizer 2>/dev/null | head -1)"
ncu="$(command -v ncu || ls "$cuda_bin"/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)"
log="$out/gpu-check.log"

declare -A cap=([preflight]=20 [configure]=30 [build]=150 [deps]=10 [tests]=90 [memcheck]=40 [bench]=150
  [sampling]=10 [parity]=35 [ncu]=0)
total=0
for p in "${!cap[@]}"; do
  v="TPSERVE_CAP_${p^^}"
  cap[$p]="${!v:-${cap[$p]}}"
  if ! [[ "${cap[$p]}" =~ ^[0-9]+$ ]]; then
    echo "gpu-check: $v=${cap[$p]} is not a whole number of seconds (0 skips the phase)" >&2
    exit 2
  fi
  total=$((total + cap[$p]))
done
phases=() results=() notes=() secs=()
failed=0

# phase NAME NOTE CMD...: runs CMD under NAME's cap, its output appended to the
# log; one line on the screen, the end of the output too when it failed.
phase() {
  local name="$1" note="$2"
  shift 2
  local t0=$SECONDS rc result
  if [[ "${cap[$name]}" -eq 0 ]]; then  # `timeout 0` would mean no limit at all
    phases+=("$name") results+=("skipped") notes+=("$note") secs+=(0)
    printf 'gpu-check: %-9s %-16s %4d s  %s\n' "$name" "skipped (cap 0)" 0 "$note"
    printf '\n==== %s: skipped (TPSERVE_CAP_%s=0) ====\n' "$name" "${name^^}" >>"$log"
    return 0
  fi
  printf '\n==== %s (cap %s s) ====\n' "$name" "${cap[$name]}" >>"$log"
  local before
  before=$(wc -l <"$log")
  # Functions of this script run in a fresh copy of it (timeout runs programs).
  timeout --kill-after=5 "${cap[$name]}" "$self" __phase "$@" >>"$log" 2>&1
  rc=$?
  if [[ $rc -eq 0 ]]; then result="ok"
  elif [[ $rc -eq 77 ]]; then  # the phase found it cannot run here and said why on its last line
    result="skipped"
    note="$note; $(tail -1 "$log")"
  elif [[ $rc -eq 124 || $rc -eq 137 ]]; then result="CUT at ${cap[$name]} s"; failed=1
  else result="FAILED ($rc)"; failed=1
  fi
  phases+=("$name") results+=("$result") notes+=("$note") secs+=("$((SECONDS - t0))")
  printf 'gpu-check: %-9s %-16s %4d s  %s\n' "$name" "$result" "$((SECONDS - t0))" "$note"
  if [[ $rc -ne 0 ]]; then tail -n +"$((before + 1))" "$log" | tail -15 | sed 's/^/    /'; fi
  return $rc
}

summary() {
  {
    echo "# gpu-check summary ($((SECONDS - start)) s of at most $total s; $(date -u '+%Y-%m-%d %H:%M UTC'))"
    echo
    echo "GPU: ${gpu_name:-unknown}; communicators: ${comms:-not configured}"
    echo
    echo "| phase | result | seconds | what |"
    echo "|---|---|---|---|"
    for i in "${!phases[@]}"; do
      echo "| ${phases[$i]} | ${results[$i]} | ${secs[$i]} | ${notes[$i]} |"
    done
    echo
    echo "Full output: $log"
  } >"$out/summary.md"
  for f in gpu_bench.md sampling_bench.md parity.md; do [[ -s "$out/$f" ]] && cp "$out/$f" bench/results/; done
  echo
  [[ -s "$out/gpu_bench.md" ]] && cat "$out/gpu_bench.md"
  [[ -s "$out/parity.md" ]] && { echo; cat "$out/parity.md"; }
  echo
  echo "==== $(head -1 "$out/summary.md" | sed 's/^# //') ===="
  tail -n +3 "$out/summary.md"
}

preflight() {
  local ok=0
  # First what the packed libraries need of the system (one line either way).
  host_libs_missing 2.36 GLIBCXX_3.4.30 || ok=1
  echo "date: $(date -u)  host: $(uname -srm)  cores: $(nproc)  memory: $(free -g | awk '/Mem:/ {print $2 " GiB"}')"
  if ! timeout 10 nvidia-smi --query-gpu=name,memory.total,driver_version,compute_cap --format=csv,noheader; then
    echo "preflight: nvidia-smi found no GPU"; ok=1
  fi
  local probe="$work/cuda-probe"
  if command -v nvcc >/dev/null; then
    nvcc --version | tail -2
    # The runtime's own word: device count or its error, driver and runtime versions.
    if timeout 60 nvcc -o "$probe" scripts/lib/cuda-probe.cc; then
      timeout 20 "$probe" || { echo "preflight: the CUDA runtime sees no usable device (above)"; ok=1; }
    else
      echo "preflight: nvcc could not build scripts/lib/cuda-probe.cc"; ok=1
    fi
  else echo "preflight: no nvcc on PATH (add /usr/local/cuda/bin)"; ok=1; fi
  for tool in cmake ninja gcc; do
    command -v "$tool" >/dev/null && echo "$tool: $("$tool" --version | head -1)" || { echo "preflight: no $tool"; ok=1; }
  done
  echo "cuBLAS: $(ls "$cuda_bin"/../lib64/libcublas.so.* "$cuda_bin"/../targets/*/lib/libcublas.so.* 2>/dev/null | head -1)"
  echo "NCCL (toolkit): $(ls "$cuda_bin"/../lib64/libnccl.so* 2>/dev/null | head -1)"
  echo "NCCL (python3): $(timeout 10 python3 -c 'import nvidia.nccl as n, glob; print(glob.glob(list(n.__path__)[0] + "/lib/libnccl.so*"))' 2>&1 | tail -1)"
  echo "compute-sanitizer: ${sanitizer:-none} $([[ -n "$sanitizer" ]] && timeout 10 "$sanitizer" --version 2>&1 | grep -i version | head -1)"
  # The profilers work on one of the workplace's two runtimes only: try each on
  # the probe now; a phase that needs one that does not work is skipped, saying why.
  if [[ -z "$sanitizer" ]]; then
    echo "compute-sanitizer: not installed" >"$work/memcheck.skip"
  elif ! tool_works compute-sanitizer "$probe" "$sanitizer" --tool memcheck --error-exitcode 99 "$probe" --alloc \
      >"$work/memcheck.state"; then
    cp "$work/memcheck.state" "$work/memcheck.skip"
  fi
  cat "$work/memcheck.state" "$work/memcheck.skip" 2>/dev/null | head -1
  if [[ -z "$ncu" ]]; then
    echo "ncu: not installed" >"$work/ncu.skip"
  elif ! tool_works ncu "$probe" "$ncu" --clock-control none "$probe" --alloc >"$work/ncu.state"; then
    cp "$work/ncu.state" "$work/ncu.skip"
  fi
  cat "$work/ncu.state" "$work/ncu.skip" 2>/dev/null | head -1
  echo "python3: $(timeout 20 python3 -c 'import torch, transformers; print("torch", torch.__version__, "cuda", torch.version.cuda, "gpu", torch.cuda.is_available(), "transformers", transformers.__version__)' 2>&1 | tail -1)"
  if [[ ! -d "$deps/src/googletest" ]]; then
    echo "preflight: $deps has no src/googletest: run scripts/pack-gpu-deps.sh on a machine with the Debian packages"
    ok=1
  elif ! scripts/check-gpu-deps.sh "$deps"; then
    echo "preflight: the packed libraries do not all resolve here (above)"; ok=1
  fi
  return $ok
}

configure() {
  scripts/gpu-configure.sh "$deps" "$build" -DTPSERVE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$cuda_arch" || return 1
  cat "$build.configure.log"
}

build_targets() {
  # Every executable behind a `gpu` test (whatever tests/ registers), the rank
  # helper of the comm tests, the benches and what the parity script runs.
  local targets
  targets="$(ninja -C "$build" -t targets all 2>/dev/null |
    sed -n 's/^\(cuda_[a-z0-9_]*_test\|attention_merge_test\|comm_gpu_test\|comm_test_rank\): phony$/\1/p' | sort -u)"
  # shellcheck disable=SC2086
  ninja -C "$build" $targets gpu_bench sampling_bench tpserve-make-model tpserve-logits
}

memcheck() {
  # The op-level suites under the sanitizer, TPSERVE_MEMCHECK_JOBS (default 3)
  # at a time: all nine at once share the GPU and the cores and can all end cut
  # at the cap. Each suite's exit and seconds go to the log; one cut by the
  # phase cap shows as such.
  if [[ -s "$work/memcheck.skip" ]]; then cat "$work/memcheck.skip"; return 77; fi
  local jobs="${TPSERVE_MEMCHECK_JOBS:-3}" rc=0 t i
  [[ "$jobs" =~ ^[1-9][0-9]*$ ]] || jobs=3
  local pids=() names=() starts=()  # the suites running now
  # The 32k-context cases are left to the tests phase: under the sanitizer's
  # slowdown they alone would take the cap.
  local suites=(cuda_backend_test cuda_split_attention_test cuda_convert_test cuda_sampler_test cuda_small_batch_test
    cuda_decode_attention_test cuda_prefill_attention_test cuda_mma_test cuda_sliced_sampler_test)
  trap 'for i in "${!pids[@]}"; do kill "${pids[$i]}" 2>/dev/null; echo "--- ${names[$i]} (cut)";
        tail -40 "$build/memcheck.${names[$i]}.log"; done' TERM
  finish_first() {  # waits for the oldest running suite and reports it
    local r
    wait "${pids[0]}"
    r=$?
    echo "--- ${names[0]}: exit $r, $((SECONDS - starts[0])) s"
    grep -E "ERROR SUMMARY|Invalid|==========.*(at|by) " "$build/memcheck.${names[0]}.log" | head -40
    tail -3 "$build/memcheck.${names[0]}.log"
    [[ $r -eq 0 ]] || rc=1
    pids=("${pids[@]:1}") names=("${names[@]:1}") starts=("${starts[@]:1}")
  }
  for t in "${suites[@]}"; do
    [[ -x "$build/tests/cuda/$t" ]] || { echo "memcheck: $t was not built"; rc=1; continue; }
    ((${#pids[@]} < jobs)) || finish_first
    TPSERVE_REQUIRE_GPU=1 "$sanitizer" --tool memcheck --error-exitcode 99 --print-limit 20 "$build/tests/cuda/$t" \
      --gtest_filter='-*32k*' >"$build/memcheck.$t.log" 2>&1 &
    pids+=("$!") names+=("$t") starts+=("$SECONDS")
  done
  while ((${#pids[@]})); do finish_first; done
  echo "memcheck: ${#suites[@]} suites, $jobs at a time"
  return $rc
}

ncu_profile() {
  # Nsight Compute over gpu_bench's batch-1 decode profile (one eager step),
  # when the preflight found ncu working here.
  if [[ -s "$work/ncu.skip" ]]; then cat "$work/ncu.skip"; return 77; fi
  "$ncu" --clock-control none --launch-count 60 --section SpeedOfLight --section LaunchStats \
    "$build/bench/gpu/gpu_bench" --sections profile --models qwen3-0.6b --out "$work/ncu_bench.md" \
    --workdir "$work" >"$out/ncu.txt" 2>&1
}

if [[ "${1:-}" == __phase ]]; then  # phase's child: one function or command
  shift
  "$@"
  exit $?
fi

: >"$log"
start=$SECONDS
# The models the bench and the parity check write (about 4.5 GB) go to memory
# when it can hold them: writing 1.2 GB to this project's disk took 2 minutes.
work="$(mktemp -d /dev/shm/tpserve-gpu-check.XXXXXX 2>/dev/null || mktemp -d)"
export work
trap 'rm -rf "$work"' EXIT
echo "gpu-check: output in $out; phases capped at $total s in all (build in $build, deps $deps)"
if ! phase preflight "GPU, nvcc, cuBLAS, NCCL, sanitizer, torch, the pack" preflight; then
  gpu_name="(preflight failed)"
  summary
  exit 2
fi
gpu_name="$(timeout 5 nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)"
# This GPU's architecture only (compute capability 9.0 -> 90): half the nvcc work of 80 + 90.
cuda_arch="${TPSERVE_CUDA_ARCH:-$(timeout 5 nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null |
  head -1 | tr -d '. ')}"
[[ "$cuda_arch" =~ ^[0-9]+[a-z]?$ ]] || cuda_arch=90
export cuda_arch
sed -n '/==== preflight/,$p' "$log" | grep -E "^(NCCL|cuBLAS|compute-sanitizer|python3|Cuda|Build)" | sed 's/^/    /'
if phase configure "engine-only, CUDA arch $cuda_arch" configure; then
  comms="$(grep -oE "tpserve: (gloo|NCCL) communicator (ON|OFF)" "$build.configure.log" 2>/dev/null | sed 's/tpserve: //' | paste -sd, -)"
  echo "    communicators built: $comms"
  if phase build "gpu tests, benches, tools" build_targets; then
    phase deps "ldd of every executable" scripts/check-gpu-deps.sh "$deps" --exes "$build"
    # The executables' RPATH reaches the pack (the deps phase proves it with an
    # empty LD_LIBRARY_PATH); the path is set as well, so that a gap there costs
    # that phase only.
    multiarch="$(gcc -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)"
    export LD_LIBRARY_PATH="$deps/lib:$deps/lib/$multiarch${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    phase tests "ctest -L gpu, TPSERVE_CUDA_SYNC_CHECK=1, TPSERVE_REQUIRE_GPU=1" env TPSERVE_CUDA_SYNC_CHECK=1 \
      TPSERVE_REQUIRE_GPU=1 ctest --test-dir "$build" -L gpu -j 8 --timeout 120 --output-on-failure
    phase memcheck "compute-sanitizer memcheck, 9 op suites" memcheck
    phase bench "gpu_bench -> gpu_bench.md" "$build/bench/gpu/gpu_bench" --out "$out/gpu_bench.md" \
      --workdir "$work"
    phase sampling "sampling_bench -> sampling_bench.md" \
      bash -c "set -o pipefail; '$build/bench/gpu/sampling_bench' | tee '$out/sampling_bench.md'"
    phase parity "hf_parity.py vs transformers fp32/bf16" env PYTHONUNBUFFERED=1 python3 tools/hf_parity.py \
      --reference hf --backend cuda --make-model "$build/tools/make_model/tpserve-make-model" \
      --logits "$build/tools/logits/tpserve-logits" --workdir "$work" --out "$out/parity.md"
    phase ncu "ncu, batch-1 decode profile -> ncu.txt" ncu_profile
  fi
fi
summary
exit "$failed"
