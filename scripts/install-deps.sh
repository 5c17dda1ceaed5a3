#!/usr/bin/env bash
# Installs the Debian packages tpserve builds and tests with. Idempotent: quiet and
# quick when everything is already there. Runs apt-get as root or through sudo.
#
#   scripts/install-deps.sh                  everything: build, tests, benchmarks, fuzzers, demo
#   scripts/install-deps.sh --build          only what building the programs needs
#                                            (-DTPSERVE_BUILD_TESTS=OFF -DTPSERVE_BUILD_BENCH=OFF);
#                                            the Docker image's build stage runs this
#   scripts/install-deps.sh --print [--build]  the package names, one a line; installs nothing
#
# This is the one list: deploy/docker/Dockerfile runs the script rather than
# keeping a copy (the unit test scripts.docker_context checks that it does).
set -euo pipefail

# What configuring and building the programs needs.
build_packages=(
  cmake ninja-build g++ pkg-config
  libabsl-dev nlohmann-json3-dev libpcre2-dev libutf8proc-dev libcpp-httplib-dev libboost-dev
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev libssl-dev openssl
  libgloo-dev openmpi-bin libopenmpi-dev libzmq3-dev
)
# What the tests, benchmarks, fuzzers and scripts/test.sh add.
test_packages=(
  clang libclang-rt-14-dev libgtest-dev libgmock-dev googletest libbenchmark-dev curl ccache lld
  python3 python3-numpy python3-jinja2 python3-prometheus-client python3-yaml gnuplot-nox nodejs npm
  systemd  # systemd-analyze, for tests/docs/deploy_recipes_test.py
  python3-zmq python3-msgpack  # a vLLM-style KV event subscriber (tests/e2e/kv_events_zmq_check.py)
)
# With --build, a release without these still builds (CMake leaves the gloo CPU
# communicator out; GPUs use NCCL): they are installed when the release has them.
build_optional=(libgloo-dev)

build_only=0
print=0
for arg in "$@"; do
  case "$arg" in
    --build) build_only=1 ;;
    --print) print=1 ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) echo "install-deps: unknown argument '$arg' (see --help)" >&2; exit 2 ;;
  esac
done

packages=("${build_packages[@]}")
[[ $build_only -eq 1 ]] || packages+=("${test_packages[@]}")
if [[ $print -eq 1 ]]; then
  printf '%s\n' "${packages[@]}"
  exit 0
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
# nodejs/npm may come from outside Debian's packages on some machines.
if command -v node >/dev/null && command -v npm >/dev/null; then
  filtered=()
  for p in "${missing[@]}"; do [[ "$p" == nodejs || "$p" == npm ]] || filtered+=("$p"); done
  missing=("${filtered[@]}")
fi
[[ ${#missing[@]} -eq 0 ]] && exit 0

optional=()
if [[ $build_only -eq 1 ]]; then
  required=()
  for p in "${missing[@]}"; do
    if [[ " ${build_optional[*]} " == *" $p "* ]]; then optional+=("$p"); else required+=("$p"); fi
  done
  missing=("${required[@]}")
fi

sudo=""
[[ $(id -u) -ne 0 ]] && sudo="sudo"
echo "install-deps: installing ${missing[*]} ${optional[*]}"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
[[ ${#missing[@]} -eq 0 ]] || $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
for p in "${optional[@]}"; do
  $sudo apt-get install -y -qq --no-install-recommends "$p" >/dev/null \
    || echo "install-deps: $p is not in this release's packages; building without it"
done
