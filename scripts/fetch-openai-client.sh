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
# shellcheck source=scripts/lib/npm-cache.sh
source "$(dirname "$0")/lib/npm-cache.sh"

dir="$(npm_cache_dir)"
[[ -f "$dir/node_modules/openai/package.json" ]] && exit 0
npm_cache_install fetch-openai-client.sh "the OpenAI client test will skip" "openai@^4"
[[ -f "$dir/node_modules/openai/package.json" ]]
