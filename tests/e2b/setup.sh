#!/bin/sh
# The pinned E2B SDK (e2b, package-lock.json), installed by tests/lib/npm-cache.sh and linked
# here as node_modules.
set -eu
here=$(CDPATH= cd -- "$(dirname -- "$0")" && pwd)
modules=$("$here/../lib/npm-cache.sh" "$here" e2b)
ln -sfn "$modules" "$here/node_modules"
