#!/usr/bin/env bash
# Installs the Kubernetes API's JSON schemas from npm into tpserve's cache outside
# the source tree (scripts/lib/npm-cache.sh), for the test of deploy/kubernetes/
# (tests/docs/deploy_recipes_test.py, docs.deploy_kubernetes):
#
#   ${TPSERVE_NPM_CACHE:-${TPSERVE_CACHE:-$HOME/.cache/tpserve}/npm}/node_modules/kubernetes-models
#
# kubernetes-models 4.3.1 carries the schemas generated from Kubernetes 1.27.1's
# OpenAPI document as plain JSON Schema objects, one per definition (later
# releases ship them compiled into code, which cannot be made strict). 1.27 is
# the release deploy/kubernetes/ targets (gRPC probes).
#
# Idempotent and quiet when it is there. Exits non-zero only when it is missing
# and npm cannot fetch it (no npm, or the registry unreachable); the test then
# skips its schema part with a message.
set -euo pipefail
# shellcheck source=scripts/lib/npm-cache.sh
source "$(dirname "$0")/lib/npm-cache.sh"

dir="$(npm_cache_dir)"
version=4.3.1
have() {
  [[ -f "$dir/node_modules/kubernetes-models/package.json" ]] &&
    grep -q "\"version\": \"$version\"" "$dir/node_modules/kubernetes-models/package.json"
}
have && exit 0
npm_cache_install fetch-k8s-schemas.sh "the Kubernetes manifest test will skip its schema check" \
  "kubernetes-models@$version"
if ! have; then
  echo "fetch-k8s-schemas.sh: npm finished but kubernetes-models $version is missing under $dir/node_modules" >&2
  exit 1
fi
