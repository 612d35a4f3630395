#!/bin/sh
# The pinned MCP test clients (package-lock.json: the official TypeScript SDK, the conformance
# suite, a stdio MCP server, Node.js 22), installed by tests/lib/npm-cache.sh and linked here as
# node_modules. Prints the path of the Node.js 22 binary.
set -eu
here=$(CDPATH= cd -- "$(dirname -- "$0")" && pwd)
modules=$("$here/../lib/npm-cache.sh" "$here" mcp)
ln -sfn "$modules" "$here/node_modules"
echo "$modules/.bin/node"
