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
  (cd "$m" && go build ./... && go vet ./... && go test -race -count=1 ./...)
done

echo "--- protopage: benchmarks once (a smoke test: nothing timed)"
go test -run '^$' -bench . -benchtime 1x .
for m in grpcpage connectpage; do (cd "$m" && go test -run "^\$" -bench . -benchtime 1x .); done

for target in FuzzFingerprint FuzzStart; do
  echo "--- protopage: $target, short"
  go test -run '^$' -fuzz "^$target\$" -fuzztime "${PROTOPAGE_FUZZTIME:-5s}" .
done

if command -v staticcheck >/dev/null; then
  for m in . grpcpage connectpage; do
    echo "--- staticcheck (protopage/$m)"
    (cd "$m" && staticcheck ./...)
  done
fi
