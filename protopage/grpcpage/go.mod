module github.com/ctoken/ctoken/protopage/grpcpage

go 1.25.0

require (
	github.com/ctoken/ctoken v0.1.0
	github.com/ctoken/ctoken/protopage v0.1.0
	google.golang.org/grpc v1.84.0
)

require (
	github.com/fxamacker/cbor/v2 v2.9.6 // indirect
	github.com/x448/float16 v0.8.4 // indirect
	golang.org/x/net v0.57.0 // indirect
	golang.org/x/sys v0.47.0 // indirect
	golang.org/x/text v0.40.0 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20260706201446-f0a921348800 // indirect
	google.golang.org/protobuf v1.36.12 // indirect
)
