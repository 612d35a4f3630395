#!/usr/bin/env bash
# Build the static (musl) dependencies of forceai-runner from Debian's source packages.
#
#   scripts/build-static-deps.sh [--force] [--jobs N] [--serial]
#
# Libraries: libmicrohttpd, mbedtls, curl (http/https only, TLS via mbedTLS), jansson,
# libseccomp, libcap-ng; libmicrohttpd's WebSocket library (microhttpd_ws, --enable-experimental)
# comes from the same libmicrohttpd source. Each is fetched with `apt-get source` (a deb-src entry is added when
# missing), unpacked by dpkg-source so Debian's quilt patch series (its security fixes) is applied,
# checked for that, built with musl-gcc as a static archive, and installed into
# $STATIC_OUT/deps (include/, lib/).
#
# Cache: one stamp per library ($STATIC_OUT/deps/.stamps/<lib>) records the Debian version and a
# hash of the recipe. A library is rebuilt only when its recipe, the Debian version that
# `apt-get source` would pick (security update), or a library it builds against changed. When
# everything is cached the script does nothing but touch $STATIC_OUT/deps.stamp.
#
# Environment: STATIC_OUT (default <repo>/build/static), STATIC_JOBS (default 2),
# STATIC_DEPS_SERIAL=1 (build one library at a time), MUSL_GCC (default musl-gcc).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=${STATIC_OUT:-$ROOT/build/static}
JOBS=${STATIC_JOBS:-2}
SERIAL=${STATIC_DEPS_SERIAL:-0}
FORCE=0
while [ $# -gt 0 ]; do
    case $1 in
        --force) FORCE=1 ;;
        --serial) SERIAL=1 ;;
        --jobs) JOBS=$2; shift ;;
        --jobs=*) JOBS=${1#--jobs=} ;;
        -h|--help) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "build-static-deps: unknown argument: $1" >&2; exit 2 ;;
    esac
    shift
done

mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
PREFIX=$OUT/deps
SRC=$OUT/src
LOGS=$OUT/logs
STAMPS=$PREFIX/.stamps
KINC=$OUT/kernel-include
CC_MUSL=${MUSL_GCC:-musl-gcc}

# Order matters: a library is built after the ones it builds against.
ALL_LIBS=(mbedtls curl libmicrohttpd jansson libseccomp libcap-ng)
declare -A DEB_PKG=([mbedtls]=mbedtls [curl]=curl [libmicrohttpd]=libmicrohttpd
                    [jansson]=jansson [libseccomp]=libseccomp [libcap-ng]=libcap-ng)
declare -A DEPENDS=([curl]="mbedtls")
# Libraries the runner can be built without: when their source cannot be fetched the build goes
# on without them and records it in their stamp. None today: WebSocket framing is
# libmicrohttpd's own microhttpd_ws (wslay, whose Debian source answers 404 here, is not used).
OPTIONAL_LIBS=" "

T0=$(date +%s)
say() { printf 'static-deps: %s\n' "$*"; }
die() { printf 'static-deps: error: %s\n' "$*" >&2; exit 1; }

