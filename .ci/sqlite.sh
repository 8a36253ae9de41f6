#!/usr/bin/env bash
# .ci/sqlite.sh — the sqlitestore module's tests, its command's
# (sqlitestore/cmd/ctoken-sqlite), and its driver suite on
# each SQLite driver: modernc.org/sqlite (default build), ncruces/go-sqlite3
# (-tags ncruces) and mattn/go-sqlite3 (-tags mattn, cgo). One driver per
# test binary: ncruces and mattn both register "sqlite3" with database/sql.
# Everything runs in temporary directories (and, for the disk-full test, a
# tmpfs it mounts and unmounts when run as root).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export CI=true CGO_ENABLED=1

# The sqlite3 shell: the loss tests run what an operator runs after a
# crash (integrity_check, VACUUM, .backup) with it.
if ! command -v sqlite3 >/dev/null 2>&1; then
	sudo=""
	if [ "$(id -u)" != 0 ] && command -v sudo >/dev/null 2>&1; then sudo="sudo"; fi
	$sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq sqlite3 >/dev/null
fi

echo "--- [${SECONDS}s] sqlitestore: go test -race (no driver)"
(cd "$root/sqlitestore" && go test -race -count=1 -timeout 900s ./...)

echo "--- [${SECONDS}s] sqlitestore/cmd/ctoken-sqlite (its own module, on modernc): go test -race"
(cd "$root/sqlitestore/cmd/ctoken-sqlite" && go test -race -count=1 -timeout 900s ./...)

# The three drivers run side by side (each its own test binary, temporary
# files and processes): 52 s here against 127 s one after the other. Each
# one's output is printed whole once all have ended; any failure fails
# the step.
logs="$(mktemp -d)"
trap 'rm -rf "$logs"' EXIT
echo "--- [${SECONDS}s] sqlitestore/drivertest on modernc, ncruces and mattn, side by side: go vet, go test -race"
tags=(modernc ncruces mattn)
pids=()
for tag in "${tags[@]}"; do
	(cd "$root/sqlitestore/drivertest" && go vet -tags "$tag" ./... && go test -race -tags "$tag" -count=1 -timeout 1200s ./...) >"$logs/$tag" 2>&1 &
	pids+=($!)
done
failed=0
for i in "${!tags[@]}"; do
	if ! wait "${pids[$i]}"; then failed=1; fi
	echo "--- sqlitestore/drivertest on ${tags[$i]}"
	cat "$logs/${tags[$i]}"
done
if [ "$failed" != 0 ]; then
	echo "sqlite.sh: the driver suite failed (see above)" >&2
	exit 1
fi

echo "--- [${SECONDS}s] sqlitestore/drivertest benchmarks, one iteration each (a smoke test: nothing is timed)"
(cd "$root/sqlitestore/drivertest" && go test -run '^$' -bench . -benchtime 1x -count=1 ./... >/dev/null)
