#!/usr/bin/env bash
# CI steps for the nested mark3labs/mcp-go module
# (github.com/ctoken/ctoken/mcpgo). Called from .ci/run; runs from any
# directory.
set -euo pipefail
cd "$(dirname "$0")/../mcpgo"

echo "--- mcpgo module: build, vet, test -race (includes the example server's demo test)"
go build ./...
go vet ./...
go test -race -count=1 ./...

if command -v staticcheck >/dev/null; then
  echo "--- staticcheck (mcpgo module)"
  staticcheck ./...
fi
