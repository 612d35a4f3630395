#!/bin/sh
# Installs the pinned E2B SDK (e2b) (package-lock.json) into a cache outside the
# clone, once per lockfile, and links it here as node_modules (as tests/mcp/setup.sh does).
#   E2B_NPM_CACHE (default /var/cache/forceai-npm/e2b)
set -eu
here=$(CDPATH= cd -- "$(dirname -- "$0")" && pwd)
cache=${E2B_NPM_CACHE:-/var/cache/forceai-npm/e2b}
stamp=$(sha256sum "$here/package-lock.json" | cut -c1-16)
if [ ! -f "$cache/.stamp-$stamp" ] || [ ! -d "$cache/node_modules/e2b" ]; then
  command -v npm >/dev/null || "$here/../../scripts/install-deps.sh" check >&2
  mkdir -p "$cache"
  rm -f "$cache"/.stamp-*
  cp "$here/package.json" "$here/package-lock.json" "$cache/"
  (cd "$cache" && npm ci --no-audit --no-fund --prefer-offline >&2)
  touch "$cache/.stamp-$stamp"
fi
ln -sfn "$cache/node_modules" "$here/node_modules"
