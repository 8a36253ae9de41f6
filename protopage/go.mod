module github.com/ctoken/ctoken/protopage

go 1.24

require (
	github.com/ctoken/ctoken v0.1.0
	google.golang.org/protobuf v1.36.12
)

require (
	github.com/fxamacker/cbor/v2 v2.9.6 // indirect
	github.com/x448/float16 v0.8.4 // indirect
)
