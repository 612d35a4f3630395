#!/bin/sh
# The real model clients of tests/gateway/test_clients.py (package.json + package-lock.json
# here), installed by tests/lib/npm-cache.sh. Prints their node_modules path.
set -eu
here=$(CDPATH= cd -- "$(dirname -- "$0")" && pwd)
modules=$("$here/../../lib/npm-cache.sh" "$here" gateway-clients)
echo "$modules"
