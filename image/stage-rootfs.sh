#!/bin/sh
# stage-rootfs.sh - prepare build/image-rootfs/, the staging directory the
# Containerfile bind-mounts (RUN --mount=type=bind) to lay out the image.
#
# Everything comes from this repository and the Debian host, nothing from a
# registry or the network:
#   busybox                           <- Debian busybox-static (/bin/busybox)
#   install.sh, applets               <- image/install.sh, image/applets
#   etc/forceai-runner/seccomp.json   <- seccomp/default.json
#   etc/forceai-runner/seccomp.json.bpf <- the same compiled by the static runner
#                                        (--write-seccomp-cache: starts skip it)
#   etc/ssl/certs/ca-certificates.crt <- Debian ca-certificates (host bundle)
#   opensandbox/bootstrap.sh          <- image/opensandbox/bootstrap.sh with the
#                                        seccomp policy embedded
#
# Usage: image/stage-rootfs.sh [OUTDIR]        (default build/image-rootfs)
# Env:   BUSYBOX=/path/to/static/busybox  CA_BUNDLE=/path/to/bundle.crt
#        SECCOMP_POLICY=/path/to/policy.json  RUNNER=build/static/forceai-runner
set -eu

here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/.." && pwd)
out=${1:-$top/build/image-rootfs}
case $out in /*) ;; *) out=$PWD/$out ;; esac # the runner takes absolute paths only
BUSYBOX=${BUSYBOX:-/bin/busybox}
CA_BUNDLE=${CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}
SECCOMP_POLICY=${SECCOMP_POLICY:-$top/seccomp/default.json}
RUNNER=${RUNNER:-$top/build/static/forceai-runner}

die() { printf 'stage-rootfs: %s\n' "$*" >&2; exit 1; }

[ -x "$BUSYBOX" ] || die "no busybox at $BUSYBOX (apt-get install busybox-static)"
# The userland must run in a FROM-scratch image: refuse a dynamic busybox.
if command -v file >/dev/null 2>&1; then
	file -L "$BUSYBOX" | grep -q 'statically linked' \
		|| die "$BUSYBOX is not statically linked (install busybox-static)"
elif [ -r "$BUSYBOX" ] && grep -q 'ld-linux' "$BUSYBOX"; then
	die "$BUSYBOX looks dynamically linked (install busybox-static)"
fi
[ -s "$CA_BUNDLE" ] || die "no CA bundle at $CA_BUNDLE (apt-get install ca-certificates)"
[ -s "$SECCOMP_POLICY" ] || die "no seccomp policy at $SECCOMP_POLICY"

tmp="$out.tmp.$$"
rm -rf "$tmp"
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/etc/forceai-runner" "$tmp/etc/ssl/certs" "$tmp/opensandbox"

install -m 0755 "$BUSYBOX" "$tmp/busybox"
install -m 0644 "$here/install.sh" "$tmp/install.sh"
# applet list: comments dropped, one name per line, duplicates removed
sed -e 's/#.*//' "$here/applets" | tr -s ' \t' '\n\n' | sed '/^$/d' | awk '!seen[$0]++' >"$tmp/applets"
for a in $(cat "$tmp/applets"); do
	"$BUSYBOX" --list | grep -qxF -- "$a" || die "busybox has no applet '$a' (image/applets)"
done
install -m 0644 "$SECCOMP_POLICY" "$tmp/etc/forceai-runner/seccomp.json"
# The compiled program, keyed to this runner build (a stale one is ignored).
if [ -x "$RUNNER" ]; then
	"$RUNNER" --seccomp-policy "$tmp/etc/forceai-runner/seccomp.json" --write-seccomp-cache \
		>/dev/null || die "$RUNNER --write-seccomp-cache failed"
	chmod 0644 "$tmp/etc/forceai-runner/seccomp.json.bpf"
fi
install -m 0644 "$CA_BUNDLE" "$tmp/etc/ssl/certs/ca-certificates.crt"

# OpenSandbox replacement bootstrap: OpenSandbox copies only /execd and
# /bootstrap.sh into a sandbox, so the policy travels inside the script.
marker='@FORCEAI_SECCOMP_POLICY@'
grep -q "^$marker\$" "$here/opensandbox/bootstrap.sh" || die "marker missing in bootstrap.sh"
grep -q '^FORCEAI_POLICY_EOF$' "$SECCOMP_POLICY" && die "policy contains the heredoc terminator"
awk -v m="$marker" -v p="$SECCOMP_POLICY" '
	$0 == m { while ((getline l < p) > 0) print l; next }
	{ print }' "$here/opensandbox/bootstrap.sh" >"$tmp/opensandbox/bootstrap.sh"
chmod 0755 "$tmp/opensandbox/bootstrap.sh"

rm -rf "$out"
mv "$tmp" "$out"
trap - EXIT
printf 'stage-rootfs: staged %s (busybox %s applets, policy %s bytes)\n' \
	"$out" "$(wc -l <"$out/applets" | tr -d ' ')" "$(wc -c <"$out/etc/forceai-runner/seccomp.json" | tr -d ' ')"
