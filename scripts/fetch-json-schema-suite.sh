#!/usr/bin/env bash
# Installs the JSON Schema front end's test inputs from npm into tpserve's
# cache outside the source tree (scripts/lib/npm-cache.sh):
#
#   ${TPSERVE_NPM_CACHE:-${TPSERVE_CACHE:-$HOME/.cache/tpserve}/npm}/node_modules/
#       json-schema-test-suite/tests/draft4/   the official JSON Schema Test Suite (the npm
#                                             package carries drafts 3 and 4)
#       ajv, ajv-formats, ajv-draft-04         the independent validator of generated instances
#
# Idempotent and quiet when everything is there. Exits non-zero only when the
# packages are missing and npm cannot fetch them (no npm, or registry
# unreachable); tests/grammar/json_schema_suite_test and json_schema_walk_test
# then skip with a message.
set -euo pipefail
# shellcheck source=scripts/lib/npm-cache.sh
source "$(dirname "$0")/lib/npm-cache.sh"

dir="$(npm_cache_dir)"
packages=(json-schema-test-suite@0.0.10 ajv@8 ajv-formats@3 ajv-draft-04@1)

have_all() {
  [[ -d "$dir/node_modules/json-schema-test-suite/tests/draft4" ]] &&
    [[ -f "$dir/node_modules/ajv/package.json" ]] &&
    [[ -f "$dir/node_modules/ajv-formats/package.json" ]] &&
    [[ -f "$dir/node_modules/ajv-draft-04/package.json" ]]
}

if have_all; then
  exit 0
fi
npm_cache_install fetch-json-schema-suite.sh "the JSON Schema suite and validator tests will skip" "${packages[@]}"
if ! have_all; then
  echo "fetch-json-schema-suite.sh: npm finished but the packages are missing under $dir/node_modules" >&2
  exit 1
fi
