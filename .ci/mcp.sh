#!/usr/bin/env bash
# CI steps for the nested MCP module (github.com/ctoken/ctoken/mcp). The CLI
# (cmd/ctoken) is in the root module and already covered by the root's
# "go test -race ./...". Called from .ci/run; runs from any directory.
set -euo pipefail
cd "$(dirname "$0")/../mcp"

echo "--- mcp module: build, vet, test -race (includes the example server's demo test)"
go build ./...
go vet ./...
go test -race -count=1 ./...

if command -v staticcheck >/dev/null; then
  echo "--- staticcheck (mcp module)"
  staticcheck ./...
fi
