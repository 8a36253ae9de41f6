#!/usr/bin/env bash
# Bounded fuzzing and static analysis for the root module.
#
#   .ci/fuzz.sh            # every fuzz target for FUZZTIME (default 10s), then staticcheck
#   FUZZTIME=60s .ci/fuzz.sh
#
# Run from anywhere; it works in the repository root. New crashers are
# written by `go test` to testdata/fuzz/<FuzzName>/ and fail the run: commit
# them with the fix, so they stay regression tests.
set -euo pipefail
cd "$(dirname "$0")/.."

FUZZTIME="${FUZZTIME:-10s}"
# staticcheck 2026.2.2; supports Go 1.26 (its go.mod requires go 1.26.0).
STATICCHECK_VERSION="v0.8.2"

targets=$(go test -list '^Fuzz' . | grep '^Fuzz' || true)
if [ -z "$targets" ]; then
	echo "fuzz.sh: no fuzz targets found" >&2
	exit 1
fi
for t in $targets; do
	echo "== fuzz $t ($FUZZTIME)"
	go test -run '^$' -fuzz "^${t}\$" -fuzztime "$FUZZTIME" .
done

echo "== staticcheck $STATICCHECK_VERSION"
GOBIN="$(go env GOPATH)/bin"
if ! "$GOBIN/staticcheck" -version 2>/dev/null | grep -q "(${STATICCHECK_VERSION#v})"; then
	go install "honnef.co/go/tools/cmd/staticcheck@${STATICCHECK_VERSION}"
fi
# Every module in the repository: the root and any nested go.mod.
find . -name go.mod -not -path './.git/*' -printf '%h\n' | sort | while read -r m; do
	echo "-- staticcheck ($m)"
	(cd "$m" && "$GOBIN/staticcheck" ./...)
done
