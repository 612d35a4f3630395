#!/bin/bash
# Install the Debian packages a make target needs, when they are missing.
# usage: scripts/install-deps.sh build|check|run|bench|fuzz
set -euo pipefail
what=${1:-build}

build_pkgs="gcc make pkg-config libmicrohttpd-dev libjansson-dev libseccomp-dev libcap-ng-dev libcurl4-openssl-dev libwslay-dev"
check_pkgs="$build_pkgs curl python3 python3-websockets procps valgrind nodejs npm bash coreutils util-linux git gcc tini"
run_pkgs="$build_pkgs util-linux curl"
bench_pkgs="$check_pkgs tini bubblewrap firejail"
fuzz_pkgs="$build_pkgs clang libclang-rt-14-dev"

case "$what" in
build) want=$build_pkgs ;;
check) want=$check_pkgs ;;
run) want=$run_pkgs ;;
bench) want=$bench_pkgs ;;
fuzz) want=$fuzz_pkgs ;;
*) echo "install-deps: unknown set '$what'" >&2; exit 2 ;;
esac

missing=()
for p in $want; do
	# nodejs may come from another repository as a single package with npm inside.
	if [ "$p" = npm ] && command -v npm >/dev/null 2>&1; then continue; fi
	if [ "$p" = nodejs ] && command -v node >/dev/null 2>&1; then continue; fi
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" != 0 ]; then
	echo "missing Debian packages: ${missing[*]}" >&2
	echo "install them as root: apt-get install ${missing[*]}" >&2
	exit 1
fi
echo "installing Debian packages: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
if ! apt-get install -y -qq --no-install-recommends "${missing[@]}" >/tmp/forceai-apt.log 2>&1; then
	apt-get update -qq >/dev/null 2>&1 || true
	apt-get install -y -qq --no-install-recommends "${missing[@]}" >/tmp/forceai-apt.log 2>&1 || {
		tail -20 /tmp/forceai-apt.log >&2
		exit 1
	}
fi
