#!/bin/bash
# Unit tests: each under ASan+UBSan, then once more under valgrind.
set -u
cd "$(dirname "$0")/../.."
pass=0 fail=0
for t in build/tests/asan/test_*; do
	name=$(basename "$t")
	if out=$("$t" 2>&1); then r=0; else r=1; fi
	line=$(printf '%s\n' "$out" | grep -E '^[0-9]+ passed, [0-9]+ failed' | tail -1)
	echo "unit/asan $name: $line"
	[ $r -eq 0 ] && pass=$((pass + 1)) || { fail=$((fail + 1)); printf '%s\n' "$out" | tail -20; }
done
for t in build/tests/plain/test_*; do
	name=$(basename "$t")
	if out=$(valgrind -q --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite \
		--trace-children=no "$t" 2>&1); then r=0; else r=1; fi
	echo "unit/valgrind $name: exit $r"
	[ $r -eq 0 ] && pass=$((pass + 1)) || { fail=$((fail + 1)); printf '%s\n' "$out" | tail -20; }
done
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
