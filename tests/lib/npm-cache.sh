#!/bin/sh
# One installer for the npm-pinned test clients of every suite (tests/{mcp,code,e2b,engines}/,
# tests/gateway/clients/): installs DIR's package.json + package-lock.json into a cache outside
# the clone, once per lockfile, and prints the cache's node_modules path.
#   tests/lib/npm-cache.sh DIR NAME     (FORCEAI_NPM_CACHE overrides the root /var/cache/forceai-npm)
# The cache directory is NAME-<hash of the two files>: checkouts pinning other versions get their
# own, and an install is built aside (npm ci) and renamed into place whole, under a lock, so no
# test ever sees a half-installed tree. The task user runs some of these clients: the tree is
# readable and executable by all, writable by none.
set -eu
[ $# -eq 2 ] || { echo "usage: npm-cache.sh DIR NAME" >&2; exit 2; }
here=$1 name=$2
root=${FORCEAI_NPM_CACHE:-/var/cache/forceai-npm}
if ! command -v npm >/dev/null 2>&1; then
	"$(dirname -- "$0")/../../scripts/install-deps.sh" check >&2
	command -v npm >/dev/null 2>&1 || { echo "npm-cache.sh: npm is not installed" >&2; exit 2; }
fi
hash=$(cat "$here/package.json" "$here/package-lock.json" | sha256sum | cut -c1-16)
dir=$root/$name-$hash
mkdir -p "$root"
if [ ! -f "$dir/.complete" ]; then
	exec 9>"$root/$name.lock"
	flock 9
	if [ ! -f "$dir/.complete" ]; then
		tmp=$(mktemp -d "$root/$name.tmp.XXXXXX")
		cp "$here/package.json" "$here/package-lock.json" "$tmp/"
		(cd "$tmp" && npm ci --no-audit --no-fund --prefer-offline >&2)
		chmod -R go-w,a+rX "$tmp"
		touch "$tmp/.complete"
		rm -rf "$dir"
		mv "$tmp" "$dir"
	fi
	exec 9>&-
fi
echo "$dir/node_modules"
