module github.com/ctoken/ctoken/mcp

go 1.25.0

replace github.com/ctoken/ctoken => ../

require github.com/modelcontextprotocol/go-sdk v1.8.0 // indirect
