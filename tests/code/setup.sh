#!/bin/sh
# The pinned E2B code-interpreter client (package-lock.json), installed by tests/lib/npm-cache.sh
# and linked here as node_modules.
set -eu
here=$(CDPATH= cd -- "$(dirname -- "$0")" && pwd)
modules=$("$here/../lib/npm-cache.sh" "$here" code)
ln -sfn "$modules" "$here/node_modules"
