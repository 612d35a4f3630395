#!/bin/sh
# install.sh STAGE - lay out the forceai-runner image on top of any base.
#
# Runs once, at image build time, from the Containerfile:
#   RUN --mount=type=bind,source=build/image-rootfs,target=/.forceai-stage \
#       ["/.forceai-stage/busybox", "sh", "/.forceai-stage/install.sh", "/.forceai-stage"]
# It runs under the staged static busybox, so it needs nothing from the base
# image (FROM scratch, distroless, Debian, Alpine, a Python image...) and it
# never replaces what the base already has:
#   - the busybox userland goes in only when the base has no /bin/sh;
#   - /etc/passwd and /etc/group are created only when missing; the task
#     user `agent` (1000:1000, home /home/agent) and its group are appended
#     only when neither the name nor the id is taken;
#   - the CA bundle is installed only when /etc/ssl/certs/ca-certificates.crt
#     is missing;
#   - always: /etc/forceai-runner/seccomp.json, /workspace owned by the task
#     user, /tmp and /var/tmp 1777, /run 0755;
#   - the C.UTF-8 locale added to the locale archive when the base has localedef and
#     the archive lacks it (the same data, one map per program start);
#   - a ping of the base that carries a file capability (Debian's iputils-ping:
#     cap_net_raw=ep) is rewritten without it: tasks run with an empty
#     bounding set, under which the kernel refuses to exec such a file; without
#     it, ping uses an ICMP datagram socket (net.ipv4.ping_group_range).
set -eu
umask 022

S=${1:?usage: install.sh STAGE_DIR}
BB="$S/busybox"
bb() { "$BB" "$@"; }
log() { echo "forceai-image: $*"; }

TASK_UID=1000
TASK_GID=1000
TASK_NAME=agent

# --- userland ----------------------------------------------------------------
if [ ! -e /bin/sh ] && [ ! -L /bin/sh ]; then
	log "no /bin/sh in the base: installing the busybox userland"
	bb mkdir -p /bin /usr/bin
	[ -e /bin/busybox ] || bb cp "$BB" /bin/busybox
	bb chmod 0755 /bin/busybox
	n=0
	for a in $(bb cat "$S/applets"); do
		if [ ! -e "/bin/$a" ] && [ ! -L "/bin/$a" ]; then
			bb ln -s busybox "/bin/$a"
			n=$((n + 1))
		fi
	done
	# shebangs such as #!/usr/bin/env python3
	[ -e /usr/bin/env ] || [ -L /usr/bin/env ] || bb ln -s /bin/busybox /usr/bin/env
	log "linked $n applets into /bin"
else
	log "base has /bin/sh: keeping its userland"
fi

# --- users and groups ----------------------------------------------------------
bb mkdir -p /etc
if [ ! -e /etc/passwd ]; then
	printf '%s\n' 'root:x:0:0:root:/root:/bin/sh' \
		'nobody:x:65534:65534:nobody:/nonexistent:/bin/false' >/etc/passwd
	bb chmod 0644 /etc/passwd
fi
if [ ! -e /etc/group ]; then
	printf '%s\n' 'root:x:0:' 'nogroup:x:65534:' >/etc/group
	bb chmod 0644 /etc/group
fi
[ -d /root ] || { bb mkdir -p /root && bb chmod 0700 /root; }

# taken FILE NAME ID: is NAME (field 1) or ID (field 3) already in FILE?
taken() {
	bb awk -F: -v n="$2" -v i="$3" '$1 == n || $3 == i { f = 1 } END { exit !f }' "$1"
}
if taken /etc/group "$TASK_NAME" "$TASK_GID"; then
	log "group $TASK_NAME or gid $TASK_GID already present: kept"
else
	echo "$TASK_NAME:x:$TASK_GID:" >>/etc/group
	[ ! -e /etc/gshadow ] || echo "$TASK_NAME:!::" >>/etc/gshadow
	log "added group $TASK_NAME ($TASK_GID)"
