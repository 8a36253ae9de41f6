#!/usr/bin/env bash
# .ci/fleet.sh — the fleet fault tests: redisstore's files with the build tag
# "fault" (redisstore/*_fault_test.go), against real redis-server processes
# on 127.0.0.1 that the tests and .ci/redis-cluster.sh start and stop.
#
#   .ci/fleet.sh            # vet, then the tests: faults (with -race)
#                           # beside failures, then load (30 s)
#   .ci/fleet.sh vet        # go vet and staticcheck with -tags fault
#   .ci/fleet.sh tests      # the tests alone (.ci/run: vet runs after
#                           # staticcheck is installed)
#   .ci/fleet.sh faults     # Redis Cluster (slot migration, master restart,
#                           # eviction then CONFIG RESETSTAT on one master
#                           # and on every one, and after a burst then
#                           # idleness, restart without persistence
#                           # of one master and of every one, then the
#                           # runbook), restart with and without
#                           # persistence, pause
#                           # (SIGSTOP), an instance killed mid-flight;
#                           # the burst subtest on a Cluster of its own,
#                           # without -race, beside the rest (below)
#   .ci/fleet.sh failures   # store failures under load (issue 26,
#                           # docs/faults.md): failover to a lagging replica
#                           # by hand, by redis-sentinel and in a Cluster with
#                           # replicas; restart without persistence and
#                           # FLUSHALL (the fence); instance clocks 2 min off;
#                           # Idempotency-Key exactly once through a failover,
#                           # a SIGKILL and a panicking handler (issue 36);
#                           # eviction switched on at run time (every
#                           # policy), SWAPDB, FLUSHALL, CONFIG RESETSTAT, and
#                           # a Sentinel failover to weaker persistence
#                           # (issue 46); CONFIG RESETSTAT after a burst then
#                           # idleness (issue 66).
#                           # ~60 s; without -race, so the logged throughput
#                           # ratios mean something. With
#                           # CTOKEN_FLEET_VALKEY_ALONGSIDE=1, the Valkey
#                           # leg (below) runs side by side.
#   .ci/fleet.sh load       # the sustained-load test alone
#   .ci/fleet.sh install    # install what is missing (below), and nothing else
#
# CTOKEN_LOAD_DURATION (Go duration, default 30s) and CTOKEN_LOAD_CLIENTS
# (default 64) size the load test; a soak is e.g.
#   CTOKEN_LOAD_DURATION=15m .ci/fleet.sh load
# The load test runs without -race so that its throughput and latency
# figures (logged per operation) mean something.
#
# Installs redis-server, redis-tools and redis-sentinel with apt-get when
# missing. Runs with CI=true: a missing Redis fails, never skips.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
export CI=true

what="${1:-all}"
case "$what" in
all | vet | tests | faults | failures | load | install) ;;
*)
	echo "usage: $0 [all|vet|tests|faults|failures|load|install]" >&2
	exit 2
	;;
esac
# want MODE...: is this run one of MODE?
want() {
	local m
	for m; do [ "$what" = "$m" ] && return 0; done
	return 1
}

missing=()
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
command -v redis-cli >/dev/null 2>&1 || missing+=(redis-tools)
command -v redis-sentinel >/dev/null 2>&1 || missing+=(redis-sentinel)
if [ "${#missing[@]}" -gt 0 ]; then
	sudo=""
	if [ "$(id -u)" != 0 ] && command -v sudo >/dev/null 2>&1; then sudo="sudo"; fi
	echo "fleet.sh: installing ${missing[*]}" >&2
	$sudo apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi
if [ "$what" = install ]; then exit 0; fi

