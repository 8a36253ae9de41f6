#!/usr/bin/env bash
# CI steps for the nested OpenTelemetry adapter module
# (github.com/ctoken/ctoken/otel). Called from .ci/run; runs from any
# directory.
set -euo pipefail
cd "$(dirname "$0")/../otel"

echo "--- otel module: build, vet, test -race (exact counts through the SDK's ManualReader)"
go build ./...
# CTOKEN_LINTED_ELSEWHERE=1 (.ci/run): go vet and staticcheck run on
# every module there.
[ -n "${CTOKEN_LINTED_ELSEWHERE:-}" ] || go vet ./...
go test -race -count=1 ./...

if [ -z "${CTOKEN_LINTED_ELSEWHERE:-}" ] && command -v staticcheck >/dev/null; then
  echo "--- staticcheck (otel module)"
  staticcheck ./...
fi
