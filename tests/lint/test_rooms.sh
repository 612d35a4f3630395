#!/bin/bash
# Self-test of scripts/rooms.py on a tiny fixture tree: it must fail on a route file (api/) that
# schedules on the loop and on a project header included with angle brackets, naming file and
# line, and pass the same calls below api/, a system header in angle brackets, and a comment.
# Prints "N passed, N failed".
set -u
cd "$(dirname "$0")/../.."
tool=scripts/rooms.py
dir=$(mktemp -d /tmp/test_rooms.XXXXXX)
trap 'rm -rf "$dir"' EXIT
pass=0 fail=0

# src PATH 'text': writes a source file of a fixture tree
src() {
	mkdir -p "$(dirname "$dir/$1")"
	printf '%s\n' "$2" >"$dir/$1"
}

# expect NAME WANT_RC PATTERN TREE: runs the tool on TREE, checks exit code and output
expect() {
	local name=$1 want=$2 pattern=$3 out rc
	out=$(python3 "$tool" --sources "$dir/$4" 2>&1)
	rc=$?
	if [ "$rc" -eq "$want" ] && grep -qE -- "$pattern" <<<"$out"; then
		echo "ok - $name"
		pass=$((pass + 1))
	else
		echo "not ok - $name (exit $rc, want $want; output lacks /$pattern/)"
		sed 's/^/# /' <<<"$out"
		fail=$((fail + 1))
	fi
}

src good/core/loop.h 'void loop_defer(void);'
src good/watch/watch.c '#include <stdio.h>
#include "core/loop.h"
void w(void) { loop_defer(); }'
src good/api/watch.c '#include <string.h>
#include "core/loop.h"
/* the engine calls loop_defer(), not this route */
int route(void) { return 0; }'
expect "routes without loop work and quoted headers pass" 0 'rooms: 3 files, 0 problems' good

src timer/core/loop.h 'void loop_timer_start(void);'
src timer/api/metrics.c '#include "core/loop.h"
void tick(void) {
	loop_timer_start();
}'
expect "a route file starting a timer fails, named by line" 1 \
	'api/metrics.c:3: a route file schedules on the loop \(loop_timer_start\)' timer

src watchadd/api/watch.c 'int loop_watch_add(int);
int f(void) { return loop_watch_add (1); }'
expect "a route file adding an fd watch fails" 1 'api/watch.c:2: .*loop_watch_add' watchadd

src angle/core/log.h 'void log_x(void);'
src angle/task/task.c '#include <stdlib.h>
#include <core/log.h>'
expect "a project header in angle brackets fails" 1 \
	'task/task.c:2: project header <core/log.h> included with angle brackets' angle

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
