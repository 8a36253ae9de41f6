// Package tsclient is a test-only module: the official TypeScript MCP
// client (npm @modelcontextprotocol/client, v2) drives a go-sdk server
// secured by ctoken over streamable HTTP on 127.0.0.1 — an idempotent
// tool, a two-round tool with a single-use request state that answers its
// retry, and ctoken's sealed list cursors; and the MCP Tasks extension's
// own client (npm @modelcontextprotocol/ext-tasks) drives ctoken's tasks
// (mcptoken.Tasks) on a go-sdk and on an mcp-go server.
// .ci/mcp-tsclient.sh installs Node and the clients into a temporary
// folder and runs it; without them (CTOKEN_TSCLIENT_NODE,
// CTOKEN_TSCLIENT_MODULES) the test skips, except under CI=true, where it
// fails. It holds no library code.
package tsclient
