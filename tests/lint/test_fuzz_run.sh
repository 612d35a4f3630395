#!/bin/bash
# Self-test of tests/fuzz/run.sh with fake fuzz targets: a failed target must
# fail the run and print its finding, its stack and its reproducer (base64) as
# "finding:" lines, the lines make check's summary of a failed stage keeps
# (CI shows only that summary). Prints "N passed, N failed".
set -u
cd "$(dirname "$0")/../.."
dir=$(mktemp -d /tmp/test_fuzz_run.XXXXXX)
trap 'rm -rf "$dir"' EXIT
pass=0 fail=0
mkdir -p "$dir/bin"

check() {
	if eval "$2"; then
		echo "ok - $1"
		pass=$((pass + 1))
	else
		echo "not ok - $1"
		fail=$((fail + 1))
	fi
}

# fake NAME EXIT ARTIFACT_BYTES: a stand-in for a libFuzzer binary. With a
# non-zero EXIT it writes an artifact where -artifact_prefix says and prints
# what a harness abort prints (its own line, libFuzzer's, a stack).
fake() {
	cat >"$dir/bin/fuzz_$1" <<EOF
#!/bin/bash
for a; do case \$a in -artifact_prefix=*) prefix=\${a#-artifact_prefix=} ;; esac; done
echo "#2 INITED cov: 10 ft: 12 corp: 1/1b exec/s: 0 rss: 30Mb"
if [ $2 -eq 0 ]; then echo "stat::number_of_executed_units: 5"; exit 0; fi
head -c $3 /dev/urandom >"\${prefix}crash-abc"
echo "fuzz_http: a stream stayed open after its client went away"
echo "==42== ERROR: libFuzzer: deadly signal"
echo "    #0 0x4a1b2c in __sanitizer_print_stack_trace"
echo "    #1 0x4a1b2d in check_streams tests/fuzz/fuzz_http.c:123"
echo "artifact_prefix='\$prefix'; Test unit written to \${prefix}crash-abc"
exit $2
EOF
	chmod +x "$dir/bin/fuzz_$1"
}

fake fine 0 0
fake small 77 300
fake big 77 20000
run() {
	FUZZ_BIN_DIR="$dir/bin" FUZZ_OUT_DIR="$dir/out" tests/fuzz/run.sh 1 "$@" 2>&1
}

out=$(run fine small)
rc=$?
check "a failed target fails the run" '[ $rc -ne 0 ]'
check "the last line counts both" 'tail -1 <<<"$out" | grep -qx "fuzz: 1 passed, 1 failed"'
check "the passing target is ok" 'grep -q "^    ok   fuzz_fine" <<<"$out"'
check "the failed one names its exit" 'grep -q "^    FAIL fuzz_small (exit 77)" <<<"$out"'
check "the harness's own line is a finding" \
	'grep -q "^      finding: fuzz_http: a stream stayed open" <<<"$out"'
check "libFuzzer's line is a finding" \
	'grep -q "^      finding: ==42== ERROR: libFuzzer: deadly signal" <<<"$out"'
check "the stack is a finding" \
	'grep -q "^      finding: #1 0x4a1b2d in check_streams tests/fuzz/fuzz_http.c:123" <<<"$out"'
b64=$(grep -oE 'finding: reproducer [^ ]+, base64: [A-Za-z0-9+/=]+' <<<"$out" | sed 's/.*base64: //')
check "the reproducer is printed whole, as base64" \
	'[ -n "$b64" ] && cmp -s <(base64 -d <<<"$b64") "$dir/out/artifacts/small-crash-abc"'
# check.sh keeps a failed stage's lines that match its summary pattern: run that
# very pattern (taken from check.sh) over this output; every finding line must pass.
pat=$(grep -A1 'last lines of' tests/check.sh | grep -oE "grep -E '[^']*'" | head -1 |
	sed -E "s/^grep -E '(.*)'$/\1/")
kept=$(grep -E "$pat" <<<"$out")
check "make check's stage summary keeps every finding line" \
	'[ -n "$pat" ] && [ "$(grep -c "finding:" <<<"$out")" -gt 0 ] && [ "$(grep -c "finding:" <<<"$kept")" -eq "$(grep -c "finding:" <<<"$out")" ]'

out=$(run big)
rc=$?
check "a reproducer over 16 KiB is named, not printed" \
	'[ $rc -ne 0 ] && grep -q "finding: .*Test unit written to" <<<"$out" && ! grep -q "base64:" <<<"$out"'

out=$(run fine)
rc=$?
check "only passing targets pass" '[ $rc -eq 0 ] && tail -1 <<<"$out" | grep -qx "fuzz: 1 passed, 0 failed"'

# FUZZ_JOBS=2: two targets run at once. Each fake waits (up to 20 s) for the
# other's mark: run one after the other, the first would wait in vain.
meet() {
	cat >"$dir/bin/fuzz_$1" <<EOF
#!/bin/bash
touch "$dir/mark-$1"
for i in \$(seq 200); do [ -e "$dir/mark-$2" ] && exit 0; sleep 0.1; done
echo "fuzz_$1: never met $2"; exit 1
EOF
	chmod +x "$dir/bin/fuzz_$1"
}
meet left right
meet right left
out=$(FUZZ_JOBS=2 run left right)
rc=$?
check "FUZZ_JOBS=2 runs two targets at once" '[ $rc -eq 0 ] && tail -1 <<<"$out" | grep -qx "fuzz: 2 passed, 0 failed"'
check "reports come in the order the targets were named" \
	'grep -E "^    (ok|FAIL)" <<<"$out" | head -1 | grep -q fuzz_left'

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
