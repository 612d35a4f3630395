#!/bin/sh
# Runs the OpenSandbox-SDK compatibility tests against a running forceai-runner.
#   RUNNER_URL=http://127.0.0.1:18080 [RUNNER_TOKEN=...] [NODE=node-20-or-later] tests/sdk/run.sh
# node_modules is installed from package-lock.json (npm ci) only when it is absent.
set -eu
here=$(CDPATH= cd -- "$(dirname -- "$0")" && pwd)
root=$(CDPATH= cd -- "$here/../.." && pwd)

if [ -z "${RUNNER_URL:-}" ]; then
  echo "run.sh: RUNNER_URL is not set (e.g. RUNNER_URL=http://127.0.0.1:18080)" >&2
  exit 2
fi

if [ ! -d "$here/node_modules" ]; then
  (cd "$here" && npm ci --no-audit --no-fund --prefer-offline)
fi

cd "$root"
export RUNNER_URL
export RUNNER_TOKEN="${RUNNER_TOKEN:-}"
# The files, not the directory: Node.js 22 takes a directory argument for a script.
exec "${NODE:-node}" --test tests/sdk/*.test.mjs
