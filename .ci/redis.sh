#!/usr/bin/env bash
# .ci/redis.sh — run a command with a throwaway redis-server on loopback.
#
#   .ci/redis.sh [command [args...]]
#
# Installs redis-server with apt-get only when it is missing, starts it on
# 127.0.0.1 on a free port (no persistence), exports
#   CTOKEN_REDIS_ADDR=127.0.0.1:<port>   address of the running server
#   CTOKEN_REDIS_SERVER=<path>           the redis-server binary (the fleet
#                                        test starts and kills its own)
# runs the command (default: the redisstore module's tests with -race), and
# always stops the server and removes its files on exit. The script's exit
# status is the command's.
#
# CTOKEN_REDIS_FLAVOR=valkey runs the same against valkey-server instead
# (installed from Debian's bookworm-backports, Valkey 8, when missing), so
# CTOKEN_REDIS_SERVER is the valkey-server binary.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

sudo=""
if [ "$(id -u)" != 0 ] && command -v sudo >/dev/null 2>&1; then sudo="sudo"; fi
case "${CTOKEN_REDIS_FLAVOR:-redis}" in
redis)
	if ! command -v redis-server >/dev/null 2>&1; then
		echo "redis.sh: installing redis-server" >&2
		$sudo apt-get update -qq
		DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq redis-server >/dev/null
	fi
	server="$(command -v redis-server)"
	;;
valkey)
	if ! command -v valkey-server >/dev/null 2>&1; then
		echo "redis.sh: installing valkey-server from bookworm-backports" >&2
		. "$root/.ci/backports.sh"
		ensure_backports
		$sudo apt-get update -qq
		DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq -t bookworm-backports valkey-server >/dev/null
	fi
	server="$(command -v valkey-server)"
	;;
*)
	echo "redis.sh: CTOKEN_REDIS_FLAVOR must be redis or valkey" >&2
	exit 2
	;;
esac

dir="$(mktemp -d)"
pidfile="$dir/redis.pid"
stop() {
	if [ -s "$pidfile" ]; then
		pid="$(cat "$pidfile")"
		kill "$pid" 2>/dev/null || true
		for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
		kill -9 "$pid" 2>/dev/null || true
	fi
	rm -rf "$dir"
}
trap stop EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Is something already listening on 127.0.0.1:$1?
in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# Does a Redis on 127.0.0.1:$1 answer PING? (No redis-cli needed.)
pong() {
	(
		exec 3<>"/dev/tcp/127.0.0.1/$1" || exit 1
		printf 'PING\r\n' >&3
		IFS= read -r -t 2 reply <&3 || exit 1
		[ "${reply%$'\r'}" = "+PONG" ]
	) 2>/dev/null
}

# CTOKEN_PORT_CLASS=k/n: see .ci/portclass.sh.
. "$root/.ci/portclass.sh"
port=""
for _ in $(seq 20); do
	p=$((20000 + RANDOM % 40000))
	p=$((p - p % of + class))
	in_use "$p" && continue
	rm -f "$pidfile"
	"$server" --bind 127.0.0.1 --port "$p" --save '' --appendonly no \
		--protected-mode yes --daemonize yes --pidfile "$pidfile" \
		--dir "$dir" --logfile "$dir/redis.log" >/dev/null 2>&1 || continue
	for _ in $(seq 50); do
		if pong "$p"; then
			port="$p"
			break
		fi
		sleep 0.1
	done
	[ -n "$port" ] && break
	# Failed to come up (port taken between check and bind?): clean up, retry.
	[ -s "$pidfile" ] && kill "$(cat "$pidfile")" 2>/dev/null || true
done
if [ -z "$port" ]; then
	echo "redis.sh: could not start redis-server on loopback" >&2
	[ -f "$dir/redis.log" ] && tail -20 "$dir/redis.log" >&2
	exit 1
fi

export CTOKEN_REDIS_ADDR="127.0.0.1:$port"
export CTOKEN_REDIS_SERVER="$server"
echo "redis.sh: $(basename "$server") $("$server" --version | awk '{print $3}') on $CTOKEN_REDIS_ADDR" >&2

if [ $# -eq 0 ]; then
	set -- sh -c "cd '$root/redisstore' && go test -race -count=1 -timeout 1200s ./..."
fi
set +e
"$@"
status=$?
set -e
exit "$status"
