#!/bin/sh
# Installs the pinned coding-agent CLIs (package-lock.json: @openai/codex,
# @anthropic-ai/claude-code) into a cache outside the clone, once per lockfile,
# and prints the directory of their executables.
#   FORCEAI_NPM_CACHE=/var/cache/forceai-npm (default) tests/engines/setup.sh
set -eu
here=$(CDPATH= cd -- "$(dirname -- "$0")" && pwd)
cache=${FORCEAI_NPM_CACHE:-/var/cache/forceai-npm}/engines
want=$(sha256sum "$here/package-lock.json" | cut -d' ' -f1)
if [ "$(cat "$cache/.lock-sha256" 2>/dev/null)" != "$want" ] ||
   [ ! -x "$cache/node_modules/.bin/codex" ] || [ ! -x "$cache/node_modules/.bin/claude" ]; then
	command -v npm >/dev/null || { echo "setup.sh: npm is missing (scripts/install-deps.sh check)" >&2; exit 1; }
	mkdir -p "$cache"
	cp "$here/package.json" "$here/package-lock.json" "$cache/"
	(cd "$cache" && npm ci --no-audit --no-fund --prefer-offline >&2)
	echo "$want" >"$cache/.lock-sha256"
fi
echo "$cache/node_modules/.bin"
