#!/bin/sh
# podman-setup.sh - make podman/buildah usable for building and testing the
# forceai/runtime-runner image on a Debian 12 host (or container) without a
# Docker engine and without access to any container registry.
#
# Idempotent. Run as root. What it does, each step only when needed:
#   1. apt-get install podman buildah runc (+ netavark aardvark-dns slirp4netns,
#      catatonit for the pause image of `podman kube play`,
#      debootstrap, busybox-static, ca-certificates, iptables) if missing;
#   2. /etc/containers/storage.conf     -> driver = "vfs"
#      (overlay needs a kernel/fs combination this kind of host often lacks);
#   3. /etc/containers/containers.conf  -> [containers] default_ulimits = []
#      (the host may not raise RLIMIT_NOFILE), [engine] cgroup_manager =
#      "cgroupfs" (no systemd as PID 1), runtime = "runc" (crun fails on hybrid
#      cgroups), [network] network_backend = "netavark";
#   4. enables net.ipv4.ip_forward (netavark needs it to publish a port on the
#      host loopback; best effort).
#
# Environment:
#   PODMAN_SETUP_NO_INSTALL=1   never call apt-get (just write the config)
#   PODMAN_SETUP_FORCE=1        rewrite the config files even if present
set -eu

log() { printf 'podman-setup: %s\n' "$*" >&2; }

if [ "$(id -u)" -ne 0 ]; then
	log "must run as root (rootful podman with vfs storage is what works here)"
	exit 1
fi

# --- 1. packages -----------------------------------------------------------
PKGS="podman buildah runc netavark aardvark-dns slirp4netns iptables catatonit debootstrap busybox-static ca-certificates"
missing=""
for p in $PKGS; do
	if ! dpkg-query -W -f '${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
		missing="$missing $p"
	fi
done
if [ -n "$missing" ]; then
	if [ "${PODMAN_SETUP_NO_INSTALL:-0}" = 1 ]; then
		log "missing packages:$missing (not installing: PODMAN_SETUP_NO_INSTALL=1)"
	else
		log "installing:$missing"
		export DEBIAN_FRONTEND=noninteractive
		apt_log=/tmp/forceai-podman-apt.log
		# shellcheck disable=SC2086
		if ! { apt-get update -qq && apt-get install -y -qq --no-install-recommends $missing; } \
			>"$apt_log" 2>&1; then
			tail -n 20 "$apt_log" >&2
			log "apt-get install$missing failed (log: $apt_log)"
			exit 1
		fi
	fi
else
	log "packages present"
fi

mkdir -p /etc/containers

# --- 2. storage.conf -------------------------------------------------------
STORAGE=/etc/containers/storage.conf
if [ "${PODMAN_SETUP_FORCE:-0}" != 1 ] && [ -f "$STORAGE" ] \
	&& grep -Eq '^[[:space:]]*driver[[:space:]]*=[[:space:]]*"vfs"' "$STORAGE"; then
	log "$STORAGE already selects vfs"
else
	if [ -f "$STORAGE" ] && [ ! -f "$STORAGE.forceai-orig" ]; then
		cp -p "$STORAGE" "$STORAGE.forceai-orig"
	fi
	cat >"$STORAGE" <<'EOF'
# written by forceai-runner scripts/podman-setup.sh
[storage]
driver = "vfs"
runroot = "/run/containers/storage"
graphroot = "/var/lib/containers/storage"
EOF
	log "wrote $STORAGE (driver vfs)"
	if [ -d /var/lib/containers/storage/overlay ]; then
		log "note: existing overlay storage under /var/lib/containers/storage is ignored by vfs; 'podman system reset' cleans it"
	fi
fi

# --- 3. containers.conf ----------------------------------------------------
CONF=/etc/containers/containers.conf
conf_ok() {
	[ -f "$CONF" ] || return 1
	grep -Eq '^[[:space:]]*default_ulimits[[:space:]]*=[[:space:]]*\[[[:space:]]*\]' "$CONF" || return 1
	grep -Eq '^[[:space:]]*cgroup_manager[[:space:]]*=[[:space:]]*"cgroupfs"' "$CONF" || return 1
	grep -Eq '^[[:space:]]*runtime[[:space:]]*=[[:space:]]*"runc"' "$CONF" || return 1
	return 0
}
if [ "${PODMAN_SETUP_FORCE:-0}" != 1 ] && conf_ok; then
	log "$CONF already set (ulimits, cgroupfs, runc)"
else
	if [ -f "$CONF" ] && [ ! -f "$CONF.forceai-orig" ]; then
		cp -p "$CONF" "$CONF.forceai-orig"
	fi
	cat >"$CONF" <<'EOF'
# written by forceai-runner scripts/podman-setup.sh
[containers]
# this host may refuse to raise RLIMIT_NOFILE: do not ask runc to set ulimits
default_ulimits = []

[engine]
# no systemd as PID 1 here; crun fails on hybrid (v1 + empty v2) cgroups
cgroup_manager = "cgroupfs"
events_logger = "file"
runtime = "runc"

[network]
network_backend = "netavark"
EOF
	log "wrote $CONF"
fi

# --- 4. networking ---------------------------------------------------------
# netavark publishes ports with iptables DNAT; traffic to 127.0.0.1 needs
# route_localnet, which netavark sets itself, and forwarding to the bridge.
if [ -w /proc/sys/net/ipv4/ip_forward ]; then
	if [ "$(cat /proc/sys/net/ipv4/ip_forward)" != 1 ]; then
		if echo 1 >/proc/sys/net/ipv4/ip_forward 2>/dev/null; then
			log "enabled net.ipv4.ip_forward"
		else
			log "could not enable net.ipv4.ip_forward (publishing may fall back to --network host)"
		fi
	fi
fi

if command -v podman >/dev/null 2>&1; then
	drv=$(podman info --format '{{.Store.GraphDriverName}}' 2>/dev/null || true)
	rt=$(podman info --format '{{.Host.OCIRuntime.Name}}' 2>/dev/null || true)
	cg=$(podman info --format '{{.Host.CgroupManager}}' 2>/dev/null || true)
	nb=$(podman info --format '{{.Host.NetworkBackend}}' 2>/dev/null || true)
	log "podman: storage=$drv runtime=$rt cgroups=$cg network=$nb"
fi
