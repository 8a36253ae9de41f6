module github.com/ctoken/ctoken/mcp/drivertest

go 1.26.0

require (
	github.com/ctoken/ctoken v0.1.0
	github.com/ctoken/ctoken/mcp v0.1.0
	github.com/ctoken/ctoken/mcpgo v0.1.0
	github.com/ctoken/ctoken/pgstore v0.1.0
	github.com/ctoken/ctoken/redisstore v0.1.0
	github.com/ctoken/ctoken/sqlitestore v0.1.0
	github.com/google/jsonschema-go v0.4.3
	github.com/jackc/pgx/v5 v5.12.0
	github.com/mark3labs/mcp-go v1.2.1
	github.com/modelcontextprotocol/go-sdk v1.8.0
	github.com/redis/go-redis/v9 v9.22.0
	modernc.org/sqlite v1.62.0
)
