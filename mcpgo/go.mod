module github.com/ctoken/ctoken/mcpgo

go 1.25.5

require (
	github.com/ctoken/ctoken v0.1.0
	github.com/mark3labs/mcp-go v1.2.1
)

require (
	github.com/fxamacker/cbor/v2 v2.9.6 // indirect
	github.com/google/jsonschema-go v0.4.2 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/santhosh-tekuri/jsonschema/v6 v6.0.2 // indirect
	github.com/spf13/cast v1.7.1 // indirect
	github.com/x448/float16 v0.8.4 // indirect
	github.com/yosida95/uritemplate/v3 v3.0.2 // indirect
	golang.org/x/text v0.14.0 // indirect
)
