#!/bin/bash
# `make format-check`: the files clang-format (with the committed .clang-format)
# would change, and how many of their lines; fails when there is one.
# usage: scripts/format-check.sh FILE...   FORMAT_DIFF=1 also prints the diffs.
set -u
cd "$(dirname "$0")/.."
cf=${CLANG_FORMAT:-clang-format}
# The options of .clang-format are those of clang-format 14 (Debian 12); other
# versions format some constructs differently.
ver=$("$cf" --version 2>/dev/null | sed -nE 's/.*version ([0-9]+)\..*/\1/p')
if [ -z "$ver" ]; then
	echo "format-check: $cf not found (scripts/install-deps.sh lint)" >&2
	exit 2
fi
[ "$ver" = 14 ] || echo "format-check: warning: $cf is version $ver, .clang-format is tuned for 14" >&2
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
files=0 bad=0 lines=0
for f in "$@"; do
	files=$((files + 1))
	if ! "$cf" --style=file "$f" >"$tmp"; then
		echo "format-check: $cf failed on $f" >&2
		exit 2
	fi
	cmp -s "$f" "$tmp" && continue
	n=$(diff "$f" "$tmp" | grep -c '^<')
	bad=$((bad + 1))
	lines=$((lines + n))
	echo "format-check: $f: $n lines to change"
	if [ -n "${FORMAT_DIFF:-}" ]; then diff -u "$f" "$tmp" | sed "1,2s|$tmp|$f (formatted)|"; fi
done
if [ $bad -gt 0 ]; then
	echo "format-check: FAIL: $bad of $files files need formatting ($lines lines; \`make format\` rewrites them)"
	exit 1
fi
echo "format-check: $files files formatted"
