#!/bin/sh
# forceai-runner as OpenSandbox's execd: /bootstrap.sh of the replacement
# execd image (image/opensandbox/Containerfile).
#
# OpenSandbox copies /execd and /bootstrap.sh out of the image named by the
# server setting `runtime.execd_image` into every sandbox, as
# /opt/opensandbox/execd and /opt/opensandbox/bootstrap.sh, and starts the
# sandbox with `/opt/opensandbox/bootstrap.sh <entrypoint...>`. This script
# keeps the environment contract of OpenSandbox's own bootstrap (egress MITM
# CA, EXECD, EXECD_ENVS, EXECD_BOOTSTRAP_PRE_SCRIPT, BOOTSTRAP_CMD, -c,
# BOOTSTRAP_SHELL) and then always *execs* the runner, so the runner is PID 1
# (init mode), serves the execd API on port 44772, and runs the sandbox's
# entrypoint as its main child. The runner exits with the main child's status;
# without an entrypoint it serves until SIGTERM.
#
# The stage script (image/stage-rootfs.sh) replaces the marker line further
# down with the default seccomp policy, because OpenSandbox copies only these
# two files into a sandbox whose image knows nothing about the runner.
set -e

is_truthy() {
	case "$(printf '%s' "${1:-}" | tr '[:upper:]' '[:lower:]')" in
	1 | true | yes | on) return 0 ;;
	*) return 1 ;;
	esac
}

as_root() {
	if [ "$(id -u 2>/dev/null || echo 0)" = 0 ]; then
		"$@"
	elif command -v sudo >/dev/null 2>&1; then
		sudo -n "$@"
	else
		"$@"
	fi
}

# --- egress MITM CA (same paths, variables and order as OpenSandbox) ---------
OSB_DIR=/opt/opensandbox
MITM_CA="$OSB_DIR/mitmproxy-ca-cert.pem"
MERGED_CA="$OSB_DIR/merged-ca-certificates.pem"
OPENSANDBOX_MERGED_CA=""

# system trust store + a merged bundle (full roots + the MITM CA) for the
# variables that replace rather than extend the default roots
install_mitm_ca_system() {
	ca="$1"
	if command -v update-ca-certificates >/dev/null 2>&1; then
		{ as_root mkdir -p /usr/local/share/ca-certificates &&
			as_root cp "$ca" /usr/local/share/ca-certificates/opensandbox-mitmproxy-ca.crt &&
			as_root update-ca-certificates; } ||
			echo "warning: update-ca-certificates failed; system trust store may not include mitm CA" >&2
	elif command -v update-ca-trust >/dev/null 2>&1; then
		{ as_root mkdir -p /etc/pki/ca-trust/source/anchors &&
			as_root cp "$ca" /etc/pki/ca-trust/source/anchors/opensandbox-mitmproxy-ca.pem &&
			{ as_root update-ca-trust extract || as_root update-ca-trust; }; } ||
			echo "warning: update-ca-trust failed; system trust store may not include mitm CA" >&2
	else
		echo "warning: no system trust-store tooling found (need update-ca-certificates or update-ca-trust)" >&2
	fi

	roots=""
	for py in python3 python; do
		if command -v "$py" >/dev/null 2>&1; then
			roots=$("$py" -c 'import certifi; print(certifi.where())' 2>/dev/null) || roots=""
			break
		fi
	done
	for bundle in "$roots" /etc/ssl/certs/ca-certificates.crt /etc/pki/tls/certs/ca-bundle.crt \
		/etc/ssl/cert.pem /etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem; do
		if [ -n "$bundle" ] && [ -s "$bundle" ]; then
			cat "$bundle" "$ca" >"$MERGED_CA"
			OPENSANDBOX_MERGED_CA="$MERGED_CA"
			return 0
		fi
	done
	echo "warning: could not locate any CA bundle to merge with mitm CA" >&2
	return 0
}

# per-user NSS database ($HOME/.pki/nssdb) used by Chromium
install_mitm_ca_nss() {
	ca="$1"
	[ -n "${HOME:-}" ] && [ -d "$HOME" ] || return 0
	command -v certutil >/dev/null 2>&1 || return 0
	dir="$HOME/.pki/nssdb"
	mkdir -p "$dir" 2>/dev/null || return 0
	if [ -f "$dir/cert9.db" ]; then
		db="sql:$dir"
	elif [ -f "$dir/cert8.db" ]; then
		db="dbm:$dir"
	else
		db="sql:$dir"
		certutil -N -d "$db" --empty-password 2>/dev/null || [ -f "$dir/cert9.db" ] || return 0
	fi
	certutil -D -d "$db" -n opensandbox-mitmproxy 2>/dev/null || true
	certutil -A -d "$db" -n opensandbox-mitmproxy -t "C,," -i "$ca" ||
		echo "warning: failed to import mitm CA into NSS at $dir (Chrome may still distrust); need certutil" >&2
	return 0
}