fi
if taken /etc/passwd "$TASK_NAME" "$TASK_UID"; then
	log "user $TASK_NAME or uid $TASK_UID already present: kept"
else
	echo "$TASK_NAME:x:$TASK_UID:$TASK_GID:forceai task user:/home/$TASK_NAME:/bin/sh" >>/etc/passwd
	[ ! -e /etc/shadow ] || echo "$TASK_NAME:!:0:0:99999:7:::" >>/etc/shadow
	log "added user $TASK_NAME ($TASK_UID:$TASK_GID)"
fi
# the task user's home, whatever its name
home=$(bb awk -F: -v i="$TASK_UID" '$3 == i { print $6; exit }' /etc/passwd)
if [ -n "$home" ] && [ "$home" != / ] && [ ! -e "$home" ]; then
	bb mkdir -p "$home"
	bb chown "$TASK_UID:$TASK_GID" "$home"
	bb chmod 0750 "$home"
fi

# --- directories ---------------------------------------------------------------
bb mkdir -p /workspace /tmp /var/tmp /run
bb chown -R "$TASK_UID:$TASK_GID" /workspace
bb chmod 0755 /workspace
bb chmod 1777 /tmp /var/tmp
bb chmod 0755 /run

# --- ping without file capabilities ----------------------------------------------
# busybox cp writes a new file without extended attributes, so without
# security.capability: same bytes, same mode, no capability.
for f in /bin/ping /usr/bin/ping /sbin/ping /usr/sbin/ping; do
	[ -f "$f" ] && [ ! -L "$f" ] || continue
	bb cp "$f" "$f.forceai-new"
	bb chmod 0755 "$f.forceai-new"
	bb mv -f "$f.forceai-new" "$f"
	log "$f: file capabilities dropped (ping uses ICMP datagram sockets)"
done

# --- the C.UTF-8 locale in the locale archive ------------------------------------
# A deployment that sets LANG=C.UTF-8 (tasks get the runner's LANG): glibc finds a locale in
# the archive with one map, and without it opens a dozen files at every program start that
# sets its locale (bash: 0.2 ms). Same data (Debian's compiled C.utf8), added only where the base has
# localedef and the archive lacks it (docs/design/tasks.md "The task shell").
if [ -d /usr/lib/locale/C.utf8 ] && [ -x /usr/bin/localedef ] &&
	! /usr/bin/localedef --list-archive 2>/dev/null | bb grep -qix 'c\.utf-\?8'; then
	if /usr/bin/localedef --add-to-archive /usr/lib/locale/C.utf8 >/dev/null 2>&1; then
		log "C.utf8 added to the locale archive"
	else
		log "C.utf8 not added to the locale archive (localedef failed): the files serve"
	fi
fi

# --- runner files and trust ------------------------------------------------------
bb mkdir -p /etc/forceai-runner
bb cp "$S/etc/forceai-runner/seccomp.json" /etc/forceai-runner/seccomp.json
bb chmod 0644 /etc/forceai-runner/seccomp.json
if [ -e "$S/etc/forceai-runner/seccomp.json.bpf" ]; then
	bb cp "$S/etc/forceai-runner/seccomp.json.bpf" /etc/forceai-runner/seccomp.json.bpf
	bb chmod 0644 /etc/forceai-runner/seccomp.json.bpf
fi
if [ ! -e /etc/ssl/certs/ca-certificates.crt ]; then
	bb mkdir -p /etc/ssl/certs
	bb cp "$S/etc/ssl/certs/ca-certificates.crt" /etc/ssl/certs/ca-certificates.crt
	bb chmod 0644 /etc/ssl/certs/ca-certificates.crt
	log "installed the CA bundle /etc/ssl/certs/ca-certificates.crt"
fi
[ -e /etc/ssl/cert.pem ] || [ -L /etc/ssl/cert.pem ] || bb ln -s certs/ca-certificates.crt /etc/ssl/cert.pem
log "done"
