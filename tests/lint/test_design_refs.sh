#!/bin/bash
# Self-test of scripts/design_refs.py on a tiny fixture tree: --check must fail on an old
# numbered reference (`design §4.4`, a bare `§4.4`) and on a reference or a Markdown link whose
# heading does not exist, naming file and line, and pass an RFC's `§`, another document's
# (`performance.md §2`), a list an RFC starts across a comment's line break, and references that
# resolve; --rewrite must turn the old ones into the new form (code: design/<file>.md#<anchor>,
# Markdown: a relative link), after which --check passes, and must name a number it has no
# mapping for. Prints "N passed, N failed".
# design-refs: skip this file (its fixtures are old references on purpose)
set -u
cd "$(dirname "$0")/../.."
dir=$(mktemp -d /tmp/test_design_refs.XXXXXX)
trap 'rm -rf "$dir"' EXIT
pass=0 fail=0

put() {
	mkdir -p "$(dirname "$dir/$1")"
	printf '%s\n' "$2" >"$dir/$1"
}

# expect NAME WANT_RC PATTERN ARGS...: runs the tool in the fixture tree
expect() {
	local name=$1 want=$2 pattern=$3 out rc
	shift 3
	out=$(cd "$dir" && python3 scripts/design_refs.py "$@" 2>&1)
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

mkdir -p "$dir/scripts"
cp scripts/design_refs.py "$dir/scripts/"
put docs/design.md '# forceai-runner — design

## Floors and rooms

See [the task engine](design/tasks.md) and [backpressure](design/tasks.md#backpressure).'
put docs/design/tasks.md '# The task engine

## Backpressure

The slowest reader ([Floors and rooms](../design.md#floors-and-rooms)).

## Decisions: tasks'
printf '4\tdesign/tasks.md\tThe task engine\n4.4\tdesign/tasks.md#backpressure\tBackpressure\n4.9\tdesign/tasks.md#decisions-tasks\tDecisions: tasks\n2.2\tdesign.md#floors-and-rooms\tFloors and rooms\n' \
	>"$dir/scripts/design_refs.map"
put runner/ok.c '/* Fine: design/tasks.md#backpressure, docs/design/tasks.md, design.md#floors-and-rooms,
 * RFC 9110 §7.6.1, RFC 9112 §6.1, §5.4 and
 * §3.2; performance.md §2. */'

expect "references that resolve pass" 0 "^$" --check runner docs

put runner/old.c '/* Held back (docs/design.md §4.4): see design §4.9, and
 * §2.2 of the design; RFC 9110 §5.5. */'
expect "an old reference fails, naming file and line" 1 "runner/old.c:1: old-style design reference §4.4" --check runner
expect "a bare § on the next line fails too" 1 "runner/old.c:2: old-style design reference §2.2" --check runner
expect "an RFC's § is not the design's" 0 "^$" --check runner/ok.c

put runner/gone.c '/* See design/tasks.md#no-such-heading and design/nothing.md. */'
expect "a heading that does not exist fails" 1 "runner/gone.c:1: design/tasks.md#no-such-heading does not resolve" --check runner/gone.c
expect "a file that does not exist fails" 1 "design/nothing.md does not resolve" --check runner/gone.c
put docs/api.md 'Routes ([design](design/tasks.md#backpresure)).'
expect "a Markdown link to a missing heading fails" 1 "docs/api.md:1: link design/tasks.md#backpresure does not resolve" --check docs
rm "$dir/runner/gone.c"

put docs/api.md 'Routes ([design §4.4, §4](design.md)); and §4.9 there.'
expect "--dry-run counts and writes nothing" 0 "would rewrite 6 reference" --rewrite scripts/design_refs.map --dry-run runner docs
expect "--rewrite rewrites" 0 "rewrote 6 reference" --rewrite scripts/design_refs.map runner docs
expect "after --rewrite, --check passes" 0 "^$" --check runner docs
if grep -qF '(docs/design/tasks.md#backpressure): see design/tasks.md#decisions-tasks, and' "$dir/runner/old.c" &&
	grep -qF ' * design.md#floors-and-rooms; RFC 9110 §5.5. */' "$dir/runner/old.c" &&
	grep -qF 'Routes ([Backpressure](design/tasks.md#backpressure), [The task engine](design/tasks.md)); and [Decisions: tasks](design/tasks.md#decisions-tasks) there.' "$dir/docs/api.md"; then
	echo "ok - the new form, in code and in Markdown"
	pass=$((pass + 1))
else
	echo "not ok - the new form, in code and in Markdown"
	sed 's/^/# /' "$dir/runner/old.c" "$dir/docs/api.md"
	fail=$((fail + 1))
fi

put runner/unknown.c '/* design §9.99 */'
expect "a number without a mapping is named" 1 "no mapping: runner/unknown.c:1: §9.99" --rewrite scripts/design_refs.map runner/unknown.c

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
