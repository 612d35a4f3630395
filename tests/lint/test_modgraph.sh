#!/bin/bash
# Self-test of scripts/modgraph.py on tiny fixture objects: it must fail on a
# cycle and name it, fail when a pure module uses a non-pure one, pass an
# acyclic graph, and fail when the folder order (--order) is broken by a
# symbol or by an #include (a header's own included) naming file and line.
# Prints "N passed, N failed".
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
	"$cc" -g -c -o "$dir/$1.o" "$dir/$1.c" || exit 2
}

# src PATH 'text': writes a source file of a fixture tree
src() {
	mkdir -p "$(dirname "$dir/$1")"
	printf '%s\n' "$2" >"$dir/$1"
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

# The folder order: lo < mid < hi, with side by side at mid. lay/ is layered
# as declared; bad/ plants one arrow up by symbol (lo uses hi).
order='lo < mid side < hi'
obj lay/lo/a 'int lo_fn(void) { return 1; }'
obj lay/mid/b 'int lo_fn(void); int mid_fn(void) { return lo_fn(); }'
obj lay/hi/c 'int mid_fn(void); int hi_fn(void) { return mid_fn(); }'
obj lay/main 'int hi_fn(void); int main(void) { return hi_fn(); }'
expect "a graph that keeps the folder order passes" 0 \
	'3 layers, 0 against their order' --root "$dir/lay" --order "$order" "$dir"/lay/*.o \
	"$dir"/lay/*/*.o
obj bad/lo/a 'int hi_fn(void);
int lo_fn(void) { return 1; }
int lo_up(void) { return hi_fn(); }'
obj bad/hi/c 'int lo_fn(void); int hi_fn(void) { return lo_fn(); }'
expect "a symbol of a higher folder fails, naming the file and line" 1 \
	'LAYER .*bad/lo/a\.c:3: lo/a uses hi/c \(hi_fn\): hi/ is above lo/' \
	--root "$dir/bad" --order "$order" "$dir"/bad/*/*.o
obj side/mid/b 'int side_fn(void); int mid_fn(void) { return side_fn(); }'
obj side/side/d 'int side_fn(void) { return 3; }'
expect "folders of one step may not use each other" 1 \
	'mid/b uses side/d \(side_fn\): side/ and mid/ sit side by side' \
	--root "$dir/side" --order "$order" "$dir"/side/*/*.o
obj new/lo/a 'int lo_fn(void) { return 1; }'
obj new/extra/e 'int lo_fn(void); int e_fn(void) { return lo_fn(); }'
expect "a folder outside the order is named" 1 \
	'folder extra/ is not in the declared order' --root "$dir/new" --order "$order" \
	"$dir"/new/*/*.o
expect "a new file of a declared folder needs nothing" 0 \
	'0 against their order' --root "$dir/new" --order "$order" "$dir"/new/lo/*.o

# By #include, with no symbol at all: a header of lo including one of hi
# (a header-only arrow up) fails; includes downwards and beside pass.
src tree/lo/a.h '#pragma once
#include "hi/c.h"'
src tree/lo/a.c '#include "lo/a.h"
#include "own.h"'
src tree/lo/own.h '#pragma once'
src tree/hi/c.h '#pragma once
#include "lo/own.h"'
src tree/hi/c.c '#include "hi/c.h"
#include "mid/b.h"'
src tree/mid/b.h '#pragma once'
src tree/main.c '#include "hi/c.h"'
expect "a header-only include of a higher folder fails at its line" 1 \
	'LAYER .*tree/lo/a\.h:2: #include "hi/c\.h": hi/ is above lo/' \
	--root "$dir/lay" --order "$order" --sources "$dir/tree" "$dir"/lay/*/*.o
out=$(python3 "$tool" --root "$dir/lay" --order "$order" --sources "$dir/tree" \
	"$dir"/lay/*/*.o 2>&1)
if [ "$(grep -c 'LAYER' <<<"$out")" -eq 1 ]; then
	echo "ok - includes downwards, beside and from the top level pass"
	pass=$((pass + 1))
else
	echo "not ok - includes downwards, beside and from the top level pass"
	sed 's/^/# /' <<<"$out"
	fail=$((fail + 1))
fi
expect "--sources without --order is an error" 2 'needs --order' --sources "$dir/tree" \
	"$dir"/lay/*/*.o
expect "a folder named twice in the order is an error" 2 'named twice' --order 'a < b a' \
	"$dir"/lay/*/*.o

# The tree's own order (LAYERS, mk/lint.mk) over a copy of runner/'s sources:
# it passes as it is, and fails on the arrow up core/runner.h once held
# (a header-only include of confine/).
layers=$(make -s --no-print-directory --eval 'print-layers: ; @echo "$(LAYERS)"' print-layers)
mkdir -p "$dir/real"
cp -r runner "$dir/real/"
expect "runner/'s includes keep LAYERS" 0 '0 against their order' --root "$dir/lay" \
	--order "$layers" --sources "$dir/real/runner" "$dir"/lay/lo/*.o
sed -i '0,/^#include "core\/config.h"/s//&\n#include "confine\/confine.h"/' \
	"$dir/real/runner/core/runner.h"
expect "a planted include of confine/ in core/runner.h fails" 1 \
	'LAYER .*real/runner/core/runner\.h:[0-9]+: #include "confine/confine\.h": confine/ is above core/' \
	--root "$dir/lay" --order "$layers" --sources "$dir/real/runner" "$dir"/lay/lo/*.o

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
