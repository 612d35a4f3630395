#!/bin/sh
# run-container.sh - run forceai/runtime-runner detached, published on the
# host loopback, with a freshly generated access token; print the endpoint,
# the token and a curl that runs a task. Used by `make run` / `make run-container`.
#
# Env: IMAGE_ENGINE (podman|docker), IMAGE (forceai/runtime-runner:latest),
#      PORT (8080; the next free port is taken when busy), NAME (forceai-runner),
#      RUN_FLAGS (extra flags for `run`), IMAGE_ABOUT (what IMAGE is, for the summary)
set -eu

ENGINE=${IMAGE_ENGINE:-podman}
IMAGE=${IMAGE:-forceai/runtime-runner:latest}
PORT=${PORT:-8080}
NAME=${NAME:-forceai-runner}
RUN_FLAGS=${RUN_FLAGS:-}
IMAGE_ABOUT=${IMAGE_ABOUT:-}

port_busy() {
	# something already listening on 127.0.0.1:$1 (or on the wildcard)?
	if command -v ss >/dev/null 2>&1; then
		ss -Htln "sport = :$1" 2>/dev/null | grep -q .
	else
		curl -s -o /dev/null --max-time 1 "http://127.0.0.1:$1/"
		[ $? -ne 7 ]
	fi
}

# a previous run of this target
if "$ENGINE" container exists "$NAME" 2>/dev/null || "$ENGINE" inspect "$NAME" >/dev/null 2>&1; then
	"$ENGINE" rm -f -t 2 "$NAME" >/dev/null 2>&1 || "$ENGINE" rm -f "$NAME" >/dev/null
fi

p=$PORT
while port_busy "$p"; do
	p=$((p + 1))
	[ "$p" -lt $((PORT + 100)) ] || { echo "run-container: no free port near $PORT" >&2; exit 1; }
done
[ "$p" = "$PORT" ] || echo "run-container: 127.0.0.1:$PORT is busy, using $p" >&2

TOKEN=$(od -An -tx1 -N24 /dev/urandom | tr -d ' \n')

# ping_group_range: tasks ping with ICMP datagram sockets, without capabilities
# (podman's own default lets group 0 only; docs/design/confinement.md#where-standard-tools-write-ping-chromium).
# shellcheck disable=SC2086
"$ENGINE" run -d --name "$NAME" -p "127.0.0.1:$p:8080" \
	--sysctl net.ipv4.ping_group_range="0 2147483647" \
	-e EXECD_ACCESS_TOKEN="$TOKEN" $RUN_FLAGS "$IMAGE" >/dev/null

i=0
until curl -fsS -o /dev/null -H "X-EXECD-ACCESS-TOKEN: $TOKEN" "http://127.0.0.1:$p/ping" 2>/dev/null; do
	i=$((i + 1))
	if [ "$i" -ge 100 ] || [ "$("$ENGINE" inspect -f '{{.State.Running}}' "$NAME" 2>/dev/null)" != true ]; then
		echo "run-container: the runner did not become ready; its log:" >&2
		"$ENGINE" logs "$NAME" >&2 || true
		exit 1
	fi
	sleep 0.1
done

# The example tasks are the ones this image can run: python3 where it has one
# (:python, :code), busybox's shell arithmetic where not (:latest), and a code
# context where /code offers python (:code).
if "$ENGINE" exec "$NAME" /bin/sh -c 'command -v python3' >/dev/null 2>&1; then
	task='python3 -c \"print(6*7)\"'
else
	task='echo $((6*7))'
fi
code=
if curl -fsS -H "X-EXECD-ACCESS-TOKEN: $TOKEN" "http://127.0.0.1:$p/code/languages" 2>/dev/null |
	grep -q '"python"'; then
	code="  curl -sN -H 'X-EXECD-ACCESS-TOKEN: $TOKEN' -d '{\"context\":{\"language\":\"python\"},\"code\":\"import numpy; numpy.arange(4).sum()\"}' http://127.0.0.1:$p/code"
fi

cat <<EOF
forceai-runner is running in container '$NAME' ($IMAGE${IMAGE_ABOUT:+ $IMAGE_ABOUT})
  endpoint: http://127.0.0.1:$p
  token:    $TOKEN
run a task:
  curl -sN -H 'X-EXECD-ACCESS-TOKEN: $TOKEN' -d '{"command":"id"}' http://127.0.0.1:$p/command
  curl -sN -H 'X-EXECD-ACCESS-TOKEN: $TOKEN' -d '{"task":"$task"}' http://127.0.0.1:$p/v1/tasks
${code:+$code
}stop it (it holds 127.0.0.1:$p; the README's host runner needs the port or another one):
  $ENGINE stop $NAME && $ENGINE rm $NAME
other images (image/README.md, Tags): make run IMAGE_RUN_TAG=latest (the minimal one: the
  runner and busybox, no python3), IMAGE_RUN_TAG=code (code contexts: IPython, numpy, pandas,
  matplotlib), or IMAGE_RUN_TAG=opensandbox-execd (the OpenSandbox drop-in)
EOF
