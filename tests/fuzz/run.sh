#!/bin/bash
# Run libFuzzer targets: tests/fuzz/run.sh SECONDS TARGET...
# FUZZ_JOBS of them at once (default: the number of cores).
# Each target runs for SECONDS from its committed seeds (tests/fuzz/corpus/T)
# plus what earlier runs found (build/fuzz/corpus/T, where new inputs go).
# A crash, leak, timeout (FUZZ_TIMEOUT s for one input) or RSS over
# FUZZ_RSS_MB fails the target; the reproducer is in build/fuzz/artifacts/.
# Last line: "fuzz: N passed, N failed".
# FUZZ_BIN_DIR (build/fuzz) holds the fuzz_T binaries, FUZZ_OUT_DIR (build/fuzz)
# gets corpus/, artifacts/ and logs/ (tests/lint/test_fuzz_run.sh uses both).
set -u
cd "$(dirname "$0")/../.."
secs=$1
shift
timeout_s=${FUZZ_TIMEOUT:-10}
rss=${FUZZ_RSS_MB:-2048}
bindir=${FUZZ_BIN_DIR:-build/fuzz}
out=${FUZZ_OUT_DIR:-build/fuzz}
pass=0 fail=0
mkdir -p "$out/artifacts" "$out/logs"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:symbolize=1:quarantine_size_mb=64}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
# One target: its report goes to $out/logs/T.report, its verdict to T.rc.
run_one() {
	local t=$1 bin=$bindir/fuzz_$1 seeds=tests/fuzz/corpus/$1 work=$out/corpus/$1
	local log=$out/logs/$1.log rep=$out/logs/$1.report
	mkdir -p "$work"
	local args=(-max_total_time="$secs" -timeout="$timeout_s" -rss_limit_mb="$rss"
		-malloc_limit_mb="$rss" -detect_leaks=1 -print_final_stats=1
		-artifact_prefix="$out/artifacts/$t-")
	[ -f tests/fuzz/$t.dict ] && args+=(-dict=tests/fuzz/$t.dict)
	local extra
	[ -f tests/fuzz/$t.options ] && read -r -a extra <tests/fuzz/$t.options && args+=("${extra[@]}")
	local t0=$SECONDS
	{
		echo "--- fuzz_$t: ${secs}s (seeds: $(ls "$seeds" 2>/dev/null | wc -l), log: $log)"
		# shellcheck disable=SC2086
		"$bin" "${args[@]}" ${FUZZ_ARGS:-} "$work" "$seeds" >"$log" 2>&1
		local rc=$?
		local stats cov
		stats=$(grep -E '^stat::(number_of_executed_units|average_exec_per_sec|peak_rss_mb|new_units_added)' "$log" |
			sed 's/^stat:://' | tr -s ' ' | tr '\n' ' ')
		cov=$(grep -oE 'cov: [0-9]+ ft: [0-9]+' "$log" | tail -1)
		if [ $rc -eq 0 ]; then
			echo "    ok   fuzz_$t [$((SECONDS - t0))s] $cov $stats"
		else
			echo "    FAIL fuzz_$t (exit $rc) [$((SECONDS - t0))s] $cov"
			# The finding, then the first stack (a deadly signal's says where it came from),
			# then the reproducer itself: CI keeps only this output, not build/fuzz/. Each line
			# says "finding:" so that make check's summary of a failed stage keeps it.
			{
				grep -E 'ERROR|SUMMARY|==[0-9]+==|Test unit written|fuzz(_[a-z_]+)?: |runtime error' "$log" | head -20
				grep -E '^ +#[0-9]+ 0x' "$log" | head -24
				for a in $(grep -oE 'Test unit written to [^ ]+' "$log" | sed 's/^Test unit written to //'); do
					[ -f "$a" ] && [ "$(stat -c %s "$a")" -le 16384 ] &&
						echo "reproducer $a, base64: $(base64 -w0 "$a")"
				done
			} | sed 's/^ */      finding: /'
		fi
		echo $rc >"$out/logs/$t.rc"
	} >"$rep"
}

# FUZZ_JOBS targets at once (default: one a core): each target is one
# single-threaded process, so two cores halve the stage's wall time.
jobs=${FUZZ_JOBS:-$(nproc 2>/dev/null || echo 1)}
for t in "$@"; do
	rm -f "$out/logs/$t.rc"
	while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do
		wait -n
	done
	run_one "$t" &
done
wait
# Reports in the order the targets were named, whatever order they ended in.
for t in "$@"; do
	cat "$out/logs/$t.report"
	if [ "$(cat "$out/logs/$t.rc" 2>/dev/null)" = 0 ]; then
		pass=$((pass + 1))
	else
		fail=$((fail + 1))
	fi
done
echo "fuzz: $pass passed, $fail failed"
[ $fail -eq 0 ]
