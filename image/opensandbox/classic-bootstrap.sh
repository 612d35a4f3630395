#!/bin/sh
# classic-bootstrap.sh - a stand-in for OpenSandbox's own bootstrap.sh in its
# classic topology (server setting runtime.execd_run_as_init = false, the
# default), used by tests/container to check the runner as that wrapper's
# child. It reproduces the process tree, not OpenSandbox's code:
#
#   PID 1  /bin/sh bootstrap.sh CMD...      (this script: traps TERM/INT)
#     +- $EXECD &                           (OpenSandbox's execd; optional here)
#     +- CMD... &                           (the sandbox entrypoint, e.g.
#                                            /sbin/forceai-runner: subreaper mode)
#
# On SIGTERM/SIGINT it forwards the signal to both children, waits for them
# and exits 0; when CMD exits it stops execd and exits with CMD's status.
set -e

CMD_PID=""
EXECD_PID=""

forward() {
	sig="$1"
	[ -z "$CMD_PID" ] || kill "-$sig" "$CMD_PID" 2>/dev/null || true
	[ -z "$EXECD_PID" ] || kill "-$sig" "$EXECD_PID" 2>/dev/null || true
	[ -z "$CMD_PID" ] || wait "$CMD_PID" 2>/dev/null || true
	[ -z "$EXECD_PID" ] || wait "$EXECD_PID" 2>/dev/null || true
	exit 0
}
trap 'forward TERM' TERM
trap 'forward INT' INT

EXECD="${EXECD:-/opt/opensandbox/execd}"
if [ -x "$EXECD" ]; then
	"$EXECD" &
	EXECD_PID=$!
fi

[ $# -ge 1 ] || set -- sh
"$@" &
CMD_PID=$!

set +e
wait "$CMD_PID"
status=$?
set -e
[ -z "$EXECD_PID" ] || { kill -TERM "$EXECD_PID" 2>/dev/null; wait "$EXECD_PID" 2>/dev/null; } || true
exit "$status"