# every JDK trust store: $JAVA_HOME, /usr/lib/jvm/*, /usr/java/*, /opt/java/*,
# /opt/jdk*, and the JDK of `java` on PATH
JDKS_DONE=" "
import_jdk() {
	jdk="$1"
	ca="$2"
	[ -d "$jdk" ] || return 0
	jdk=$(cd "$jdk" 2>/dev/null && pwd -P) || return 0
	case "$JDKS_DONE" in *" $jdk "*) return 0 ;; esac
	JDKS_DONE="$JDKS_DONE$jdk "
	[ -x "$jdk/bin/keytool" ] || return 0
	store=""
	for f in "$jdk/lib/security/cacerts" "$jdk/jre/lib/security/cacerts"; do
		if [ -f "$f" ]; then store="$f"; break; fi
	done
	[ -n "$store" ] || return 0
	if "$jdk/bin/keytool" -list -alias opensandbox-mitmproxy -keystore "$store" -storepass changeit >/dev/null 2>&1; then
		as_root "$jdk/bin/keytool" -delete -alias opensandbox-mitmproxy -keystore "$store" -storepass changeit >/dev/null 2>&1
	fi
	if as_root "$jdk/bin/keytool" -importcert -noprompt -trustcacerts -alias opensandbox-mitmproxy \
		-file "$ca" -keystore "$store" -storepass changeit >/dev/null 2>&1; then
		echo "imported mitm CA into JDK trust store at $store"
	else
		echo "warning: failed to import mitm CA into $store" >&2
	fi
}
install_mitm_ca_jdk() {
	ca="$1"
	[ -z "${JAVA_HOME:-}" ] || import_jdk "$JAVA_HOME" "$ca"
	for parent in /usr/lib/jvm /usr/java /opt/java; do
		[ -d "$parent" ] || continue
		for d in "$parent"/*/; do
			[ -d "$d" ] && import_jdk "${d%/}" "$ca"
		done
	done
	for d in /opt/jdk*; do
		[ -d "$d" ] && import_jdk "$d" "$ca"
	done
	if command -v java >/dev/null 2>&1; then
		j=$(command -v java)
		while [ -L "$j" ]; do
			t=$(readlink "$j" 2>/dev/null) || break
			case "$t" in /*) j="$t" ;; *) j="$(dirname "$j")/$t" ;; esac
		done
		import_jdk "$(dirname "$(dirname "$j")")" "$ca"
	fi
	return 0
}

if is_truthy "${OPENSANDBOX_EGRESS_MITMPROXY_TRANSPARENT:-}"; then
	# the egress sidecar exports its CA into the shared /opt/opensandbox
	waited=0
	while [ "$waited" -lt 300 ] && ! [ -s "$MITM_CA" ]; do
		sleep 1
		waited=$((waited + 1))
	done
	if [ -s "$MITM_CA" ]; then
		echo "mitm CA ready at $MITM_CA after ${waited}s"
		install_mitm_ca_system "$MITM_CA" ||
			echo "warning: failed to install mitm CA into system trust store; TLS interception may not work for system libraries" >&2
		install_mitm_ca_nss "$MITM_CA" || true
		install_mitm_ca_jdk "$MITM_CA" || true
		export NODE_EXTRA_CA_CERTS="$MITM_CA"
		if [ -n "$OPENSANDBOX_MERGED_CA" ] && [ -f "$OPENSANDBOX_MERGED_CA" ]; then
			export REQUESTS_CA_BUNDLE="$OPENSANDBOX_MERGED_CA"
			export SSL_CERT_FILE="$OPENSANDBOX_MERGED_CA"
		else
			echo "warning: merged CA bundle not available; REQUESTS_CA_BUNDLE/SSL_CERT_FILE will only contain the mitm CA" >&2
			export REQUESTS_CA_BUNDLE="$MITM_CA"
			export SSL_CERT_FILE="$MITM_CA"
		fi
	else
		echo "warning: timed out after 300s waiting for $MITM_CA (egress mitm CA export); continuing without system CA trust" >&2
	fi
fi

# --- the runner ------------------------------------------------------------------
EXECD="${EXECD:-$OSB_DIR/execd}"
# running the execd image itself (not injected): the binary is /execd
if [ ! -x "$EXECD" ] && [ -x /execd ]; then
	EXECD=/execd
fi
if [ ! -x "$EXECD" ]; then
	echo "error: runner binary not found at $EXECD" >&2
	exit 127
fi

# execd reads extra command environment from EXECD_ENVS; keep the file there
EXECD_ENVS="${EXECD_ENVS:-$OSB_DIR/.env}"
mkdir -p "$(dirname "$EXECD_ENVS")" 2>/dev/null || echo "warning: failed to create dir for EXECD_ENVS=$EXECD_ENVS" >&2
touch "$EXECD_ENVS" 2>/dev/null || echo "warning: failed to touch EXECD_ENVS=$EXECD_ENVS" >&2
# The runner reads it again for every command (request envs > this file >
# its defaults). The SDK's commands.set_env appends to it from a command,
# which runs as the task user: the file is that user's (the runner reads it
# only as a regular file with one link, owned by root or the task user).
if [ "$(id -u 2>/dev/null || echo 0)" = 0 ] && [ ! -L "$EXECD_ENVS" ]; then
	task_user="${FORCEAI_TASK_USER:-1000:1000}"
	chown "$task_user" "$EXECD_ENVS" 2>/dev/null && chmod 0600 "$EXECD_ENVS" 2>/dev/null ||
		echo "warning: failed to give EXECD_ENVS=$EXECD_ENVS to the task user $task_user" >&2
elif [ -O "$EXECD_ENVS" ] && [ ! -L "$EXECD_ENVS" ]; then
	# non-root (a template's runAsUser): the file is already the task
	# user's, who is the runner's uid; set_env values may be secrets, and
	# /opt/opensandbox is a 0777 emptyDir other containers' uids may share
	chmod 0600 "$EXECD_ENVS" 2>/dev/null ||
		echo "warning: failed to make EXECD_ENVS=$EXECD_ENVS private (0600)" >&2
fi
export EXECD_ENVS

# sourced, so its exports reach the runner and the entrypoint
if [ -n "${EXECD_BOOTSTRAP_PRE_SCRIPT:-}" ]; then
	if [ -f "$EXECD_BOOTSTRAP_PRE_SCRIPT" ] && [ -r "$EXECD_BOOTSTRAP_PRE_SCRIPT" ]; then
		case "$EXECD_BOOTSTRAP_PRE_SCRIPT" in
		*/*) pre="$EXECD_BOOTSTRAP_PRE_SCRIPT" ;;
		*) pre="./$EXECD_BOOTSTRAP_PRE_SCRIPT" ;;
		esac
		echo "sourcing pre-script $EXECD_BOOTSTRAP_PRE_SCRIPT"
		# shellcheck disable=SC1090
		. "$pre"
	else
		echo "warning: EXECD_BOOTSTRAP_PRE_SCRIPT=$EXECD_BOOTSTRAP_PRE_SCRIPT not found or not readable" >&2
	fi
