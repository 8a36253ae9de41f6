#!/usr/bin/env bash
# Bounded fuzzing of every fuzz target, then staticcheck, in every module.
#
#   .ci/fuzz.sh                  # each target for FUZZTIME (default 10s)
#   FUZZTIME=60s .ci/fuzz.sh     # longer
#   FUZZ_MODULES=. .ci/fuzz.sh   # only the root module (space-separated dirs)
#
# Targets are discovered with `go test -list '^Fuzz'`, so new ones are picked
# up without editing this file. Run from anywhere; it works in the repository
# root. A failure leaves the failing input in <package>/testdata/fuzz/<Target>/
# and fails the run: commit that file with the fix, so it stays a regression
# test that plain `go test` runs.
set -euo pipefail
cd "$(dirname "$0")/.."

FUZZTIME="${FUZZTIME:-10s}"
# staticcheck 2026.2.2; supports Go 1.26 (its go.mod requires go 1.26.0).
STATICCHECK_VERSION="v0.8.2"

if [ -n "${FUZZ_MODULES:-}" ]; then
	read -r -a modules <<<"$FUZZ_MODULES"
else
	mapfile -t modules < <(find . -name go.mod -not -path './.git/*' -printf '%h\n' | sort)
fi

count=0
for m in "${modules[@]}"; do
	# `go test -list` prints a package's matching names, then its "ok" line.
	pairs=$(cd "$m" && go test -list '^Fuzz' ./... |
		awk '/^Fuzz/ { names = names " " $1 } /^ok/ { n = split(names, a, " "); for (i = 1; i <= n; i++) print $2, a[i]; names = "" }')
	while read -r pkg target; do
		[ -n "$target" ] || continue
		echo "== fuzz $target in $pkg ($FUZZTIME)"
		(cd "$m" && go test -run '^$' -fuzz "^${target}\$" -fuzztime "$FUZZTIME" "$pkg")
		count=$((count + 1))
	done <<<"$pairs"
done
if [ "$count" -eq 0 ]; then
	echo "fuzz.sh: no fuzz targets found" >&2
	exit 1
fi
echo "== fuzzed $count targets"

echo "== staticcheck $STATICCHECK_VERSION"
GOBIN="$(go env GOPATH)/bin"
if ! "$GOBIN/staticcheck" -version 2>/dev/null | grep -q "(${STATICCHECK_VERSION#v})"; then
	go install "honnef.co/go/tools/cmd/staticcheck@${STATICCHECK_VERSION}"
fi
for m in "${modules[@]}"; do
	echo "-- staticcheck ($m)"
	(cd "$m" && "$GOBIN/staticcheck" ./...)
done
