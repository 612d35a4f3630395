#!/bin/sh
# Installs the real model clients of tests/gateway/test_clients.py (pinned in
# package.json + package-lock.json here) into a cache outside the clone, where
# a task user can read them; prints the cache's node_modules path.
#   tests/gateway/clients/setup.sh        (FORCEAI_NPM_CACHE overrides the cache root)
# Reinstalls (npm ci) only when the lockfile changed since the last install.
set -eu
here=$(CDPATH= cd -- "$(dirname -- "$0")" && pwd)
dir=${FORCEAI_NPM_CACHE:-/var/cache/forceai-npm}/gateway-clients
command -v npm >/dev/null 2>&1 || { echo "setup.sh: npm is not installed" >&2; exit 2; }
mkdir -p "$dir"
if ! cmp -s "$here/package-lock.json" "$dir/package-lock.json" ||
   ! cmp -s "$here/package.json" "$dir/package.json" || [ ! -d "$dir/node_modules" ]; then
	cp "$here/package.json" "$here/package-lock.json" "$dir/"
	(cd "$dir" && npm ci --no-audit --no-fund --prefer-offline >&2)
fi
# The task user runs them: readable and executable by all, writable by none.
chmod -R go-w,a+rX "$dir"
echo "$dir/node_modules"
