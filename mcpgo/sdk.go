package ctokenmcpgo

import (
	"strconv"
	"strings"

	"github.com/mark3labs/mcp-go/mcp"
)

// This file holds every behaviour of mcp-go (the version in go.mod) that
// the package mirrors instead of asking the SDK: each error text it
// matches or cuts, and the reading of a request body it must share.
// sdk_test.go provokes each from mcp-go itself, so an upgrade that changes
// one fails there. [mcptoken.Tasks.Handler] (mcptoken/tasks_wire.go)
// reads each request body ahead of mcp-go, which decodes it with
// encoding/json: it refuses a key spelled in another case (which
// encoding/json would match) and a key named twice (of which encoding/json
// keeps the last); sdk_test.go tests that reading behind mcp-go's own
// handler.
//
// The hooks mcp-go would need for ctoken to stop mirroring (to ask
// upstream):
//   - a client error that keeps the server's JSON-RPC error whole (code,
//     message and data) instead of a sentinel and the message's text;
//   - a way for a handler to answer a JSON-RPC error of its own code and
//     data (today every handler error is -32603 with its text as the
//     message, so ctoken's codes and retry hints ride in that text);
//   - typed errors, carrying the status, for an HTTP answer other than 200
//     and 202 (today "request failed with status N: body"), for a call on
//     a client not initialized ("client not initialized") and for a
//     response stream that ended before the response ("unexpected nil
//     response");
//   - a way to route an extension's methods (tasks/get, tasks/update,
//     tasks/cancel) to application code and to answer a tools/call with a
//     CreateTaskResult, or a strict decoding of request bodies (exact
//     keys, no duplicates), so that Tasks.Handler need not read bodies
//     ahead of the SDK.

// sdkInternalMessage returns the message of the server's -32603 from err,
// the error mcp-go's client returns for it: mcp.ErrInternalError wrapped
// with ": " and the message.
func sdkInternalMessage(err error) string {
	return strings.TrimPrefix(err.Error(), mcp.ErrInternalError.Error()+": ")
}

// sdkCutMessageEnd cuts suffix from the text of err: mcp-go's client ends
// the text of the error it returns for a JSON-RPC error with the server's
// message.
func sdkCutMessageEnd(err error, suffix string) (string, bool) {
	return strings.CutSuffix(err.Error(), suffix)
}

// sdkNotInitialized reports mcp-go's error, without a type, of a call on a
// client not initialized: never sent.
func sdkNotInitialized(err error) bool { return err.Error() == "client not initialized" }

// sdkHTTPStatus returns the status of mcp-go's error, without a type, of
// an HTTP answer other than 200 and 202 ("request failed with status N:
// body"), and 0 for any other error.
func sdkHTTPStatus(err error) int {
	const prefix = "request failed with status "
	msg := err.Error()
	i := strings.Index(msg, prefix)
	if i < 0 {
		return 0
	}
	rest := msg[i+len(prefix):]
	j := strings.IndexByte(rest, ':')
	if j < 0 {
		return 0
	}
	n, err := strconv.Atoi(rest[:j])
	if err != nil || n < 100 || n > 599 {
		return 0
	}
	return n
}