fi

# the seccomp policy: the image's own when it has one, else the embedded copy
POLICY="${FORCEAI_SECCOMP_POLICY:-}"
if [ -z "$POLICY" ]; then
	if [ -s /etc/forceai-runner/seccomp.json ]; then
		POLICY=/etc/forceai-runner/seccomp.json
	else
		POLICY="$OSB_DIR/forceai-seccomp.json"
		for dir in "$OSB_DIR" /run /tmp; do
			POLICY="$dir/forceai-seccomp.json"
			if (umask 022 && cat >"$POLICY") 2>/dev/null <<'FORCEAI_POLICY_EOF'; then break; fi
@FORCEAI_SECCOMP_POLICY@
FORCEAI_POLICY_EOF
		done
	fi
fi

# the task user's working directory, in images that do not have one
TASK_USER="${FORCEAI_TASK_USER:-1000:1000}"
if [ ! -d /workspace ] && mkdir -p /workspace 2>/dev/null; then
	chown "$TASK_USER" /workspace 2>/dev/null || true
fi

# the entrypoint, as OpenSandbox's bootstrap resolves it
CMD=""
if [ -n "${BOOTSTRAP_CMD:-}" ]; then
	CMD="$BOOTSTRAP_CMD"
elif [ $# -ge 1 ] && [ "$1" = "-c" ]; then
	shift
	CMD="$*"
fi
if [ -n "$CMD" ]; then
	SHELL_BIN="${BOOTSTRAP_SHELL:-}"
	if [ -z "$SHELL_BIN" ]; then
		SHELL_BIN=$(command -v bash 2>/dev/null || command -v sh 2>/dev/null || true)
	fi
	if [ -z "$SHELL_BIN" ]; then
		echo "error: neither bash nor sh found in PATH" >&2
		exit 1
	fi
	set -- "$SHELL_BIN" -c "$CMD"
fi
unset OPENSANDBOX_LIFECYCLE EXECD_LIFECYCLE_CONFIG

LISTEN="${FORCEAI_RUNNER_LISTEN:-0.0.0.0:44772}"
echo "starting forceai-runner as OpenSandbox execd at $EXECD (listen $LISTEN)"
if [ $# -ge 1 ]; then
	exec "$EXECD" --listen "$LISTEN" --seccomp-policy "$POLICY" -- "$@"
fi
exec "$EXECD" --listen "$LISTEN" --seccomp-policy "$POLICY"
