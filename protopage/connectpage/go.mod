module github.com/ctoken/ctoken/protopage/connectpage

go 1.25.0

require (
	connectrpc.com/connect v1.20.0
	github.com/ctoken/ctoken v0.1.0
	github.com/ctoken/ctoken/protopage v0.1.0
)

require (
	github.com/fxamacker/cbor/v2 v2.9.6 // indirect
	github.com/x448/float16 v0.8.4 // indirect
	google.golang.org/protobuf v1.36.12 // indirect
)
