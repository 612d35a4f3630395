#!/bin/bash
# `make check`: every suite in turn; prints each suite's summary and a total.
# CHECK_FAST=1 skips the slow stages (sanitizer/valgrind reruns, containers).
set -u
cd "$(dirname "$0")/.."
export PYTHONDONTWRITEBYTECODE=1
total_pass=0 total_fail=0 failed_stages=() failed_tests=() stage_times=()
log_dir=build/check-logs
mkdir -p "$log_dir"

stage() {
	local name=$1
	shift
	echo "=== $name: $*"
	local t0=$SECONDS
	"$@" >"$log_dir/$name.log" 2>&1
	local rc=$?
	local line
	line=$(grep -E '^([a-z]+: )?[0-9]+ passed, [0-9]+ failed' "$log_dir/$name.log" | tail -1)
	local p f
	p=$(sed -E 's/^([a-z]+: )?([0-9]+) passed.*/\2/' <<<"$line")
	f=$(sed -E 's/.* ([0-9]+) failed.*/\1/' <<<"$line")
	[ -z "$line" ] && p=0 f=1
	[ $rc -ne 0 ] && [ "${f:-0}" -eq 0 ] && f=1
	total_pass=$((total_pass + p))
	total_fail=$((total_fail + f))
	echo "    $name: ${line:-no summary (exit $rc)} [$((SECONDS - t0))s]"
	stage_times+=("$name $((SECONDS - t0))")
	if [ $rc -ne 0 ]; then
		failed_stages+=("$name")
		# Named again in the summary: CI shows a run's tail, not its middle.
		local t
		while IFS= read -r t; do
			failed_tests+=("$name: $t")
		done < <(grep -E '^(FAIL|ERROR): |^FAIL - |^ +FAIL fuzz_|: [0-9]+ passed, [1-9][0-9]* failed' "$log_dir/$name.log" | head -20)
		echo "    --- last lines of $log_dir/$name.log:"
		grep -E 'FAIL|ERROR|Error|error|Traceback|assert|finding:' "$log_dir/$name.log" | tail -60 | sed 's/^/    /'
		tail -15 "$log_dir/$name.log" | sed 's/^/    /'
	fi
}

stage unit tests/unit/run.sh
# Module cycles, pure-library boundary, clang-format (mk/lint.mk).
stage lint make --no-print-directory lint
stage pid1 python3 tests/run.py pid1
# The integration suite runs twice, not three times: under ASan+UBSan here
# (every test, with the sanitizers' checks) and under valgrind below. The
# plain dev build is the one every other suite drives (tests/README.md:
# "Where the time goes"). Both runs take whole test modules two at a time
# (TEST_SHARDS): their time is the sanitized runner's own CPU, one core each;
# the responsiveness bounds scale with the build (slow() in the harness).
stage integration env RUNNER_BIN=build/asan/forceai-runner TEST_SHARDS=2 python3 tests/run.py integration
# The integration tests that bound the runner's memory (RSS means nothing
# under ASan or valgrind) once more against the plain build.
stage integration-memory env TEST_MEMORY_ONLY=1 python3 tests/run.py integration
stage security python3 tests/run.py security
# Real tools as tasks under the default policy (issue 46): ASan, strace, git, a venv, SQLite,
# npm, a ::1 server through /proxy, 1,500 threads, ping; Chromium where the machine has one.
stage workloads python3 tests/run.py workloads
stage sdk python3 tests/sdk/run_sdk.py
# /mcp with the official MCP TypeScript SDK client and the MCP conformance suite (Node.js 22
# from npm, cached outside the clone: tests/mcp/setup.sh).
stage mcp python3 tests/mcp/run_mcp.py
# Code contexts with E2B's own @e2b/code-interpreter client in debug mode (localhost:49999;
# pinned, cached outside the clone: tests/code/setup.sh).
stage code python3 tests/code/run_code.py
# E2B's envd face with E2B's own SDK (npm e2b, pinned, cached outside the clone:
# tests/e2b/setup.sh) in debug mode (localhost:49983, or E2B_SANDBOX_URL when it is taken).
stage e2b python3 tests/e2b/run_e2b.py
stage gateway python3 tests/run.py gateway
# Agent engines with the real Codex and Claude Code CLIs (npm, cached in /var/cache/forceai-npm).
stage engines python3 tests/run.py engines
if [ -z "${CHECK_FAST:-}" ]; then
	# valgrind cannot emulate Landlock, and refuses the rlimit changes of
	# the confinement sequence; the runner's own memory use is what it
	# checks here, so tasks run unconfined in this one stage.
	stage integration-valgrind env RUNNER_WRAP="valgrind -q --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite" \
		RUNNER_EXTRA_ARGS=--insecure-no-confine TEST_SHARDS=2 python3 tests/run.py integration
	stage container sh -c 'scripts/podman-setup.sh && make --no-print-directory static static-verify && tests/container/run.sh'
	# The coding-agent image (Debian + Node.js + Codex from npm) runs a codex agent task.
	stage coding-agent-image sh -c 'scripts/podman-setup.sh && make --no-print-directory static && python3 tests/container/test_coding_agent.py'
	# The benchmarks at a small size: their code must not rot, and every
	# stream they check must be byte-exact (bench.py exits 1 otherwise).
	stage bench-smoke sh -c 'make --no-print-directory bench BENCH_QUICK=1 && echo "bench: 1 passed, 0 failed"'
	# Fault and load suite at CI size (`make soak`: full size).
	stage fault python3 tests/run.py fault
	# Every fuzz target for 12 s, one a core at once; a crash, leak,
	# timeout or OOM fails.
	stage fuzz-smoke make --no-print-directory fuzz-smoke
fi

echo
# Stage times, for the budget in tests/README.md (40 minutes in all).
echo "stage times (s): ${stage_times[*]} (in all: $((SECONDS / 60)) min $((SECONDS % 60)) s)"
if [ ${#failed_stages[@]} -gt 0 ]; then
	echo "failed stages: ${failed_stages[*]} (logs in $log_dir/)"
	[ ${#failed_tests[@]} -gt 0 ] && printf '    failed: %s\n' "${failed_tests[@]}"
fi
echo "total: $total_pass passed, $total_fail failed"
[ $total_fail -eq 0 ] && [ ${#failed_stages[@]} -eq 0 ]
