#!/usr/bin/env bash
# Checks that the peer-comparison module builds and that every benchmark in
# it, and in the root package, runs once. Measures nothing and asserts no
# timing: a smoke test that the benchmarks have not rotted.
set -euo pipefail
cd "$(dirname "$0")/.."

echo "--- root and internal/cursorwire benchmarks, one iteration each"
go test -run '^$' -bench . -benchtime 1x . ./internal/cursorwire

echo "--- bench/: build, vet, tests, benchmarks one iteration each (BenchmarkIdempotency beside a redis-server: .ci/redis.sh)"
(cd bench && go vet ./... && go test -count=1 ./...)
CI=true bash .ci/redis.sh sh -c 'cd bench && go test -run xxx -bench . -benchtime 1x ./...'

