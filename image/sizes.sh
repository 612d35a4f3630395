#!/bin/sh
# sizes.sh - the image tags' sizes in image/README.md, measured, never typed.
#
# Reads the size of every built forceai/runtime-runner tag (and of the Debian
# bases of :python and :code) from the engine and rewrites the table between
# the "sizes: start" and "sizes: end" markers of image/README.md. A tag that is
# not built here keeps its row as it was (said on stderr).
#
# Usage: image/sizes.sh            rewrite the table (`make image-sizes`)
#        image/sizes.sh --check    exit 1 when a built image's size differs from
#                                  its row by more than 5% (tests/container)
# Env:   ENGINE=podman|docker  IMAGE=forceai/runtime-runner  README=image/README.md
#        RUNNER=build/static/forceai-runner
set -eu

here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/.." && pwd)
ENGINE=${ENGINE:-podman}
IMAGE=${IMAGE:-forceai/runtime-runner}
README=${README:-$here/README.md}
RUNNER=${RUNNER:-$top/build/static/forceai-runner}
mode=${1:-rewrite}

size_of() { "$ENGINE" image inspect --format '{{.Size}}' "$1" 2>/dev/null || true; }

# tag|base image|purpose|contents: the one list of tiers (mk/image.mk builds them)
tiers='latest||the minimal image: command tasks that need a shell and coreutils only (busybox)|`FROM scratch`: the static runner, busybox, the CA bundle, the seccomp policy
python|localhost/forceai-base-python:bookworm|the default: `make image` tags it `:local`, the gateway'"'"'s default `FORCEAI_RUNTIME_RUNNER_IMAGE`; command tasks and `python3` scripts. Every `ephemeral-task` box starts from it, so it stays lean|Debian 12 minbase + `python3`, `bash-static` (`image/base-python.sh`, `TIER=python`) + the runner'"'"'s layer
code|localhost/forceai-base-code:bookworm|code contexts (`/code`, E2B'"'"'s code interpreter; `/code/languages` offers python only where IPython is): `make image-code`, or `IMAGE_LOCAL_FROM=code` to make it `:local`|Debian 12 minbase + `python3`, `bash-static`, `python3-ipython`, `-numpy`, `-pandas`, `-matplotlib` (`TIER=code`) + the runner'"'"'s layer
opensandbox-execd||the OpenSandbox drop-in: the runner as execd in any sandbox image ([opensandbox/README.md](opensandbox/README.md))|`FROM scratch`: the runner as `/execd`, `bootstrap.sh`, busybox'

grep -q '<!-- sizes: start -->' "$README" && grep -q '<!-- sizes: end -->' "$README" ||
	{ echo "sizes: no '<!-- sizes: start -->' ... '<!-- sizes: end -->' block in $README" >&2; exit 1; }
old=$(awk '/<!-- sizes: start -->/ { on = 1; next } /<!-- sizes: end -->/ { on = 0 } on' "$README")

new=$(printf '%s\n' "$tiers" | {
	printf '| tag | for | what is in it | size (uncompressed) |\n|---|---|---|---|\n'
	while IFS='|' read -r tag base purpose contents; do
		n=$(size_of "$IMAGE:$tag")
		if [ -z "$n" ]; then
			echo "sizes: $IMAGE:$tag is not built here: its row is kept" >&2
			printf '%s\n' "$old" | grep -F "| \`:$tag\` |" || printf '| `:%s` | %s | %s | not measured |\n' "$tag" "$purpose" "$contents"
			continue
		fi
		b=$([ -n "$base" ] && size_of "$base" || true)
		awk -v tag="$tag" -v p="$purpose" -v c="$contents" -v n="$n" -v b="${b:-0}" '
			function f(x) { return x >= 1e9 ? sprintf("%.2f GB", x / 1e9) : x >= 1e8 ? sprintf("%d MB", x / 1e6 + 0.5) : x >= 1e7 ? sprintf("%.1f MB", x / 1e6) : sprintf("%.2f MB", x / 1e6) }
			BEGIN { s = f(n); if (b > 0) s = s sprintf(" (base %s + %s)", f(b), f(n - b))
				printf "| `:%s` | %s | %s | %s |\n", tag, p, c, s }'
	done
	if [ -s "$RUNNER" ]; then
		printf '\nThe runner itself (`build/static/forceai-runner`): %s bytes.\n' "$(stat -c %s "$RUNNER")"
	else
		printf '%s\n' "$old" | grep '^The runner itself' | sed 's/^/\n/' || true
	fi
})

if [ "$mode" = --check ]; then
	# Row by row: each measured size (the first figure of the last cell) against the README's.
	printf '%s\n' "$new" | grep '^| `:' | while IFS= read -r row; do
		tag=$(printf '%s' "$row" | sed 's/^| `:\([^`]*\)`.*/\1/')
		[ -n "$(size_of "$IMAGE:$tag")" ] || continue
		want=$(printf '%s' "$row" | awk -F' [|] ' '{ print $NF }' | awk '{ print $1 * ($2 == "GB" ? 1e9 : 1e6) }')
		have=$(printf '%s\n' "$old" | grep -F "| \`:$tag\` |" | awk -F' [|] ' '{ print $NF }' |
			awk '{ print $1 * ($2 == "GB" ? 1e9 : 1e6) }')
		awk -v w="$want" -v h="${have:-0}" -v t="$tag" 'BEGIN {
			if (h <= 0 || (w - h) / w > 0.05 || (h - w) / w > 0.05) {
				printf "sizes: image/README.md says %s for :%s, the built image is %s (make image-sizes)\n", h, t, w > "/dev/stderr"; exit 1 } }' || exit 1
	done
	exit $?
fi

tmp="$README.tmp.$$"
printf '%s\n' "$new" >"$tmp.block"
awk -v blk="$tmp.block" '
	/<!-- sizes: start -->/ { print; while ((getline l < blk) > 0) print l; skip = 1; next }
	/<!-- sizes: end -->/ { skip = 0 }
	!skip' "$README" >"$tmp"
rm -f "$tmp.block"
mv "$tmp" "$README"
printf '%s\n' "$new" | grep '^| `:' | awk -F' [|] ' '{ print "sizes: " $1 " " $NF }' | sed 's/^sizes: | /sizes: /; s/ |$//'
