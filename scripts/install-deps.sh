#!/usr/bin/env bash
# Installs the Debian packages tpserve builds and tests with. Idempotent: quiet and
# quick when everything is already there. Runs apt-get as root or through sudo.
set -euo pipefail

packages=(
  cmake ninja-build g++ clang libclang-rt-14-dev pkg-config
  libgtest-dev libgmock-dev googletest libbenchmark-dev
  libabsl-dev nlohmann-json3-dev libpcre2-dev libutf8proc-dev libcpp-httplib-dev curl
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev libssl-dev openssl
  libgloo-dev openmpi-bin libopenmpi-dev libopenblas-dev
  python3 python3-numpy python3-jinja2 python3-prometheus-client gnuplot-nox nodejs npm
)

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

sudo=""
[[ $(id -u) -ne 0 ]] && sudo="sudo"
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
