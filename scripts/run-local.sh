#!/bin/bash
# Runs the development build as PID 1 of a fresh PID namespace (no container).
set -euo pipefail
cd "$(dirname "$0")/.."
port=${PORT:-8080}
token=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
state=$(mktemp -d /tmp/forceai-runner-state.XXXXXX)
echo "endpoint: http://127.0.0.1:$port"
echo "token:    $token   (X-EXECD-ACCESS-TOKEN)"
echo "try:      curl -sN -H 'X-EXECD-ACCESS-TOKEN: $token' -d '{\"command\":\"id\"}' http://127.0.0.1:$port/command"
echo "(Ctrl-C stops it)"
export EXECD_ACCESS_TOKEN=$token
exec unshare --pid --fork --mount-proc --kill-child \
	build/forceai-runner --listen "127.0.0.1:$port" --state-dir "$state" \
	--seccomp-policy "$PWD/seccomp/default.json"
