#!/usr/bin/env bash
# fsyncs.sh — counts the fsync and fdatasync calls per operation of the
# benchmarks in bench_test.go, on each driver given (default: all three),
# under strace. Each benchmark runs twice, for N1 and N2 operations
# (-benchtime N1x, N2x); the count per operation is the difference of the
# two runs' counts divided by N2-N1, so the setup (Migrate, New, Close,
# the b.N=1 run Go makes first) cancels out. What remains is what the
# operations cost on the disk, amortized: the commits' fsyncs, SQLite's
# WAL checkpoints (one every 1000 WAL pages) and the store's sidecar
# writes (at most one a RecheckInterval, a second apart by default).
#
#   ./fsyncs.sh                # modernc ncruces mattn
#   ./fsyncs.sh modernc        # one driver
#
# Needs strace (apt-get install -y strace). The databases go to
# $TMPDIR (default /tmp), which must be on a disk, not a tmpfs: a tmpfs
# fsync returns at once and group commit has nothing to coalesce.
# strace's stop at each counted call slows every fsync a little, so
# concurrent callers coalesce slightly more than without it.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
tags=("$@")
[ ${#tags[@]} -gt 0 ] || tags=(modernc ncruces mattn)
tmp="${TMPDIR:-/tmp}"
if [ "$(stat -f -c %T "$tmp")" = tmpfs ]; then
	echo "fsyncs.sh: $tmp is a tmpfs: set TMPDIR to a directory on a disk" >&2
	exit 2
fi
command -v strace >/dev/null || {
	echo "fsyncs.sh: strace is missing (apt-get install -y strace)" >&2
	exit 2
}
work="$(mktemp -d "$tmp/fsyncs.XXXXXX")"
trap 'rm -rf "$work"' EXIT

# count BIN PATTERN N: the fsync and fdatasync calls of one run of the
# benchmarks PATTERN selects, for N operations.
count() {
	local bin=$1 pattern=$2 n=$3 out="$work/strace.out"
	(cd "$work" && TMPDIR="$work" strace -f --seccomp-bpf -c -o "$out" -e trace=fsync,fdatasync \
		"$bin" -test.run '^$' -test.bench "$pattern" -test.benchtime "${n}x" -test.count 1 >"$work/bench.out" 2>&1) || {
		cat "$work/bench.out" >&2
		return 1
	}
	awk '$NF == "fsync" || $NF == "fdatasync" { n += $4 } END { print n + 0 }' "$out"
}

printf '%-8s %-48s %8s %8s %12s\n' driver benchmark N fsyncs fsyncs/op
for tag in "${tags[@]}"; do
	bin="$work/drivertest.$tag.test"
	(cd "$here" && CGO_ENABLED=1 go test -tags "$tag" -c -o "$bin" .)
	while read -r name pattern n1 n2; do
		c1=$(count "$bin" "$pattern" "$n1")
		c2=$(count "$bin" "$pattern" "$n2")
		per=$(awk -v a="$c1" -v b="$c2" -v n1="$n1" -v n2="$n2" 'BEGIN { printf "%.3f", (b - a) / (n2 - n1) }')
		printf '%-8s %-48s %8d %8d %12s\n' "$tag" "$name" $((n2 - n1)) $((c2 - c1)) "$per"
	done <<-'EOF'
		Claim                           ^BenchmarkClaim$/                                   200  1200
		ClaimFloor                      ^BenchmarkClaimFloor$/                              200  1200
		ClaimConcurrent/claimers=8      ^BenchmarkClaimConcurrent$/./^claimers=8$           500  5500
		ClaimConcurrent/claimers=64     ^BenchmarkClaimConcurrent$/./^claimers=64$          1000 11000
		ClaimFloorConcurrent/writers=64 ^BenchmarkClaimFloorConcurrent$/./^writers=64$      100  600
		Transactional/acquire=work      ^BenchmarkTransactional$/./^acquire=work$           100  600
		Transactional/acquire=lease     ^BenchmarkTransactional$/./^acquire=lease$          100  600
		TransactionalFloor              ^BenchmarkTransactionalFloor$/                      100  600
	EOF
done
