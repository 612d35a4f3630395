#!/bin/bash
# Self-test of scripts/modgraph.py on tiny fixture objects: it must fail on a
# cycle and name it, fail when a pure module uses a non-pure one, and pass an
# acyclic graph. Prints "N passed, N failed".
set -u
cd "$(dirname "$0")/../.."
tool=scripts/modgraph.py
cc=${CC:-cc}
dir=$(mktemp -d /tmp/test_modgraph.XXXXXX)
trap 'rm -rf "$dir"' EXIT
pass=0 fail=0

# obj NAME 'C source': compiles $dir/NAME.o
obj() {
	mkdir -p "$(dirname "$dir/$1")"
	printf '%s\n' "$2" >"$dir/$1.c"
	"$cc" -c -o "$dir/$1.o" "$dir/$1.c" || exit 2
}

# expect NAME WANT_RC PATTERN ARGS...: runs the tool, checks exit code and output
expect() {
	local name=$1 want=$2 pattern=$3 out rc
	shift 3
	out=$(python3 "$tool" --root "$dir" "$@" 2>&1)
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

# a <-> b: a cycle of two; c uses a (outside the cycle).
obj cyc/a 'int b_fn(void); int a_fn(void) { return b_fn(); }'
obj cyc/b 'int a_fn(void); int b_fn(void) { return a_fn() + 1; }'
obj cyc/c 'int a_fn(void); int c_fn(void) { return a_fn(); }'
expect "a two-module cycle fails and is named" 1 \
	'CYCLE among 2 modules: cyc/a cyc/b' "$dir"/cyc/*.o
expect "the cycle's edges name their symbols" 1 \
	'cyc/a -> cyc/b: b_fn' "$dir"/cyc/*.o

# x -> y -> z -> x through a data symbol: a longer cycle.
obj ring/x 'extern int y_data; int x_fn(void) { return y_data; }'
obj ring/y 'int z_fn(void); int y_data = 1; int y_fn(void) { return z_fn(); }'
obj ring/z 'int x_fn(void); int z_fn(void) { return x_fn(); }'
expect "a three-module cycle through data is found" 1 \
	'cycle ring/x -> ring/y -> ring/z -> ring/x' "$dir"/ring/*.o

# p <- q <- r, and s alone: acyclic, three levels.
obj ok/p 'int p_fn(void) { return 1; }'
obj ok/q 'int p_fn(void); int q_fn(void) { return p_fn(); }'
obj ok/r 'int q_fn(void); int p_fn(void); int r_fn(void) { return q_fn() + p_fn(); }'
obj ok/s 'int s_fn(void) { return 2; }'
expect "an acyclic graph passes" 0 \
	'^modgraph: 4 modules, 3 edges, 3 levels, 0 cycles' "$dir"/ok/*.o
expect "levels are printed" 0 'L2 ok/r +-> ok/p ok/q' "$dir"/ok/*.o
expect "pure modules that use only pure ones pass" 0 \
	'2 pure' --pure ok/p,ok/q "$dir"/ok/*.o
expect "a pure module using a non-pure one fails" 1 \
	'pure module ok/q uses ok/p, which is not pure: p_fn' --pure ok/q "$dir"/ok/*.o
expect "an unknown --pure name is an error" 2 \
	'names no object: ok/nope' --pure ok/nope "$dir"/ok/*.o

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
