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

src state/api/sessions.c '#include <stddef.h>
static const char *const names[] = {"a", NULL};
static struct session *sessions;
int route(void) { return names[0] != NULL; }'
expect "a route file keeping a file-scope variable fails, a const table passes" 1 \
	'api/sessions.c:3: a route file keeps state \(sessions\)' state

src statecount/api/count.c 'unsigned long requests = 0;
int route(void) { static int x; return x; }'
expect "a global counter in a route file fails" 1 'api/count.c:1: a route file keeps state \(requests\)' statecount

longfn='int f(void)
{'
for i in $(seq 1 80); do longfn="$longfn
	g();"; done
longfn="$longfn
}"
src longfn/task/long.c "$longfn"
expect "a function of 83 lines fails, named by file, line and name" 1 \
	'task/long.c:1: function f is 83 lines' longfn

shortfn='int f(void)
{'
for i in $(seq 1 77); do shortfn="$shortfn
	g();"; done
shortfn="$shortfn
}"
src shortfn/task/short.c "$shortfn"
expect "a function of 80 lines passes" 0 'rooms: 1 files, 0 problems' shortfn

bigfile=''
for i in $(seq 1 801); do bigfile="$bigfile
static const int v$i = $i;"; done
src bigfile/core/big.c "${bigfile#?}"
expect "a file of 801 lines fails" 1 'core/big.c: 801 lines \(more than 800\)' bigfile

src angle/core/log.h 'void log_x(void);'
src angle/task/task.c '#include <stdlib.h>
#include <core/log.h>'
expect "a project header in angle brackets fails" 1 \
	'task/task.c:2: project header <core/log.h> included with angle brackets' angle

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
