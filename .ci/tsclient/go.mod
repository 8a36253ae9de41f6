module tsclient

go 1.26.0

require (
	github.com/ctoken/ctoken v0.1.0
	github.com/ctoken/ctoken/mcp v0.1.0
	github.com/ctoken/ctoken/mcpgo v0.1.0
	github.com/mark3labs/mcp-go v1.2.1
	github.com/modelcontextprotocol/go-sdk v1.8.0
)
