#!/usr/bin/env bash
# CI steps for the nested MCP module (github.com/ctoken/ctoken/mcp). The CLI
# (cmd/ctoken) is in the root module and already covered by the root's
# "go test -race ./...". Called from .ci/run; runs from any directory.
set -euo pipefail
cd "$(dirname "$0")/../mcp"

echo "--- mcp module: build, vet, test -race (includes the example server's demo test)"
go build ./...
# CTOKEN_LINTED_ELSEWHERE=1 (.ci/run): go vet and staticcheck run on
# every module there.
[ -n "${CTOKEN_LINTED_ELSEWHERE:-}" ] || go vet ./...
go test -race -count=1 ./...

if [ -z "${CTOKEN_LINTED_ELSEWHERE:-}" ] && command -v staticcheck >/dev/null; then
  echo "--- staticcheck (mcp module)"
  staticcheck ./...
fi
