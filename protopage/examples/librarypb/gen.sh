#!/usr/bin/env bash
# Regenerates the checked-in Go code of protopage's example protos (the
# library service of the docs, Examples and tests: this package, the gRPC
# stubs in grpcpage/examples/librarygrpc, the Connect stubs in
# connectpage/examples/librarypbconnect) and of the test-only
# internal/fingerprintpb.
# Needs protoc (Debian: apt-get install protobuf-compiler) and the plugins:
#   go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
#   go install google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.6.2
#   go install connectrpc.com/connect/cmd/protoc-gen-connect-go@v1.21.1
# Building and testing need none of this: the output is committed.
set -euo pipefail
cd "$(dirname "$0")"
mod=github.com/ctoken/ctoken/protopage
export PATH="$PATH:$(go env GOPATH)/bin"

# Messages and the service descriptor: this module (protobuf only).
protoc -I . --go_out=. --go_opt=paths=source_relative library.proto library_service.proto
(cd ../../internal/fingerprintpb && protoc -I . --go_out=. --go_opt=paths=source_relative fingerprint.proto)

# gRPC stubs, in the grpcpage module: library_service.proto is mapped to
# that package, so the stubs name the messages as librarypb.X.
grpc=$mod/grpcpage/examples/librarygrpc
protoc -I . --go-grpc_out=../../grpcpage/examples/librarygrpc --go-grpc_opt=paths=source_relative \
	--go-grpc_opt=Mlibrary_service.proto="$grpc;librarygrpc" library_service.proto

# Connect stubs, in the connectpage module: protoc-gen-connect-go writes a
# librarypbconnect sub-package beside the messages; it is moved unchanged.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
protoc -I . --connect-go_out="$tmp" --connect-go_opt=paths=source_relative library_service.proto
mkdir -p ../../connectpage/examples/librarypbconnect
mv "$tmp"/librarypbconnect/library_service.connect.go ../../connectpage/examples/librarypbconnect/
