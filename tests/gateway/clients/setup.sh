#!/bin/sh
# Installs the real model clients of tests/gateway/test_clients.py (pinned in
# package.json + package-lock.json here) into a cache outside the clone, where
# a task user can read them; prints the cache's node_modules path.
#   tests/gateway/clients/setup.sh        (FORCEAI_NPM_CACHE overrides the cache root)
# The cache directory is named by the lockfile's hash: checkouts pinning other
# versions get their own, and an install is built aside (npm ci) and renamed
# into place whole, under a lock, so no test ever sees a half-installed tree.
set -eu
here=$(CDPATH= cd -- "$(dirname -- "$0")" && pwd)
root=${FORCEAI_NPM_CACHE:-/var/cache/forceai-npm}
command -v npm >/dev/null 2>&1 || { echo "setup.sh: npm is not installed" >&2; exit 2; }
hash=$(cat "$here/package.json" "$here/package-lock.json" | sha256sum | cut -c1-16)
dir=$root/gateway-clients-$hash
mkdir -p "$root"
if [ ! -f "$dir/.complete" ]; then
	exec 9>"$root/gateway-clients.lock"
	flock 9
	if [ ! -f "$dir/.complete" ]; then
		tmp=$(mktemp -d "$root/gateway-clients.tmp.XXXXXX")
		cp "$here/package.json" "$here/package-lock.json" "$tmp/"
		(cd "$tmp" && npm ci --no-audit --no-fund --prefer-offline >&2)
		# The task user runs them: readable and executable by all, writable by none.
		chmod -R go-w,a+rX "$tmp"
		touch "$tmp/.complete"
		rm -rf "$dir"
		mv "$tmp" "$dir"
	fi
	exec 9>&-
fi
echo "$dir/node_modules"
