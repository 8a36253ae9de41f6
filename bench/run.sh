#!/bin/sh
# Runs the peer comparison and prints the machine and a markdown table of
# medians. COUNT (default 5) and BENCHTIME (default 1s) tune the run; the
# raw `go test` output is kept in bench.out next to this script.
set -eu
cd "$(dirname "$0")"
count=${COUNT:-5}
benchtime=${BENCHTIME:-1s}
go test -run '^$' -bench '^BenchmarkCursor$' -count "$count" -benchtime "$benchtime" . > bench.out
echo "Machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), $(go version | cut -d' ' -f3-)"
echo "Command: (cd bench && COUNT=$count BENCHTIME=$benchtime ./run.sh)"
echo
go run ./cmd/table < bench.out
