module mcpconformance

go 1.25.5

require (
	github.com/ctoken/ctoken v0.1.0
	github.com/ctoken/ctoken/mcp v0.1.0
	github.com/ctoken/ctoken/mcpgo v0.1.0
	github.com/google/jsonschema-go v0.4.3
	github.com/mark3labs/mcp-go v1.2.1
	github.com/modelcontextprotocol/go-sdk v1.8.0
	github.com/yosida95/uritemplate/v3 v3.0.2
)
