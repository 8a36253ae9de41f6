#!/usr/bin/env bash
# .ci/server-suites.sh — the suites against real servers that mostly wait,
# which .ci/run runs beside its other steps:
#
#   .ci/server-suites.sh           # redisstore's suite against redis-server
#                                  # and against valkey-server 8, and
#                                  # pgstore's, side by side; then the fleet
#                                  # faults (.ci/fleet.sh tests)
#   .ci/server-suites.sh install   # install the servers when missing, and
#                                  # nothing else
#
# The suites mostly wait (fences, leases, restarts, failovers and promotions
# run out in real time; a burst of claims one at a time waits on the
# scheduler): about 25 s of CPU in 90 s for redisstore, 88 s in 193 s for
# pgstore. They use ports of classes 0/8 to 6/8 (CTOKEN_PORT_CLASS:
# .ci/fleet.sh takes 0/8 to 3/8; here Redis 4/8, Valkey 5/8, PostgreSQL
# 6/8), so whatever runs beside this script takes 7/8. The servers are
# installed by "install" beforehand, one after the other (apt-get holds a
# lock), so that this script runs no apt-get beside other steps.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

if [ "${1:-}" = install ]; then
	CI=true bash .ci/redis.sh true
	CI=true CTOKEN_REDIS_FLAVOR=valkey bash .ci/redis.sh true
	bash .ci/pg.sh install
	bash .ci/fleet.sh install
	exit 0
fi

# redisstore on Redis and on Valkey, and pgstore, side by side; each log is
# printed whole once all have ended.
echo "--- [${SECONDS}s] redisstore against a real redis-server and a real valkey-server 8, and pgstore's contract, fleet and fault tests against real postgres servers, side by side (loopback)"
sidelogs=$(mktemp -d)
trap 'rm -rf "$sidelogs"' EXIT
CTOKEN_PORT_CLASS=4/8 CI=true bash .ci/redis.sh >"$sidelogs/redis" 2>&1 &
redispid=$!
CTOKEN_PORT_CLASS=5/8 CI=true CTOKEN_REDIS_FLAVOR=valkey bash .ci/redis.sh >"$sidelogs/valkey" 2>&1 &
valkeypid=$!
CTOKEN_PORT_CLASS=6/8 bash .ci/pg.sh >"$sidelogs/pg" 2>&1 &
pgpid=$!
sidestatus=0
wait "$redispid" || sidestatus=1
wait "$valkeypid" || sidestatus=1
wait "$pgpid" || sidestatus=1
echo "--- redisstore against redis-server"
cat "$sidelogs/redis"
echo "--- redisstore against valkey-server"
cat "$sidelogs/valkey"
echo "--- pgstore"
cat "$sidelogs/pg"
if [ "$sidestatus" != 0 ]; then
	echo "the redisstore or pgstore suite failed (above)" >&2
	exit 1
fi

# The store failures on Valkey run side by side with those on Redis
# (CTOKEN_FLEET_VALKEY_ALONGSIDE: see .ci/fleet.sh).
echo "--- [${SECONDS}s] fleet faults: Redis Cluster, restarts, pause, killed instance, store failures (failover, Sentinel, lost data, clocks) on Redis and, alongside, Valkey, 10 s sustained load (docs/fleet.md, docs/faults.md)"
# Their go vet and staticcheck (.ci/fleet.sh vet) run in .ci/run, once
# staticcheck is installed.
CTOKEN_FLEET_VALKEY_ALONGSIDE=1 CTOKEN_LOAD_DURATION="${CTOKEN_LOAD_DURATION:-10s}" bash .ci/fleet.sh tests
echo "--- [${SECONDS}s] server suites passed"
