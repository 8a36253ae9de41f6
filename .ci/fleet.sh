#!/usr/bin/env bash
# .ci/fleet.sh — the fleet fault tests: redisstore's files with the build tag
# "fault" (redisstore/fault_*_test.go), against real redis-server processes
# on 127.0.0.1 that the tests and .ci/redis-cluster.sh start and stop.
#
#   .ci/fleet.sh          # vet, then faults (with -race), then load (30 s)
#   .ci/fleet.sh faults   # Redis Cluster (slot migration, master restart),
#                         # restart with and without persistence, pause
#                         # (SIGSTOP), an instance killed mid-flight
#   .ci/fleet.sh load     # the sustained-load test alone
#
# CTOKEN_LOAD_DURATION (Go duration, default 30s) and CTOKEN_LOAD_CLIENTS
# (default 64) size the load test; a soak is e.g.
#   CTOKEN_LOAD_DURATION=15m .ci/fleet.sh load
# The load test runs without -race so that its throughput and latency
# figures (logged per operation) mean something.
#
# Installs redis-server and redis-tools with apt-get when missing (the
# cluster through .ci/redis-cluster.sh). Runs with CI=true: a missing Redis
# fails, never skips.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
export CI=true

what="${1:-all}"
case "$what" in
all | faults | load) ;;
*)
	echo "usage: $0 [all|faults|load]" >&2
	exit 2
	;;
esac

if [ "$what" = all ]; then
	echo "--- go vet -tags fault (redisstore)"
	(cd redisstore && go vet -tags fault ./...)
	sc="$(go env GOPATH)/bin/staticcheck"
	if [ -x "$sc" ]; then
		echo "--- staticcheck -tags fault (redisstore)"
		(cd redisstore && "$sc" -tags fault ./...)
	else
		echo "--- staticcheck not installed: .ci/fuzz.sh staticcheck installs it" >&2
	fi
fi

if [ "$what" != load ]; then
	echo "--- fault tests (-race): cluster, restarts, pause, killed instance"
	bash .ci/redis-cluster.sh sh -c "cd '$root/redisstore' && go test -tags fault -race -count=1 -timeout 300s -v \
		-run '^(TestCluster|TestRestart|TestPaused|TestKilled|TestFaultChild)' ."
fi

if [ "$what" != faults ]; then
	if ! command -v redis-server >/dev/null 2>&1; then
		sudo=""
		if [ "$(id -u)" != 0 ] && command -v sudo >/dev/null 2>&1; then sudo="sudo"; fi
		echo "fleet.sh: installing redis-server" >&2
		$sudo apt-get update -qq
		DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq redis-server >/dev/null
	fi
	timeout=180s
	if [ -n "${CTOKEN_LOAD_DURATION:-}" ]; then timeout=0; fi # bounded by the duration itself
	echo "--- sustained load: ${CTOKEN_LOAD_CLIENTS:-64} clients for ${CTOKEN_LOAD_DURATION:-30s} (the test starts its own redis-server)"
	(cd redisstore && go test -tags fault -count=1 -timeout "$timeout" -v -run '^TestSustainedLoadLosesNothing$' .)
fi
echo "--- fleet fault tests passed"
