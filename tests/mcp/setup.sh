#!/bin/sh
# Installs the pinned MCP test clients (package-lock.json: the official TypeScript SDK, the
# conformance suite, a stdio MCP server, Node.js 22) into a cache outside the clone, once per
# lockfile, and links it here as node_modules. Prints the path of the Node.js 22 binary.
#   MCP_NPM_CACHE (default /var/cache/forceai-npm/mcp)
set -eu
here=$(CDPATH= cd -- "$(dirname -- "$0")" && pwd)
cache=${MCP_NPM_CACHE:-/var/cache/forceai-npm/mcp}
stamp=$(sha256sum "$here/package-lock.json" | cut -c1-16)
if [ ! -f "$cache/.stamp-$stamp" ] || [ ! -x "$cache/node_modules/.bin/node" ]; then
  command -v npm >/dev/null || "$here/../../scripts/install-deps.sh" check >&2
  mkdir -p "$cache"
  rm -f "$cache"/.stamp-*
  cp "$here/package.json" "$here/package-lock.json" "$cache/"
  (cd "$cache" && npm ci --no-audit --no-fund --prefer-offline >&2)
  touch "$cache/.stamp-$stamp"
fi
ln -sfn "$cache/node_modules" "$here/node_modules"
echo "$cache/node_modules/.bin/node"
