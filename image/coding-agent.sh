#!/bin/sh
# coding-agent.sh - build forceai/runtime-runner:coding-agent offline: the runner image on a
# Debian 12 base with Node.js (debootstrap, image/base-python.sh with INCLUDE), then the
# coding-agent CLIs from npm (image/coding-agent/package-lock.json) on top.
#
# Usage: image/coding-agent.sh          (run as root, after `make static`; `make image-coding-agent`)
# Env:   AGENT=codex|claude-code|all (default codex: one CLI keeps the image small)
#        ENGINE=podman|docker  IMAGE=forceai/runtime-runner  TAG=coding-agent
#        NODE_BASE=localhost/forceai-base-node:bookworm  BUILD_FLAGS=(engine build flags)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/.." && pwd)
cd "$top"
AGENT=${AGENT:-codex}
ENGINE=${ENGINE:-podman}
IMAGE=${IMAGE:-forceai/runtime-runner}
TAG=${TAG:-coding-agent}
NODE_BASE=${NODE_BASE:-localhost/forceai-base-node:bookworm}
BUILD_FLAGS=${BUILD_FLAGS:---network none}
log() { printf 'coding-agent: %s\n' "$*" >&2; }

case $AGENT in
codex) keep="@openai"; engines="codex=/opt/forceai-agents/node_modules/@openai/codex/bin/codex.js" ;;
claude-code) keep="@anthropic-ai"; engines="claude-code=/opt/forceai-agents/node_modules/@anthropic-ai/claude-code/bin/claude.exe" ;;
all) keep="@openai @anthropic-ai"
     engines="codex=/opt/forceai-agents/node_modules/@openai/codex/bin/codex.js,claude-code=/opt/forceai-agents/node_modules/@anthropic-ai/claude-code/bin/claude.exe" ;;
*) log "AGENT must be codex, claude-code or all"; exit 2 ;;
esac

[ -x build/static/forceai-runner ] || { log "build/static/forceai-runner missing: make static"; exit 1; }
image/stage-rootfs.sh build/image-rootfs
# 1. Debian 12 + python3 + Node.js, from the Debian mirror (cached tarball)
ENGINE=$ENGINE CACHE_DIR=build/image-base-node INCLUDE=python3,nodejs,ca-certificates,git \
	image/base-python.sh "$NODE_BASE"
# 2. the runner on it (the runner's own Containerfile, BASE=)
"$ENGINE" build $BUILD_FLAGS --build-arg BASE="$NODE_BASE" -f Containerfile -t "$IMAGE:node" .
# 3. the CLIs, installed here from the lockfile (npm's cache makes a rebuild offline); only
#    the chosen CLI(s) go into build/image-agent, which the Containerfile copies
npmdir=build/image-agent-npm
mkdir -p "$npmdir"
if ! cmp -s image/coding-agent/package-lock.json "$npmdir/package-lock.json" ||
   [ ! -d "$npmdir/node_modules" ]; then
	log "npm ci in $npmdir"
	rm -rf "$npmdir/node_modules"
	cp image/coding-agent/package.json image/coding-agent/package-lock.json "$npmdir/"
	(cd "$npmdir" && npm ci --no-audit --no-fund --prefer-offline >&2)
fi
rm -rf build/image-agent
mkdir -p build/image-agent/node_modules
for scope in $keep; do
	cp -a "$npmdir/node_modules/$scope" build/image-agent/node_modules/
done
"$ENGINE" build $BUILD_FLAGS --build-arg BASE="$IMAGE:node" --build-arg AGENT_ENGINES="$engines" \
	-f image/coding-agent/Containerfile -t "$IMAGE:$TAG" .
"$ENGINE" image inspect --format '{{.Size}}' "$IMAGE:$TAG" |
	awk -v n="$IMAGE:$TAG" '{ printf "image: %s %d bytes (%.0f MiB)\n", n, $1, $1 / 1048576 }'
