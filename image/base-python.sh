#!/bin/sh
# base-python.sh - create a local Debian 12 minbase base image without any
# registry: debootstrap into a folder, tar it (cached: debootstrap takes a
# minute or more), podman import. Two tiers (image/README.md "Tags"):
#   TIER=python  localhost/forceai-base-python:bookworm  python3 only: the lean
#                base of :python (= :local), what command tasks need
#   TIER=code    localhost/forceai-base-code:bookworm    python3 + IPython, numpy,
#                pandas, matplotlib: the base of :code, for code contexts (/code)
#
# Usage: image/base-python.sh [IMAGE]     (run as root)
# Env:   TIER=python|code  INCLUDE=pkg,pkg (overrides the tier's package list)
#        ENGINE=podman|docker   CACHE_DIR=build/image-base   SUITE=bookworm
#        MIRROR=http://deb.debian.org/debian (default: this host's apt source)
#        REBUILD=1 (ignore the cached tarball)
set -eu

here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/.." && pwd)
TIER=${TIER:-python}
case $TIER in
# python3 alone: every ephemeral box starts from this one, so it stays small; bash-static is
# the shell commands run in (runner/task/start.c: no dynamic loading, 0.3 ms a task)
python) tier_include=python3,bash-static ;;
# the code contexts' interpreter (IPython) and the libraries agents reach for
# first (runner/code/driver.py; docs/design/code.md): most of the :code image's size
code) tier_include=python3,bash-static,python3-ipython,python3-numpy,python3-pandas,python3-matplotlib ;;
*) printf 'base-python: TIER must be python or code, not %s\n' "$TIER" >&2; exit 2 ;;
esac
IMAGE=${1:-localhost/forceai-base-$TIER:bookworm}
ENGINE=${ENGINE:-podman}
CACHE_DIR=${CACHE_DIR:-$top/build/image-base}
SUITE=${SUITE:-bookworm}
INCLUDE=${INCLUDE:-$tier_include}
log() { printf 'base-python: %s\n' "$*" >&2; }

if [ -z "${MIRROR:-}" ]; then
	# first URIs of a deb822 source carrying the suite, else a sources.list line
	MIRROR=$(awk -v s="$SUITE" '
		/^URIs:/ { u = $2 } /^Suites:/ { for (i = 2; i <= NF; i++) if ($i == s && u != "") { print u; exit } }
		/^$/ { u = "" }' /etc/apt/sources.list.d/*.sources 2>/dev/null | head -n1)
	[ -n "$MIRROR" ] || MIRROR=$(awk -v s="$SUITE" '$1 == "deb" && $3 == s { print $2; exit }' \
		/etc/apt/sources.list 2>/dev/null || true)
	MIRROR=${MIRROR:-http://deb.debian.org/debian}
fi

# The package list is part of the cache's name: a new one builds a new tarball.
inc=$(printf '%s' "$INCLUDE" | sha256sum | cut -c1-8)
tarball="$CACHE_DIR/python-$SUITE-$inc.tar"
root="$CACHE_DIR/python-$SUITE-$inc.root"
mkdir -p "$CACHE_DIR"

if [ "${REBUILD:-0}" = 1 ]; then
	rm -f "$tarball"
	rm -rf "$root"
fi

if [ ! -s "$tarball" ]; then
	if [ ! -x "$root/usr/bin/python3" ] || [ ! -e "$root/.debootstrap-done" ]; then
		command -v debootstrap >/dev/null 2>&1 || { log "debootstrap missing (apt-get install debootstrap)"; exit 1; }
		rm -rf "$root"
		log "debootstrap --variant=minbase --include=$INCLUDE $SUITE from $MIRROR (takes a minute or more)"
		debootstrap --variant=minbase --include="$INCLUDE" "$SUITE" "$root" "$MIRROR" >"$CACHE_DIR/debootstrap.log" 2>&1 \
			|| { tail -n 20 "$CACHE_DIR/debootstrap.log" >&2; exit 1; }
		: >"$root/.debootstrap-done"
	fi
	# no package caches or lists in the image
	rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/* "$root"/var/log/*.log
	log "packing $tarball"
	tar --numeric-owner --xattrs -C "$root" --exclude=./.debootstrap-done -cf "$tarball.tmp" .
	mv "$tarball.tmp" "$tarball"
fi

# An image imported from another package list (an older checkout's) is not this one: the
# label names the list it was made from.
if [ "$ENGINE" = podman ] && podman image exists "$IMAGE" && [ "${REBUILD:-0}" != 1 ] &&
	[ "$(podman image inspect --format '{{index .Config.Labels "forceai.include"}}' "$IMAGE" 2>/dev/null)" = "$inc" ]; then
	log "$IMAGE already present"
	exit 0
fi
log "importing $tarball as $IMAGE"
"$ENGINE" import \
	--change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
	--change 'ENV LANG=C.UTF-8' \
	--change 'CMD ["/usr/bin/python3"]' \
	--change "LABEL forceai.include=$inc" \
	"$tarball" "$IMAGE" >/dev/null
log "imported $IMAGE"
