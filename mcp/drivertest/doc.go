// Package drivertest is a test-only module: ctoken's MCP integrations
// driven by the SDKs' own clients (go-sdk's and mcp-go's) against every
// replay store on real servers started on 127.0.0.1 — the memory store,
// Redis (CTOKEN_REDIS_ADDR, as .ci/redis.sh sets it), PostgreSQL (a
// server of its own, from Debian's postgresql package or CTOKEN_PG_BIN)
// and SQLite (a file of the test's, through modernc.org/sqlite).
// Without a server a test skips, except under CI=true, where it fails. It
// holds no library code; apicheck and the release check skip it, as they
// skip sqlitestore/drivertest.
package drivertest