# --------------------------------------------------------------------------- build tools
need_tools() {
    local missing=() t pkg
    # command:debian-package
    for t in musl-gcc:musl-tools gperf:gperf cmake:cmake dpkg-source:dpkg-dev \
             autoreconf:autoconf automake:automake libtoolize:libtool make:make \
             patch:patch xz:xz-utils m4:m4 pkg-config:pkg-config; do
        command -v "${t%%:*}" >/dev/null 2>&1 || missing+=("${t#*:}")
    done
    [ -e /usr/include/linux/version.h ] || missing+=(linux-libc-dev)
    [ ${#missing[@]} -eq 0 ] && return 0
    if [ "$(id -u)" -ne 0 ]; then
        die "missing build tools (Debian packages: ${missing[*]}); install them as root:
    apt-get install -y ${missing[*]}"
    fi
    say "installing build tools: ${missing[*]}"
    mkdir -p "$LOGS"
    if ! { DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}" \
            || { apt-get update && DEBIAN_FRONTEND=noninteractive \
                 apt-get install -y --no-install-recommends "${missing[@]}"; }; } \
            >"$LOGS/apt-tools.log" 2>&1; then
        tail -n 20 "$LOGS/apt-tools.log" >&2
        die "apt-get install ${missing[*]} failed (log: $LOGS/apt-tools.log)"
    fi
}

# --------------------------------------------------------------------------- deb-src
have_deb_src() {
    grep -rqsE '^[[:space:]]*(Types:.*[[:space:]]deb-src([[:space:]]|$)|deb-src[[:space:]])' \
        /etc/apt/sources.list /etc/apt/sources.list.d/ 2>/dev/null
}

add_deb_src() {
    [ "$(id -u)" -eq 0 ] || die "no deb-src entry in the apt sources and not root: add one, e.g.
    sed 's/^Types:.*/Types: deb-src/' /etc/apt/sources.list.d/debian.sources \\
        > /etc/apt/sources.list.d/forceai-deb-src.sources && apt-get update"
    local f=/etc/apt/sources.list.d/forceai-deb-src.sources
    if [ -f /etc/apt/sources.list.d/debian.sources ]; then
        # Same URIs/Suites/Components/Signed-By as the binary entries, only the type changes.
        sed -E 's/^Types:.*/Types: deb-src/' /etc/apt/sources.list.d/debian.sources >"$f"
    elif [ -f /etc/apt/sources.list ] && grep -qE '^[[:space:]]*deb[[:space:]]' /etc/apt/sources.list; then
        f=/etc/apt/sources.list.d/forceai-deb-src.list
        sed -nE 's/^[[:space:]]*deb[[:space:]]/deb-src /p' /etc/apt/sources.list >"$f"
    else
        die "cannot find the Debian apt sources to derive a deb-src entry from"
    fi
    say "added deb-src entry $f"
}

apt_update() {
    [ "$(id -u)" -eq 0 ] || die "apt-get update needed (source lists missing) but not root"
    say "apt-get update"
    apt-get update -qq >"$LOGS/apt-update.log" 2>&1 \
        || { tail -n 20 "$LOGS/apt-update.log" >&2; die "apt-get update failed"; }
}

# Prints "<lib> <version>" for each library, as `apt-get source` would pick it now.
# Returns non-zero when the source lists are not available.
resolve_versions() {
    local pkgs=() l out
    for l in "$@"; do pkgs+=("${DEB_PKG[$l]}"); done
    out=$(cd / && apt-get source --print-uris -qq "${pkgs[@]}" 2>/dev/null) || return 1
    for l in "$@"; do
        local v
        v=$(printf '%s\n' "$out" | awk -v p="${DEB_PKG[$l]}" \
            '$2 ~ ("^" p "_.*\\.dsc$") { f=$2; sub("^" p "_", "", f); sub("\\.dsc$", "", f); print f; exit }')
        [ -n "$v" ] || return 1
        printf '%s %s\n' "$l" "$v"
    done
}

# --------------------------------------------------------------------------- toolchain env
setup_kinc() {
    # musl-gcc runs with -nostdinc: give it the kernel UAPI headers (linux-libc-dev) through a
    # private directory of symlinks, never the whole glibc /usr/include.
    local ma
    ma=$(gcc -print-multiarch 2>/dev/null || true)
    [ -n "$ma" ] || ma=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || true)
    [ -d "/usr/include/$ma/asm" ] || die "kernel asm headers not found (/usr/include/$ma/asm)"
    mkdir -p "$KINC"
    ln -sfn /usr/include/linux "$KINC/linux"
    ln -sfn "/usr/include/$ma/asm" "$KINC/asm"
    ln -sfn /usr/include/asm-generic "$KINC/asm-generic"
    [ -d /usr/include/mtd ] && ln -sfn /usr/include/mtd "$KINC/mtd"
    [ -d /usr/include/misc ] && ln -sfn /usr/include/misc "$KINC/misc"
    return 0
}

export CC="$CC_MUSL"
export CFLAGS="-O2 -fstack-protector-strong -ffunction-sections -fdata-sections -Wno-error"
export CPPFLAGS="-isystem $KINC -I$PREFIX/include"
export LDFLAGS="-static -L$PREFIX/lib"
export PKG_CONFIG_PATH="$PREFIX/lib/pkgconfig"
export PKG_CONFIG_LIBDIR="$PREFIX/lib/pkgconfig"
export LC_ALL=C
unset CXX CXXFLAGS LIBS || true

AUTOCONF_COMMON=(--prefix="$PREFIX" --libdir="$PREFIX/lib" --enable-static --disable-shared
                 --disable-dependency-tracking)
CMAKE_COMMON=(-DCMAKE_C_COMPILER="$CC_MUSL" -DCMAKE_BUILD_TYPE=Release
              -DCMAKE_INSTALL_PREFIX="$PREFIX" -DCMAKE_INSTALL_LIBDIR=lib
              -DBUILD_SHARED_LIBS=OFF -DCMAKE_POSITION_INDEPENDENT_CODE=OFF)

# --------------------------------------------------------------------------- recipes
# Each runs inside the unpacked, patched source tree; stdout/stderr go to the library's log.

build_mbedtls() {
    # Debian's rules also switch these on; threading makes the RNG/ssl contexts safe to share
    # between the runner's threads.
    sed -i -E 's|^//(#define MBEDTLS_THREADING_C)$|\1|; s|^//(#define MBEDTLS_THREADING_PTHREAD)$|\1|' \
        include/mbedtls/config.h
    grep -q '^#define MBEDTLS_THREADING_C$' include/mbedtls/config.h
    grep -q '^#define MBEDTLS_THREADING_PTHREAD$' include/mbedtls/config.h
    cmake -S . -B _build "${CMAKE_COMMON[@]}" \
        -DCMAKE_C_FLAGS="$CFLAGS -isystem $KINC" \
        -DUSE_STATIC_MBEDTLS_LIBRARY=ON -DUSE_SHARED_MBEDTLS_LIBRARY=OFF \
        -DENABLE_PROGRAMS=OFF -DENABLE_TESTING=OFF -DMBEDTLS_FATAL_WARNINGS=OFF \
        -DGEN_FILES=OFF -DLINK_WITH_PTHREAD=ON
    cmake --build _build -j "$JOBS"
    cmake --install _build
}

build_curl() {
    # Debian's rules take the two last patches (GnuTLS / NSS flavour renames) off again for the
    # plain libcurl build ("quilt pop" x2), then regenerate the build system (./buildconf).
    local series
    series=$(grep -vE '^[[:space:]]*(#|$)' debian/patches/series | tail -n 2 | tr '\n' ' ')
    [ "$series" = "90_gnutls.patch 99_nss.patch " ] \
        || { echo "unexpected tail of curl's patch series: $series"; return 1; }
    patch -R -p1 <debian/patches/99_nss.patch
    patch -R -p1 <debian/patches/90_gnutls.patch
    echo "debian patches reverted: 2 (90_gnutls.patch 99_nss.patch, as debian/rules does)"
    autoreconf -fi
    ./configure "${AUTOCONF_COMMON[@]}" \
        --with-mbedtls="$PREFIX" --without-openssl --without-gnutls --without-wolfssl \
        --without-bearssl --without-rustls --without-nss \
        --with-ca-bundle=/etc/ssl/certs/ca-certificates.crt --with-ca-path=/etc/ssl/certs \
        --with-ca-fallback=no \
        --enable-http --enable-proxy --enable-ipv6 --enable-threaded-resolver \
        --disable-ftp --disable-file --disable-ldap --disable-ldaps --disable-rtsp \
        --disable-dict --disable-telnet --disable-tftp --disable-pop3 --disable-imap \
        --disable-smb --disable-smtp --disable-gopher --disable-mqtt \
        --disable-manual --disable-ntlm --disable-ntlm-wb --disable-cookies --disable-alt-svc \
        --disable-hsts --disable-netrc --disable-doh --disable-websockets \
        --disable-ares --disable-sspi --disable-tls-srp --disable-curldebug --disable-debug \
        --without-zlib --without-brotli --without-zstd --without-libidn2 --without-libpsl \
        --without-nghttp2 --without-nghttp3 --without-ngtcp2 --without-quiche --without-msh3 \
        --without-libssh2 --without-libssh --without-wolfssh --without-librtmp \
        --without-libgsasl --without-gssapi --without-hyper --without-ldap-lib --without-lber-lib
    make -C lib -j "$JOBS"
    make -C lib install
    make -C include install
    mkdir -p "$PREFIX/lib/pkgconfig"
    install -m 644 libcurl.pc "$PREFIX/lib/pkgconfig/libcurl.pc"
}

build_libmicrohttpd() {
    # --enable-experimental: also microhttpd_ws, the WebSocket framing the runner uses (the dev
    # build gets the same library from the same source: scripts/build-mhd-ws.sh).
    ./configure "${AUTOCONF_COMMON[@]}" \
        --disable-https --without-gnutls --disable-curl --disable-doc --disable-examples \
        --disable-nls --with-threads=posix --enable-epoll=auto \
        --disable-sanitizers --disable-coverage --enable-experimental
    make -C src/microhttpd -j "$JOBS"
    make -C src/microhttpd install
    make -C src/microhttpd_ws -j "$JOBS" libmicrohttpd_ws.la
    make -C src/microhttpd_ws install-libLTLIBRARIES
    make -C src/include install
    test -f "$PREFIX/lib/libmicrohttpd_ws.a" && test -f "$PREFIX/include/microhttpd_ws.h"
}

build_jansson() {
    cmake -S . -B _build "${CMAKE_COMMON[@]}" \
        -DCMAKE_C_FLAGS="$CFLAGS -isystem $KINC" \
        -DJANSSON_BUILD_SHARED_LIBS=OFF -DJANSSON_EXAMPLES=OFF -DJANSSON_BUILD_DOCS=OFF \
        -DJANSSON_WITHOUT_TESTS=ON -DUSE_URANDOM=ON
    cmake --build _build -j "$JOBS"
    cmake --install _build
}

build_libseccomp() {
    ./configure "${AUTOCONF_COMMON[@]}" --disable-python
    make -C src -j "$JOBS"
    make -C src install
    make -C include install
}

build_libcap_ng() {
    ./configure "${AUTOCONF_COMMON[@]}" --without-python --without-python3
    make -C src -j "$JOBS" libcap-ng.la
    make -C src install-libLTLIBRARIES install-includeHEADERS lib_LTLIBRARIES=libcap-ng.la
}

recipe_fn() { printf 'build_%s' "${1//-/_}"; }

# Recipe hash: the library's recipe, the shared flags, this toolchain, and (recursively) the
# keys of the libraries it builds against.
declare -A KEY VERSION
recipe_key() {
    local lib=$1 d deps=""
    for d in ${DEPENDS[$lib]:-}; do deps+="$d=${KEY[$d]};"; done
    {
        declare -f "$(recipe_fn "$lib")"
        printf '%s\n' "$CFLAGS" "$CPPFLAGS" "$LDFLAGS" "${AUTOCONF_COMMON[*]}" "${CMAKE_COMMON[*]}"
        "$CC_MUSL" -dumpfullversion -dumpversion 2>/dev/null | head -n 1
        dpkg-query -W -f='${Version}\n' musl-dev linux-libc-dev 2>/dev/null || true
        printf 'version=%s\ndeps=%s\n' "${VERSION[$lib]}" "$deps"
    } | sha256sum | cut -c1-16
}

stamp_get() { sed -n "s/^$2=//p" "$STAMPS/$1" 2>/dev/null || true; }

# --------------------------------------------------------------------------- fetch + unpack
fetch_source() {
    local lib=$1 ver=$2 pkg=${DEB_PKG[$1]} dir="$SRC/$1" dsc tree
    mkdir -p "$dir"
    dsc="$dir/${pkg}_${ver#*:}.dsc"
    if [ ! -f "$dsc" ]; then
        find "$dir" -mindepth 1 -maxdepth 1 -exec rm -rf {} +
        # Download only; dpkg-source below unpacks and applies the patch series.
        (cd "$dir" && apt-get source --download-only -qq "$pkg=$ver") >>"$LOGS/$lib.log" 2>&1 \
            || return 1
    fi
    tree="$dir/tree"
    rm -rf "$tree"
    (cd "$dir" && dpkg-source -x "$(basename "$dsc")" tree) >>"$LOGS/$lib.log" 2>&1 \
        || return 1
    # Debian's patch series must be applied, entirely and in order.
    if [ -s "$tree/debian/patches/series" ] \
            && grep -qvE '^[[:space:]]*(#|$)' "$tree/debian/patches/series"; then
        local want have
        want=$(grep -vE '^[[:space:]]*(#|$)' "$tree/debian/patches/series" | awk '{print $1}')
        have=$(cat "$tree/.pc/applied-patches" 2>/dev/null || true)
        if [ "$want" != "$have" ]; then
            echo "Debian patch series not fully applied (.pc/applied-patches differs from series)" \
                >>"$LOGS/$lib.log"
            return 1
        fi
        echo "debian patches applied: $(printf '%s\n' "$want" | wc -l)" >>"$LOGS/$lib.log"
    fi
}

# Build one library (source already unpacked); writes its stamp. Prints one line.
build_one() {
    local lib=$1 t0 rc=0 npatch nrev
    t0=$(date +%s)
    {
        echo "== $lib ${VERSION[$lib]} ($(date -u +%FT%TZ))"
        echo "CC=$CC CFLAGS=$CFLAGS CPPFLAGS=$CPPFLAGS LDFLAGS=$LDFLAGS"
    } >>"$LOGS/$lib.log"
    # A fresh shell, so that errexit holds inside the recipe whatever context calls us.
    {
        declare -p PREFIX JOBS CC_MUSL CFLAGS CPPFLAGS LDFLAGS KINC AUTOCONF_COMMON CMAKE_COMMON
        declare -f "$(recipe_fn "$lib")"
        printf 'cd %q\nset -x\n%s\n' "$SRC/$lib/tree" "$(recipe_fn "$lib")"
    } >"$SRC/$lib/recipe.sh"
    bash -euo pipefail "$SRC/$lib/recipe.sh" </dev/null >>"$LOGS/$lib.log" 2>&1 || rc=$?
    if [ $rc -ne 0 ]; then
        printf 'static-deps: %-14s %-22s FAILED (log: %s)\n' "$lib" "${VERSION[$lib]}" "$LOGS/$lib.log" >&2
        tail -n 40 "$LOGS/$lib.log" | sed 's/^/    | /' >&2
        return 1
    fi
    npatch=$(sed -n 's/^debian patches applied: //p' "$LOGS/$lib.log" | tail -n 1)
    nrev=$(sed -n 's/^debian patches reverted: \([0-9]*\).*/\1/p' "$LOGS/$lib.log" | tail -n 1)
    npatch="${npatch:-0} Debian patches applied"
    [ -z "$nrev" ] || npatch="$npatch, $nrev flavour patches reverted"
    printf 'version=%s\nrecipe=%s\nbuilt=%s\n' "${VERSION[$lib]}" "${KEY[$lib]}" \
        "$(date -u +%FT%TZ)" >"$STAMPS/$lib"
    printf 'static-deps: %-14s %-22s built in %3ss (%s)\n' "$lib" \
        "${VERSION[$lib]}" "$(( $(date +%s) - t0 ))" "${npatch:-0}"
}

# --------------------------------------------------------------------------- main
mkdir -p "$PREFIX/include" "$PREFIX/lib" "$SRC" "$LOGS" "$STAMPS"

# Versions apt would pick now; fall back to the stamps when the source lists are unavailable
# and everything is already built (no network or apt needed for a cached run).
versions=$(resolve_versions "${ALL_LIBS[@]}" || true)
if [ -z "$versions" ]; then
    all_cached=1
    for l in "${ALL_LIBS[@]}"; do [ -s "$STAMPS/$l" ] || all_cached=0; done
    if [ $all_cached -eq 1 ] && [ $FORCE -eq 0 ]; then
        for l in "${ALL_LIBS[@]}"; do VERSION[$l]=$(stamp_get "$l" version); done
        say "note: Debian source lists unavailable; checking cached builds against their stamps"
    else
        need_tools
        have_deb_src || add_deb_src
        apt_update
        versions=$(resolve_versions "${ALL_LIBS[@]}") \
            || die "apt-get source cannot resolve: ${ALL_LIBS[*]} (is a deb-src entry configured?)"
    fi
fi
if [ -n "$versions" ]; then
    while read -r l v; do VERSION[$l]=$v; done <<<"$versions"
fi

todo=()
for l in "${ALL_LIBS[@]}"; do
    KEY[$l]=$(recipe_key "$l")
    if [ $FORCE -eq 1 ] || [ "$(stamp_get "$l" recipe)" != "${KEY[$l]}" ] \
            || [ ! -s "$STAMPS/$l" ]; then
        todo+=("$l")
    fi
done

if [ ${#todo[@]} -eq 0 ]; then
    # Touch the aggregate stamp only when make needs it (missing or older than this script), so
    # that a no-op run does not make the runner's objects out of date.
    if [ ! -e "$OUT/deps.stamp" ] || [ "${BASH_SOURCE[0]}" -nt "$OUT/deps.stamp" ]; then
        touch "$OUT/deps.stamp"
    fi
    say "all libraries up to date in $PREFIX ($(( $(date +%s) - T0 ))s)"
    exit 0
fi

need_tools
setup_kinc
command -v "$CC_MUSL" >/dev/null || die "$CC_MUSL not found"
say "building ${todo[*]} into $PREFIX (make -j$JOBS)"

skipped=()
for l in "${todo[@]}"; do
    rm -f "$STAMPS/$l"
    : >"$LOGS/$l.log"
    if ! fetch_source "$l" "${VERSION[$l]}"; then
        if [[ "$OPTIONAL_LIBS" == *" $l "* ]]; then
            printf 'static-deps: %-14s %-22s UNAVAILABLE: source cannot be fetched; building without it (log: %s)\n' \
                "$l" "${VERSION[$l]}" "$LOGS/$l.log" >&2
            rm -f "$PREFIX/lib/lib$l.a"
            printf 'version=%s\nrecipe=%s\nunavailable=source cannot be fetched\n' "${VERSION[$l]}" \
                "${KEY[$l]}" >"$STAMPS/$l"
            skipped+=("$l")
            continue
        fi
        printf 'static-deps: %-14s %-22s FETCH/UNPACK FAILED (log: %s)\n' "$l" "${VERSION[$l]}" \
            "$LOGS/$l.log" >&2
        tail -n 30 "$LOGS/$l.log" | sed 's/^/    | /' >&2
        exit 1
    fi
done

in_todo() {
    local x
    for x in "${skipped[@]}"; do [ "$x" = "$1" ] && return 1; done
    for x in "${todo[@]}"; do [ "$x" = "$1" ] && return 0; done
    return 1
}

# Two lanes keep both cores busy through the (serial) configure scripts: the TLS stack
# (mbedtls, then curl, which builds against it) and everything else.
lane() { local l; for l in "$@"; do in_todo "$l" || continue; build_one "$l" || return 1; done; }
if [ "$SERIAL" = 1 ]; then
    lane "${ALL_LIBS[@]}" || exit 1
else
    lane mbedtls curl &
    pid_tls=$!
    rc=0
    lane libmicrohttpd libseccomp libcap-ng jansson || rc=1
    wait "$pid_tls" || rc=1
    [ $rc -eq 0 ] || exit 1
fi

# Keep only the static archives the runner links (no libtool archives).
rm -f "$PREFIX"/lib/*.la
touch "$OUT/deps.stamp"
say "done in $(( $(date +%s) - T0 ))s; prefix $PREFIX"
