#!/usr/bin/env bash
# .ci/pg.sh — the pgstore module's tests against real PostgreSQL servers.
#
#   .ci/pg.sh          # go test -race: the contract kits (two instances
#                      # on one table), and the faults (crash mid-load, killed
#                      # backend, lost replies, paused server, standbys (also
#                      # one stopped after New, or away with its slot), settings
#                      # weakened after New (refused within ~1 s), key layout 1
#                      # upgraded by Migrate, a logical replica switched
#                      # to, New behind PgBouncer, and a
#                      # 64-client load with a server restart, 10 s; the
#                      # Recorder's contract, and effects once through the
#                      # transactional middlewares while the server is
#                      # SIGKILLed and restarted)
#   .ci/pg.sh load     # the load test alone, without -race, so that its
#                      # throughput and latency figures mean something
#   .ci/pg.sh install  # install PostgreSQL when missing, and nothing else
#
# The tests start and stop their own servers: TestMain runs initdb once and
# starts a shared server, and the fault tests start servers of their own;
# each listens on 127.0.0.1 on a free port (no Unix socket), lives in a
# temporary directory, and is stopped by PID. Under root they run as the
# "postgres" user (PostgreSQL refuses to run as root). This script only
# makes sure the binaries exist: it installs Debian's postgresql and
# pgbouncer packages with apt-get when no /usr/lib/postgresql/*/bin/postgres
# (or CTOKEN_PG_BIN) or no pgbouncer is found. It runs with CI=true: a
# missing server fails, never skips.
#
# CTOKEN_PG_LOAD_DURATION (Go duration, default 10s) sizes the load test; a
# soak is e.g.  CTOKEN_PG_LOAD_DURATION=15m .ci/pg.sh load
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export CI=true

what="${1:-all}"
case "$what" in
all | load | install) ;;
*)
	echo "usage: $0 [all|load|install]" >&2
	exit 2
	;;
esac

have_pg() {
	if [ -n "${CTOKEN_PG_BIN:-}" ]; then
		[ -x "$CTOKEN_PG_BIN/postgres" ]
		return
	fi
	compgen -G '/usr/lib/postgresql/*/bin/postgres' >/dev/null || command -v postgres >/dev/null 2>&1
}
have_pgbouncer() {
	command -v pgbouncer >/dev/null 2>&1 || [ -x /usr/sbin/pgbouncer ]
}
if ! have_pg || ! have_pgbouncer; then
	sudo=""
	if [ "$(id -u)" != 0 ] && command -v sudo >/dev/null 2>&1; then sudo="sudo"; fi
	echo "pg.sh: installing postgresql and pgbouncer" >&2
	$sudo apt-get update -qq
	# The packages may start a cluster (5432) and a pooler (6432) of their
	# own; the tests never use them.
	DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq postgresql pgbouncer >/dev/null
fi

if [ "$what" = install ]; then exit 0; fi

cd "$root/pgstore"
# A hang bound, as redis.sh's and sqlite.sh's driver suite have: the suite
# takes 230-270 s here alone and went past 600 s at load 20-38.
timeout=1200s
if [ -n "${CTOKEN_PG_LOAD_DURATION:-}" ]; then timeout=0; fi # bounded by the duration itself
if [ "$what" = load ]; then
	go test -count=1 -timeout "$timeout" -v -run '^TestLoad$/^server_restart_loses_nothing$' . | grep -Ev '^=== (RUN|PAUSE|CONT)'
	exit
fi
go test -race -count=1 -timeout "$timeout" .
