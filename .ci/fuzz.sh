#!/usr/bin/env bash
# Bounded fuzzing of every fuzz target, then staticcheck, in every module.
#
#   .ci/fuzz.sh                  # fuzz each target for FUZZTIME (default 10s), then staticcheck
#   .ci/fuzz.sh fuzz             # only the fuzzing
#   .ci/fuzz.sh staticcheck      # only staticcheck (pinned, installed if missing)
#   FUZZTIME=60s .ci/fuzz.sh     # longer
#   FUZZ_MODULES=. .ci/fuzz.sh   # only these module dirs (space-separated)
#
# Modules named ./bench are not fuzzed (differential fuzzing of peer
# libraries lives in the root module), but are staticchecked.
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

what="${1:-all}"
case "$what" in
all | fuzz | staticcheck) ;;
*)
	echo "usage: $0 [all|fuzz|staticcheck]" >&2
	exit 2
	;;
esac

run_fuzz() {
	local count=0 m pairs pkg target tries
	for m in "${modules[@]}"; do
		[ "$m" = "./bench" ] && continue
		# `go test -list` prints a package's matching names, then its "ok" line.
		pairs=$(cd "$m" && go test -list '^Fuzz' ./... |
			awk '/^Fuzz/ { names = names " " $1 } /^ok/ { n = split(names, a, " "); for (i = 1; i <= n; i++) print $2, a[i]; names = "" }')
		while read -r pkg target; do
			[ -n "$target" ] || continue
			echo "== fuzz $target in $pkg ($FUZZTIME)"
			# A found failure is written under testdata/fuzz and fails again
			# on every run. A failure that left no input behind is the fuzzing
			# engine itself ("context deadline exceeded" at the end of
			# -fuzztime, go.dev/issue/75804; about 1 target in 25 per pass on
			# a loaded 2-core machine): run the target again, at most twice.
			tries=0
			until (cd "$m" && go test -run '^$' -fuzz "^${target}\$" -fuzztime "$FUZZTIME" "$pkg"); do
				if [ -n "$(git status --porcelain --untracked-files=all -- '*testdata/fuzz/*' 2>/dev/null)" ]; then
					echo "fuzz.sh: $target found a failing input (see testdata/fuzz)" >&2
					exit 1
				fi
				tries=$((tries + 1))
				if [ "$tries" -gt 2 ]; then
					echo "fuzz.sh: $target failed three times without a failing input" >&2
					exit 1
				fi
				echo "fuzz.sh: $target failed without a failing input; running it again ($tries of 2)" >&2
			done
			count=$((count + 1))
		done <<<"$pairs"
	done
	if [ "$count" -eq 0 ]; then
		echo "fuzz.sh: no fuzz targets found" >&2
		exit 1
	fi
	echo "== fuzzed $count targets"
}

run_staticcheck() {
	echo "== staticcheck $STATICCHECK_VERSION"
	local gobin m
	gobin="$(go env GOPATH)/bin"
	if ! "$gobin/staticcheck" -version 2>/dev/null | grep -q "(${STATICCHECK_VERSION#v})"; then
		go install "honnef.co/go/tools/cmd/staticcheck@${STATICCHECK_VERSION}"
	fi
	for m in "${modules[@]}"; do
		echo "-- staticcheck ($m)"
		(cd "$m" && "$gobin/staticcheck" ./...)
	done
}

case "$what" in
all)
	run_fuzz
	run_staticcheck
	;;
fuzz) run_fuzz ;;
staticcheck) run_staticcheck ;;
esac
