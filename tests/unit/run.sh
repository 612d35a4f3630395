#!/bin/bash
# Unit tests: each program under ASan+UBSan, then once more under valgrind.
#   tests/unit/run.sh [NAME ...]     only build/tests/*/test_NAME (default: all built)
#   UNIT_FILTER=case,glob_*          only those cases (see tests/unit/unit.h)
# Each program prints TAP; this prints one line per program run and a total.
set -u
cd "$(dirname "$0")/../.."
pass=0 fail=0 planned=0
if [ $# -gt 0 ]; then names=("$@"); else
	names=()
	for t in build/tests/asan/test_*; do names+=("${t##*/test_}"); done
fi

# $1: label; rest: the command. Prints the program's summary; on failure its
# failed cases, their diagnostics and the last lines of its output.
run() {
	local label=$1 out r line
	shift
	if out=$("$@" 2>&1); then r=0; else r=$?; fi
	line=$(printf '%s\n' "$out" | grep -E '^[0-9]+ passed, [0-9]+ failed' | tail -1)
	planned=$((planned + $(printf '%s\n' "$out" | sed -nE 's/^1\.\.([0-9]+).*/\1/p' | head -1 | grep . || echo 0)))
	echo "$label: ${line:-no summary} (exit $r)"
	if [ $r -eq 0 ] && [ -n "$line" ]; then
		pass=$((pass + 1))
	else
		fail=$((fail + 1))
		printf '%s\n' "$out" | grep -E '^(not ok|#)' | head -40 | sed 's/^/    /'
		printf '%s\n' "$out" | tail -15 | sed 's/^/    /'
	fi
}

for n in "${names[@]}"; do
	run "unit/asan test_$n" "build/tests/asan/test_$n"
done
for n in "${names[@]}"; do
	run "unit/valgrind test_$n" valgrind -q --error-exitcode=99 --leak-check=full \
		--errors-for-leak-kinds=definite --trace-children=no "build/tests/plain/test_$n"
done
if [ -n "${UNIT_FILTER:-}" ] && [ $planned -eq 0 ]; then
	echo "UNIT_FILTER=$UNIT_FILTER matches no case"
	fail=$((fail + 1))
fi
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
