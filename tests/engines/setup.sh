#!/bin/sh
# The pinned coding-agent CLIs (package-lock.json: @openai/codex, @anthropic-ai/claude-code),
# installed by tests/lib/npm-cache.sh. Prints the directory of their executables.
set -eu
here=$(CDPATH= cd -- "$(dirname -- "$0")" && pwd)
modules=$("$here/../lib/npm-cache.sh" "$here" engines)
echo "$modules/.bin"
