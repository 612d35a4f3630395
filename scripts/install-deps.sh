#!/bin/bash
# Install the Debian packages a make target needs, when they are missing.
# usage: scripts/install-deps.sh build|check|image|run|bench|fuzz|lint
#
# image/run also prepare the container engine: with podman (the default; also
# when no engine is installed yet) scripts/podman-setup.sh installs podman and
# writes its configuration for this kind of host (vfs, cgroupfs, runc).
# IMAGE_ENGINE=docker skips that (Docker is then the caller's to provide).
set -euo pipefail
what=${1:-build}
here=$(cd "$(dirname "$0")" && pwd)

build_pkgs="gcc musl-tools make pkg-config libmicrohttpd-dev libjansson-dev libseccomp-dev libcap-ng-dev libcurl4-openssl-dev dpkg-dev"
# (bash-static: the task shell of commands, as in the image; runner/task/start.c)
# (`make check` runs fuzz-smoke too: clang and its sanitizer and libFuzzer runtimes;
# the workloads stage runs strace, gdb, ping, a venv and `ip` as tasks, getcap reads ping's capability)
check_pkgs="$build_pkgs curl python3 python3-websockets python3-yaml procps valgrind nodejs npm bash bash-static coreutils util-linux git gcc tini binutils clang-format tmux expect clang libclang-rt-14-dev python3-ipython python3-numpy python3-pandas python3-matplotlib strace gdb iputils-ping python3-venv iproute2 libcap2-bin"
# `make static`: musl and what scripts/build-static-deps.sh needs to build the
# static libraries from Debian's source packages (it checks them again itself)
static_pkgs="gcc make musl-tools gperf cmake dpkg-dev autoconf automake libtool patch xz-utils m4 pkg-config linux-libc-dev"
# `make image`: the static runner, the busybox userland and the CA bundle that
# image/stage-rootfs.sh stages, `file` to check busybox is static
image_pkgs="$static_pkgs busybox-static ca-certificates file debootstrap"
# `make run`: the image, plus curl to wait for /ping
run_pkgs="$image_pkgs curl"
bench_pkgs="$check_pkgs tini bubblewrap firejail nginx wrk linux-perf rsync python3-jupyter-client python3-ipykernel"
fuzz_pkgs="$build_pkgs clang libclang-rt-14-dev"
lint_pkgs="$build_pkgs python3 binutils clang-format"

case "$what" in
build) want=$build_pkgs ;;
check) want=$check_pkgs ;;
image) want=$image_pkgs ;;
run) want=$run_pkgs ;;
bench) want=$bench_pkgs ;;
fuzz) want=$fuzz_pkgs ;;
lint) want=$lint_pkgs ;;
*) echo "install-deps: unknown set '$what'" >&2; exit 2 ;;
esac

missing=()
for p in $want; do
	# nodejs may come from another repository as a single package with npm inside.
	if [ "$p" = npm ] && command -v npm >/dev/null 2>&1; then continue; fi
	if [ "$p" = nodejs ] && command -v node >/dev/null 2>&1; then continue; fi
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -gt 0 ]; then
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
fi

# `make bench` measures tasks in a box laid out as the image lays it out (image/install.sh):
# the C.UTF-8 locale in the locale archive, one map per program start instead of a dozen
# files; the locale's data is the same, only where glibc finds it changes.
if [ "$what" = bench ] && [ -d /usr/lib/locale/C.utf8 ] && command -v localedef >/dev/null 2>&1 &&
	! localedef --list-archive 2>/dev/null | grep -qix 'c\.utf-\?8'; then
	if [ "$(id -u)" = 0 ]; then
		echo "install-deps: adding C.utf8 to /usr/lib/locale/locale-archive (as the image does)"
		localedef --add-to-archive /usr/lib/locale/C.utf8 >/dev/null 2>&1 ||
			echo "install-deps: localedef failed: the locale's files serve (tasks start slower)" >&2
	else
		echo "install-deps: C.utf8 is not in the locale archive (as root: localedef --add-to-archive /usr/lib/locale/C.utf8)" >&2
	fi
fi

case "$what" in
image | run) ;;
*) exit 0 ;;
esac

# The container engine: the one asked for, else podman when present, else
# docker when its daemon answers (a docker CLI alone builds nothing), else
# podman (installed below). mk/image.mk makes the same choice.
engine=${IMAGE_ENGINE:-}
if [ -z "$engine" ]; then
	if command -v podman >/dev/null 2>&1; then
		engine=podman
	elif docker info >/dev/null 2>&1; then
		engine=docker
	else
		engine=podman
	fi
fi
case "$(basename "$engine")" in
podman)
	if [ "$(id -u)" = 0 ]; then
		# installs podman, runc, netavark... when missing; writes the host config
		"$here/podman-setup.sh"
	elif ! command -v podman >/dev/null 2>&1; then
		echo "podman is not installed; as root: scripts/podman-setup.sh" >&2
		exit 1
	fi
	;;
*)
	command -v "$engine" >/dev/null 2>&1 || {
		echo "install-deps: container engine '$engine' not found" >&2
		exit 1
	}
	;;
esac
