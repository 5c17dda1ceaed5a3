#!/usr/bin/env bash
# Installs the official OpenAI Node client (npm `openai`, v4) into a cache
# outside the source tree, for the tpserve-http end-to-end test:
#
#   ${TPSERVE_NPM_CACHE:-${TPSERVE_CACHE:-$HOME/.cache/tpserve}/npm}/node_modules/openai
#
# Idempotent and quiet when it is there. Exits non-zero when it is missing and
# npm cannot fetch it (no npm, or the registry unreachable); the test then
# skips with a message.
set -euo pipefail

dir=${TPSERVE_NPM_CACHE:-${TPSERVE_CACHE:-$HOME/.cache/tpserve}/npm}
if [[ -f "$dir/node_modules/openai/package.json" ]]; then
  exit 0
fi
if ! command -v npm >/dev/null 2>&1; then
  echo "fetch-openai-client.sh: npm not found; install Node.js/npm to run the OpenAI client test" >&2
  exit 1
fi
mkdir -p "$dir"
[[ -f "$dir/package.json" ]] || echo '{"name": "tpserve-npm-cache", "private": true}' >"$dir/package.json"
echo "fetch-openai-client.sh: installing openai@4 into $dir"
if ! npm install --prefix "$dir" --no-audit --no-fund --loglevel=error \
    --fetch-timeout=30000 --fetch-retries=1 "openai@^4" >&2; then
  echo "fetch-openai-client.sh: npm install failed (registry unreachable?); the OpenAI client test will skip" >&2
  exit 1
fi
[[ -f "$dir/node_modules/openai/package.json" ]]
