#!/bin/sh
# tests/container/run.sh - container tests of forceai/runtime-runner (issue 7).
# Needs root, podman (scripts/podman-setup.sh) and build/static/forceai-runner
# (`make static`). Last line: `N passed, N failed`; exit status 1 on failure.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
exec python3 "$here/test_container.py" "$@"