# CTOKEN_REDIS_FLAVOR=valkey: the tests start valkey-server (Valkey 8 from
# bookworm-backports, installed when missing) instead of redis-server. Only
# "failures" runs then; the Cluster and load suites run on Redis only. The
# CI image has no valkey-sentinel: issue 46's Sentinel test runs
# valkey-server --sentinel through a wrapper (the older Sentinel test stays
# Redis-only).
if [ "${CTOKEN_REDIS_FLAVOR:-redis}" = valkey ]; then
	if [ "$what" != failures ]; then
		echo "fleet.sh: with CTOKEN_REDIS_FLAVOR=valkey only 'failures' runs" >&2
		exit 2
	fi
	if ! command -v valkey-server >/dev/null 2>&1; then
		sudo=""
		if [ "$(id -u)" != 0 ] && command -v sudo >/dev/null 2>&1; then sudo="sudo"; fi
		echo "fleet.sh: installing valkey-server from bookworm-backports" >&2
		. "$root/.ci/backports.sh"
		ensure_backports
		$sudo apt-get update -qq
		DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq -t bookworm-backports valkey-server >/dev/null
	fi
	export CTOKEN_REDIS_SERVER="$(command -v valkey-server)"
	sentinel_dir="$(mktemp -d)"
	trap 'rm -rf "$sentinel_dir"' EXIT
	printf '#!/bin/sh\nexec "%s" "$@" --sentinel\n' "$CTOKEN_REDIS_SERVER" >"$sentinel_dir/valkey-sentinel"
	chmod +x "$sentinel_dir/valkey-sentinel"
	export CTOKEN_REDIS_SENTINEL="$sentinel_dir/valkey-sentinel"
	echo "--- store failures under load against $("$CTOKEN_REDIS_SERVER" --version | awk '{print $1, $3}')"
	(cd redisstore && go test -tags fault -count=1 -timeout 900s -v \
		-run '^(TestFailoverToLaggingReplica|TestStoreThatForgets|TestLaggingInstanceClock|TestEvictionAtRunTime|TestEvictionWhileIdle|TestLossTheServerReports|TestSentinelFailoverToNewPersistence)' .)
	echo "--- fleet fault tests passed (valkey)"
	exit 0
fi

if want all vet; then
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

# The fault tests run in two lanes, each on a Cluster of its own, side by
# side with each other and (all, tests) with the store failures: every
# test and subtest under -race on one, and TestCluster's "burst then idle
# then CONFIG RESETSTAT" without -race on the other (as
# TestResetStatAfterABurst runs in "failures"). Its bursts of 20 000
# claims one at a time are most of TestCluster's time beside CPU-bound
# processes, and each claim waits on the scheduler more than on the CPU.
# The suites share no server, port (CTOKEN_PORT_CLASS: 0/8 for the
# failures on Redis and the load test, 1/8 for the failures on Valkey,
# 2/8 and 3/8 for the fault lanes, whatever the caller's; whatever runs
# beside this script takes another class of 8) or directory; each lane's
# log is printed whole once it has ended.
fault_pids=() fault_logs=()
if want all tests faults; then
	echo "--- fault tests (-race): cluster, restarts, pause, killed instance; beside them, on a Cluster of its own, TestCluster's burst subtest without -race"
	fault_logs=("$(mktemp)" "$(mktemp)")
	CTOKEN_PORT_CLASS=2/8 bash .ci/redis-cluster.sh sh -c "cd '$root/redisstore' && go test -tags fault -race -count=1 -timeout 900s -v \
		-run '^(TestCluster|TestRestart|TestRollback|TestPaused|TestKilled|TestFaultChild)' \
		-skip '^TestCluster\$/^burst_then_idle_then_CONFIG_RESETSTAT\$' ." >"${fault_logs[0]}" 2>&1 &
	fault_pids+=($!)
	CTOKEN_PORT_CLASS=3/8 bash .ci/redis-cluster.sh sh -c "cd '$root/redisstore' && CTOKEN_RESETSTAT_RUNS='${CTOKEN_RESETSTAT_RUNS:-1}' go test -tags fault -count=1 -timeout 900s -v \
		-run '^TestCluster\$/^burst_then_idle_then_CONFIG_RESETSTAT\$' ." >"${fault_logs[1]}" 2>&1 &
	fault_pids+=($!)
