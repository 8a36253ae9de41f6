#!/bin/sh
# Runs the peer comparison (this module) and the root package's benchmarks,
# and prints the machine and markdown tables of medians. COUNT (default 5)
# and BENCHTIME (default 1s) tune the runs; ROOT=0 skips the root package.
# Raw `go test` output is kept in bench.out and root.out next to this script.
set -eu
cd "$(dirname "$0")"
count=${COUNT:-5}
benchtime=${BENCHTIME:-1s}
go test -run '^$' -bench '^BenchmarkCursor$' -count "$count" -benchtime "$benchtime" . > bench.out
if [ "${ROOT:-1}" != 0 ]; then
  (cd .. && go test -run '^$' -bench . -count "$count" -benchtime "$benchtime" .) > root.out
fi
echo "Machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), $(go version | cut -d' ' -f3-)"
echo "Command: (cd bench && COUNT=$count BENCHTIME=$benchtime ./run.sh)"
echo
echo "### One logical cursor, issue and verify (medians of $count runs)"
echo
go run ./cmd/table < bench.out
if [ "${ROOT:-1}" != 0 ]; then
  echo
  echo "### Root package benchmarks (medians of $count runs)"
  echo
  go run ./cmd/table -all < root.out
fi
