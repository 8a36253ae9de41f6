#!/usr/bin/env bash
# .ci/sqlite.sh — the sqlitestore module's tests, and its driver suite on
# each SQLite driver: modernc.org/sqlite (default build), ncruces/go-sqlite3
# (-tags ncruces) and mattn/go-sqlite3 (-tags mattn, cgo). One driver per
# test binary: ncruces and mattn both register "sqlite3" with database/sql.
# Everything runs in temporary directories (and, for the disk-full test, a
# tmpfs it mounts and unmounts when run as root).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export CI=true CGO_ENABLED=1

echo "--- [${SECONDS}s] sqlitestore: go test -race (no driver)"
(cd "$root/sqlitestore" && go test -race -count=1 -timeout 300s ./...)

for tag in modernc ncruces mattn; do
	echo "--- [${SECONDS}s] sqlitestore/drivertest on $tag: go test -race"
	(cd "$root/sqlitestore/drivertest" && go vet -tags "$tag" ./... && go test -race -tags "$tag" -count=1 -timeout 600s ./...)
done

echo "--- [${SECONDS}s] sqlitestore/drivertest benchmarks, one iteration each (a smoke test: nothing is timed)"
(cd "$root/sqlitestore/drivertest" && go test -run '^$' -bench . -benchtime 1x -count=1 ./... >/dev/null)
