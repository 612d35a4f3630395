#!/usr/bin/env bash
# Build libmicrohttpd's WebSocket library (microhttpd_ws) for the dev build, from Debian's
# libmicrohttpd source package: the same source, at the same Debian version as the installed
# libmicrohttpd-dev, that scripts/build-static-deps.sh builds for the static build.
#
#   scripts/build-mhd-ws.sh [OUT]     (default OUT: <repo>/build/deps/mhd-ws)
#
# Debian ships libmicrohttpd without its experimental parts, so the library is built here:
# `apt-get source` (a deb-src entry is added when missing, as root), dpkg-source applies Debian's
# patch series, configure --enable-experimental, then only src/microhttpd_ws. Installs
# OUT/include/microhttpd_ws.h and OUT/lib/libmicrohttpd_ws.a, and keeps the configured tree in
# OUT/tree (the fuzz build compiles the same two files with its own instrumentation).
# Cached: a stamp records the version; nothing is done when it matches.
# Environment: CC (default cc).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=${1:-$ROOT/build/deps/mhd-ws}
CC=${CC:-cc}
say() { printf 'mhd-ws: %s\n' "$*"; }
die() { printf 'mhd-ws: error: %s\n' "$*" >&2; exit 1; }

ver=$(dpkg-query -W -f='${Version}' libmicrohttpd-dev 2>/dev/null || true)
[ -n "$ver" ] || die "libmicrohttpd-dev is not installed (scripts/install-deps.sh build)"
stamp=$OUT/.stamp
if [ -f "$OUT/lib/libmicrohttpd_ws.a" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$ver $CC" ]; then
    exit 0
fi
command -v dpkg-source >/dev/null || die "dpkg-source missing: apt-get install dpkg-dev"

have_deb_src() {
    grep -rqsE '^[[:space:]]*(Types:.*[[:space:]]deb-src([[:space:]]|$)|deb-src[[:space:]])' \
        /etc/apt/sources.list /etc/apt/sources.list.d/ 2>/dev/null
}
if ! have_deb_src; then
    [ "$(id -u)" -eq 0 ] || die "no deb-src entry in the apt sources and not root: as root run
    sed 's/^Types:.*/Types: deb-src/' /etc/apt/sources.list.d/debian.sources \\
        > /etc/apt/sources.list.d/forceai-deb-src.sources && apt-get update"
    f=/etc/apt/sources.list.d/forceai-deb-src.sources
    if [ -f /etc/apt/sources.list.d/debian.sources ]; then
        sed -E 's/^Types:.*/Types: deb-src/' /etc/apt/sources.list.d/debian.sources >"$f"
    else
        f=/etc/apt/sources.list.d/forceai-deb-src.list
        sed -nE 's/^[[:space:]]*deb[[:space:]]/deb-src /p' /etc/apt/sources.list >"$f"
    fi
    say "added deb-src entry $f; apt-get update"
    apt-get update -qq >/dev/null
fi

rm -rf "$OUT"
mkdir -p "$OUT/src" "$OUT/include" "$OUT/lib"
log=$OUT/build.log
say "building microhttpd_ws from Debian's libmicrohttpd $ver source (log: $log)"
(
    cd "$OUT/src"
    apt-get source --download-only -qq "libmicrohttpd=$ver" \
        || { [ "$(id -u)" -eq 0 ] && apt-get update -qq && \
             apt-get source --download-only -qq "libmicrohttpd=$ver"; }
    dpkg-source -x "libmicrohttpd_${ver#*:}.dsc" ../tree
) >"$log" 2>&1 || { tail -n 20 "$log" >&2; die "cannot fetch the libmicrohttpd $ver source"; }
(
    cd "$OUT/tree"
    ./configure CC="$CC" --enable-experimental --disable-https --without-gnutls --disable-curl \
        --disable-doc --disable-examples --disable-nls --enable-static --disable-shared
    make -C src/microhttpd_ws -j "${JOBS:-2}"
) >>"$log" 2>&1 || { tail -n 30 "$log" >&2; die "building microhttpd_ws failed"; }
cp "$OUT/tree/src/microhttpd_ws/.libs/libmicrohttpd_ws.a" "$OUT/lib/"
cp "$OUT/tree/src/include/microhttpd_ws.h" "$OUT/include/"
printf '%s %s\n' "$ver" "$CC" >"$stamp"
say "installed $OUT/lib/libmicrohttpd_ws.a"
