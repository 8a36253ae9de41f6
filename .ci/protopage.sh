#!/usr/bin/env bash
# CI steps for the protobuf page token modules: github.com/ctoken/ctoken/protopage
# (protobuf only), .../protopage/grpcpage (grpc-go) and
# .../protopage/connectpage (Connect). Called from .ci/run; runs from any
# directory. The gRPC and Connect tests start real servers on 127.0.0.1:0
# and drive them with real clients (and plain HTTP/JSON POSTs); nothing to
# install. The generated code of the test protos is checked in
# (protopage/examples/librarypb/gen.sh regenerates it), so protoc is not
# needed.
set -euo pipefail
cd "$(dirname "$0")/../protopage"

for m in . grpcpage connectpage; do
  echo "--- protopage ($m): build, vet, test -race (includes the Example servers)"
  # CTOKEN_LINTED_ELSEWHERE=1 (.ci/run): go vet and staticcheck run on
  # every module there.
  (cd "$m" && go build ./... && { [ -n "${CTOKEN_LINTED_ELSEWHERE:-}" ] || go vet ./...; } && go test -race -count=1 ./...)
done

echo "--- protopage: the fingerprint's memory bound, without -race (which skips it: sync.Pool drops items at random there)"
go test -count=1 -run '^TestFingerprintOfALargeRequestTakesAtMostTwiceItsWireSize$' -v . | grep -E '^(--- |ok|FAIL)'

echo "--- protopage: benchmarks once (a smoke test: nothing timed)"
go test -run '^$' -bench . -benchtime 1x .
for m in grpcpage connectpage; do (cd "$m" && go test -run "^\$" -bench . -benchtime 1x .); done

# (.ci/fuzz.sh fuzzes every target, FuzzStart included, on its own pass.)
echo "--- protopage: FuzzFingerprint, short"
fuzz() { go test -run '^$' -fuzz '^FuzzFingerprint$' -fuzztime "${PROTOPAGE_FUZZTIME:-5s}" .; }
tries=0
until fuzz; do
  # A found failure is written under testdata/fuzz. A failure that left no
  # input behind is Go's fuzzing coordinator ("context deadline exceeded"
  # at the end of -fuzztime, go.dev/issue/75804): run it again, at most
  # twice, as fuzz.sh does.
  if [ -n "$(git status --porcelain --untracked-files=all -- testdata/fuzz 2>/dev/null)" ]; then
    echo "protopage.sh: FuzzFingerprint found a failing input (see protopage/testdata/fuzz)" >&2
    exit 1
  fi
  tries=$((tries + 1))
  if [ "$tries" -gt 2 ]; then
    echo "protopage.sh: FuzzFingerprint failed three times without a failing input" >&2
    exit 1
  fi
  echo "protopage.sh: FuzzFingerprint failed without a failing input; running it again ($tries of 2)" >&2
done

if [ -z "${CTOKEN_LINTED_ELSEWHERE:-}" ] && command -v staticcheck >/dev/null; then
  for m in . grpcpage connectpage; do
    echo "--- staticcheck (protopage/$m)"
    (cd "$m" && staticcheck ./...)
  done
fi