fi
# wait_faults waits for the fault lanes and prints their logs; it fails
# when either failed.
wait_faults() {
	local i st=0
	for i in "${!fault_pids[@]}"; do
		wait "${fault_pids[$i]}" || st=1
	done
	for i in "${!fault_logs[@]}"; do
		cat "${fault_logs[$i]}"
		rm -f "${fault_logs[$i]}"
	done
	fault_pids=() fault_logs=()
	if [ "$st" != 0 ]; then
		echo "fleet.sh: a fault lane failed (above)" >&2
		return 1
	fi
}

if want all tests failures; then
	# CTOKEN_FLEET_VALKEY_ALONGSIDE=1 (.ci/run): the Valkey leg of these
	# failures (CTOKEN_REDIS_FLAVOR=valkey) runs side by side with them.
	# Both mostly wait (failovers, Sentinel's down-after, restarts): a
	# failover test here uses under half a core. They share no server, port
	# (0/8 here, 1/8 for Valkey: above) or directory.
	valkey_pid=""
	if [ -n "${CTOKEN_FLEET_VALKEY_ALONGSIDE:-}" ]; then
		valkey_log="$(mktemp)"
		CTOKEN_PORT_CLASS=1/8 CTOKEN_REDIS_FLAVOR=valkey bash "$root/.ci/fleet.sh" failures >"$valkey_log" 2>&1 &
		valkey_pid=$!
	fi
	echo "--- store failures under load (issue 26, docs/faults.md; the tests start their own redis-server, replicas, redis-sentinel and Cluster)"
	# TestAOFSwitchedOffThenCrash runs on redis-server and on valkey-server
	# when installed (so not again under CTOKEN_REDIS_FLAVOR=valkey): 8
	# runs where WAITAOF closes the window (the race's order is forced in
	# TestDurability/AOF probe failing after a fresh read), one where it only measures Redis 7.0's
	# window (docs/fleet-reference.md has the 30-run figures; the defaults are 30 and 5).
	# TestResetStatAfterABurst (issue 66) likewise runs on redis-server and
	# valkey-server: one pass of its runs here (CTOKEN_RESETSTAT_RUNS; the
	# 30-pass figures are in docs/fleet-reference.md).
	status=0
	(cd redisstore && CTOKEN_PORT_CLASS=0/8 CTOKEN_AOF_RUNS="${CTOKEN_AOF_RUNS:-8}" CTOKEN_AOF_WINDOW_RUNS="${CTOKEN_AOF_WINDOW_RUNS:-1}" \
		CTOKEN_RESETSTAT_RUNS="${CTOKEN_RESETSTAT_RUNS:-1}" \
		go test -tags fault -count=1 -timeout 900s -v \
		-run '^(TestFailoverToLaggingReplica|TestSentinelFailover|TestReplicaClusterTakeover|TestStoreThatForgets|TestLaggingInstanceClock|TestIdempotencyExactlyOnce|TestEvictionAtRunTime|TestEvictionWhileIdle|TestLossTheServerReports|TestAOFSwitchedOffThenCrash|TestResetStatAfterABurst)' .) || status=$?
	if [ -n "$valkey_pid" ]; then
		valkey_status=0
		wait "$valkey_pid" || valkey_status=$?
		cat "$valkey_log"
		rm -f "$valkey_log"
		if [ "$valkey_status" != 0 ]; then
			echo "fleet.sh: the Valkey leg of the store failures failed (above)" >&2
			status=1
		fi
	fi
	if [ "$status" != 0 ]; then
		if [ "${#fault_pids[@]}" -gt 0 ]; then wait_faults || true; fi
		exit "$status"
	fi
fi
if [ "${#fault_pids[@]}" -gt 0 ]; then wait_faults; fi

if want all tests load; then
	timeout=180s
	if [ -n "${CTOKEN_LOAD_DURATION:-}" ]; then timeout=0; fi # bounded by the duration itself
	echo "--- sustained load: ${CTOKEN_LOAD_CLIENTS:-64} clients for ${CTOKEN_LOAD_DURATION:-30s} (the test starts its own redis-server)"
	(cd redisstore && CTOKEN_PORT_CLASS=0/8 go test -tags fault -count=1 -timeout "$timeout" -v -run '^TestSustainedLoadLosesNothing$' .)
fi
echo "--- fleet fault tests passed"
