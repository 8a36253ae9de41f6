module github.com/ctoken/ctoken/sqlitestore/drivertest

go 1.26.0

require (
	github.com/ctoken/ctoken v0.1.0
	github.com/ctoken/ctoken/mcp v0.1.0
	github.com/ctoken/ctoken/sqlitestore v0.1.0
	github.com/mattn/go-sqlite3 v1.14.53
	github.com/modelcontextprotocol/go-sdk v1.8.0
	github.com/ncruces/go-sqlite3 v0.37.0
	modernc.org/sqlite v1.62.0
)
