#!/usr/bin/env bash
# The whole test suite under Go's FIPS 140-3 mode (docs/fips.md): the root
# module, mcp, mcpgo, the protopage modules, and redisstore against a
# throwaway redis-server, each with GODEBUG=fips140=only and then =on; of
# pgstore, the contract and fleet tests (lease tokens, one-time tokens,
# states, webhooks; the fault tests add no cryptography), against the
# servers its tests start (.ci/pg.sh, which runs before this, installed
# PostgreSQL if it was missing); sqlitestore's own tests and, on the
# default driver (modernc: the mode concerns Go's cryptography, not the
# driver), its drivertest contracts on a real file. Tests that exercise
# what the mode forbids (short HMAC secrets, caller-chosen GCM nonces)
# assert the refusal under the mode instead of skipping. Called from
# .ci/run.
set -euo pipefail
cd "$(dirname "$0")/.."

# FIPS_MODES: the modes to run, "only on" by default; .ci/run passes "only",
# the stricter one (every non-approved use fails), to stay within its time.
for mode in ${FIPS_MODES:-only on}; do
	echo "--- GODEBUG=fips140=$mode: root, mcp, mcpgo, protopage, redisstore and pgstore (contract and fleet), sqlitestore (its tests, drivertest contracts)"
	# Every root package: the static scans (constant-time compares, doc
	# snippets, mutation reports) live in the tools module, .ci/tools.
	# It is also .ci/run's run of the root module without -race, where
	# internal/jcs's exhaustive checks run (they skip under -race).
	GODEBUG=fips140=$mode go test -count=1 ./...
	(cd mcp && GODEBUG=fips140=$mode go test -count=1 ./...)
	(cd mcpgo && GODEBUG=fips140=$mode go test -count=1 ./...)
	for m in protopage protopage/grpcpage protopage/connectpage; do
		(cd "$m" && GODEBUG=fips140=$mode go test -count=1 ./...)
	done
	# redisstore: its contracts, fleet tests and the script digests' test
	# (9.5 s against 63 s for the whole suite, whose fault tests add no
	# cryptography).
	CI=true bash .ci/redis.sh sh -c "cd redisstore && GODEBUG=fips140=$mode go test -count=1 -run '^(TestStore|Test[A-Za-z]*Contract|TestFleet[A-Za-z]*|TestScriptDigestsAreSHA1)\$' ."
	(cd pgstore && CI=true GODEBUG=fips140=$mode go test -count=1 -run '^TestStore$/^(lease|request_state|webhook|exchange)$' .)
	(cd sqlitestore && GODEBUG=fips140=$mode go test -count=1 ./...)
	(cd sqlitestore/drivertest && GODEBUG=fips140=$mode go test -count=1 -run '^TestStore$' .)
done
