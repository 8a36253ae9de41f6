#!/usr/bin/env bash
# pgstore/testdata/pgbench/run.sh — what a replayed claim's statement costs
# in PostgreSQL, beside its floor (a SELECT by key), without Go in the way
# (docs/benchmarks.md, "Claims beside their floors, third round").
#
#   run.sh HOST PORT USER DB   # a scratch database: setup.sql creates table t
#
# Runs every script in one pgbench run (-M prepared, one client, 6 s), so
# they alternate, and prints each one's median latency (µs) and its ratio
# to floor.sql's, from pgbench's per-transaction log. The scripts hold the
# statements of pgstore/claim.go with the key of a live row as literals:
# claim.sql (the claim statement), claim-without-marker.sql (the variant
# that refuses a live row without reading the marker, not kept),
# claim-no-on-conflict and claim-no-returning (claim.sql less a clause,
# made here with sed, to show what the INSERT costs), read-first.sql (the
# design not taken).
set -euo pipefail
dir="$(cd "$(dirname "$0")" && pwd)"
cd "$dir"
host=$1 port=$2 user=$3 db=$4
psql -q -h "$host" -p "$port" -U "$user" -d "$db" -f setup.sql
scripts=(floor claim claim-without-marker claim-no-on-conflict claim-no-returning read-first)
tmp=$(mktemp -d)
sed '/ON CONFLICT/d' claim.sql >"$tmp/claim-no-on-conflict.sql"
sed '/RETURNING 1/d; s/EXISTS (SELECT 1 FROM ins), //' "$tmp/claim-no-on-conflict.sql" >"$tmp/claim-no-returning.sql"
args=()
for s in "${scripts[@]}"; do
	if [ -f "$dir/$s.sql" ]; then args+=(-f "$dir/$s.sql"); else args+=(-f "$tmp/$s.sql"); fi
done
(cd "$tmp" && pgbench -n -h "$host" -p "$port" -U "$user" -M prepared -c 1 -T 6 -l "${args[@]}" "$db" >/dev/null)
python3 median.py "$tmp" "${scripts[@]}"
rm -rf "$tmp"
