#!/usr/bin/env bash
# .ci/redis-cluster.sh — run a command with a throwaway 3-master Redis Cluster
# on loopback.
#
#   .ci/redis-cluster.sh [command [args...]]
#
# Installs redis-server and redis-tools (redis-cli) with apt-get only when
# either is missing, starts three redis-server processes in cluster mode on
# free 127.0.0.1 ports, joins them with
#   redis-cli --cluster create ... --cluster-replicas 0 --cluster-yes
# (16384 slots over 3 masters, no replicas), waits until every node reports
# cluster_state:ok, exports
#   CTOKEN_REDIS_CLUSTER=127.0.0.1:<p1>,127.0.0.1:<p2>,127.0.0.1:<p3>
#   CTOKEN_REDIS_CLUSTER_DIR=<dir>    node-<port>/redis.conf for each node
#                                     (the fault tests restart a master
#                                     with `redis-server <conf>`; it writes
#                                     its pid to node-<port>/redis.pid)
#   CTOKEN_REDIS_CLI=<path>           redis-cli
# runs the command (default: the redisstore cluster fault tests), and always
# stops every node and removes its files on exit. The nodes persist with
# appendonly yes / appendfsync always, so a restarted master keeps every
# claim it acknowledged (TestCluster/restart, then the runbook restarts
# masters without persistence and turns AOF on again after). The script's
# exit status is the command's.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

if ! command -v redis-server >/dev/null 2>&1 || ! command -v redis-cli >/dev/null 2>&1; then
	sudo=""
	if [ "$(id -u)" != 0 ] && command -v sudo >/dev/null 2>&1; then sudo="sudo"; fi
	echo "redis-cluster.sh: installing redis-server and redis-tools" >&2
	$sudo apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq redis-server redis-tools >/dev/null
fi
server="$(command -v redis-server)"
cli="$(command -v redis-cli)"

dir="$(mktemp -d)"
ports=()
stop() {
	# Read every pid first: a node stopped cleanly removes its pidfile as it
	# exits, so the file may be gone by the time the second pass looks.
	local pids=() p pidfile pid
	for p in "${ports[@]}"; do
		pidfile="$dir/node-$p/redis.pid"
		pid="$(cat "$pidfile" 2>/dev/null)" || continue
		[ -n "$pid" ] && pids+=("$pid")
	done
	for pid in "${pids[@]}"; do
		kill -CONT "$pid" 2>/dev/null || true # a test may have paused it
		kill "$pid" 2>/dev/null || true
	done
	for pid in "${pids[@]}"; do
		for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
		kill -9 "$pid" 2>/dev/null || true
	done
	rm -rf "$dir"
}
trap stop EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Is something already listening on 127.0.0.1:$1?
in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# Does a Redis on 127.0.0.1:$1 answer PING?
pong() { [ "$("$cli" -h 127.0.0.1 -p "$1" ping 2>/dev/null)" = PONG ]; }

# start_node PORT: write the node's config and start it; 0 when it answers.
start_node() {
	local p="$1" nd="$dir/node-$1"
	mkdir -p "$nd"
	cat >"$nd/redis.conf" <<EOF
bind 127.0.0.1
port $p
protected-mode yes
daemonize yes
pidfile $nd/redis.pid
logfile $nd/redis.log
dir $nd
cluster-enabled yes
cluster-config-file nodes.conf
cluster-node-timeout 3000
save ""
appendonly yes
appendfsync always
EOF
	"$server" "$nd/redis.conf" >/dev/null 2>&1 || return 1
	for _ in $(seq 50); do
		pong "$p" && return 0
		sleep 0.1
	done
	[ -s "$nd/redis.pid" ] && kill "$(cat "$nd/redis.pid")" 2>/dev/null || true
	return 1
}

# Three nodes; the cluster bus listens on port+10000, so both must be free,
# and both below the kernel's ephemeral range: the tests restart nodes on
# their ports, and a port in that range can be taken meanwhile by any
# outgoing connection (the tests' own clients open hundreds), which makes
# the restarted node fail to bind.
ephemeral_low=32768
if [ -r /proc/sys/net/ipv4/ip_local_port_range ]; then
	read -r ephemeral_low _ </proc/sys/net/ipv4/ip_local_port_range
fi
span=$((ephemeral_low - 10000 - 20000))
if [ "$span" -lt 1000 ]; then
	echo "redis-cluster.sh: the ephemeral port range begins at $ephemeral_low; nodes need ports below $((ephemeral_low - 10000)) from 20000 on" >&2
	exit 1
fi
# CTOKEN_PORT_CLASS=k/n: see .ci/portclass.sh.
. "$root/.ci/portclass.sh"
for _ in $(seq 60); do
	[ "${#ports[@]}" -eq 3 ] && break
	p=$((20000 + RANDOM % (span - of)))
	p=$((p - p % of + class))
	in_use "$p" && continue
	in_use $((p + 10000)) && continue
	for q in "${ports[@]}"; do [ "$q" = "$p" ] && continue 2; done
	if start_node "$p"; then
		ports+=("$p")
	else
		rm -rf "${dir:?}/node-$p"
	fi
done
if [ "${#ports[@]}" -ne 3 ]; then
	echo "redis-cluster.sh: could not start three redis-server nodes on loopback" >&2
	for f in "$dir"/node-*/redis.log; do [ -f "$f" ] && tail -5 "$f" >&2; done
	exit 1
fi

addrs=()
for p in "${ports[@]}"; do addrs+=("127.0.0.1:$p"); done
if ! "$cli" --cluster create "${addrs[@]}" --cluster-replicas 0 --cluster-yes >"$dir/create.log" 2>&1; then
	echo "redis-cluster.sh: redis-cli --cluster create failed" >&2
	cat "$dir/create.log" >&2
	exit 1
fi
for p in "${ports[@]}"; do
	ok=""
	for _ in $(seq 100); do
		if "$cli" -h 127.0.0.1 -p "$p" cluster info 2>/dev/null | grep -q '^cluster_state:ok'; then
			ok=1
			break
		fi
		sleep 0.1
	done
	if [ -z "$ok" ]; then
		echo "redis-cluster.sh: node $p never reported cluster_state:ok" >&2
		exit 1
	fi
done

CTOKEN_REDIS_CLUSTER="$(
	IFS=,
	echo "${addrs[*]}"
)"
export CTOKEN_REDIS_CLUSTER
export CTOKEN_REDIS_CLUSTER_DIR="$dir"
export CTOKEN_REDIS_CLI="$cli"
export CTOKEN_REDIS_SERVER="${CTOKEN_REDIS_SERVER:-$server}"
echo "redis-cluster.sh: 3-master cluster (redis $("$server" --version | awk '{print $3}')) on $CTOKEN_REDIS_CLUSTER" >&2

if [ $# -eq 0 ]; then
	set -- sh -c "cd '$root/redisstore' && go test -tags fault -count=1 -timeout 600s -run '^TestCluster' -v ."
fi
set +e
"$@"
status=$?
set -e
exit "$status"
