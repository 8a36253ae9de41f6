package ctokenmcp

import (
	"net/http"
	"strings"

	"github.com/ctoken/ctoken/mcptoken"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// This file holds every behaviour of go-sdk (the version in go.mod) that
// the package mirrors instead of asking the SDK: each error text it
// matches and each reading of a request body it must share. sdk_test.go
// provokes each from the SDK itself, so an upgrade that changes one fails
// there. [mcptoken.Tasks.Handler] (mcptoken/tasks_wire.go) reads each
// request body ahead of the SDK, as go-sdk reads it: keys matched exactly,
// the first JSON value of the body (it refuses a body with anything after
// it), and at most [mcp.DefaultMaxRequestBodyBytes]; sdk_test.go tests
// that reading behind go-sdk's own handler.
//
// The hooks go-sdk would need for ctoken to stop mirroring (to ask
// upstream):
//   - an exported error (or code) for jsonrpc2.ErrRejected, the client
//     transport's -32005, with whether the request was sent;
//   - typed errors for a response stream that ended without the response
//     (today "request terminated without response"), a response body cut
//     off (": failed to read body: ") and an HTTP answer without a JSON-RPC
//     body (today its status text), carrying the status code;
//   - a typed error, or a hook, for the in-process multi round-trip
//     handling that cannot fulfil an older client's input requests (today
//     code 0 and "multi-round-trip: ..."), saying which capability it
//     asked for;
//   - a way to route an extension's methods (tasks/get, tasks/update,
//     tasks/cancel) to application code and to answer a tools/call with a
//     CreateTaskResult, so that Tasks.Handler need not read bodies ahead
//     of the SDK.

// codeRejected is the JSON-RPC code of go-sdk's jsonrpc2.ErrRejected
// ("rejected by transport"), an internal package's error: a request the
// client's transport could not deliver or whose answer it did not get,
// never a code a ctoken server sends.
const codeRejected = -32005

// sdkStreamEnded reports go-sdk's error, without a type, of a response
// stream (SSE) that ended before the call's response.
func sdkStreamEnded(err error) bool {
	return strings.HasSuffix(err.Error(), "request terminated without response")
}

// sdkBodyCut reports go-sdk's error, without a type, of a JSON response
// cut off.
func sdkBodyCut(err error) bool { return strings.Contains(err.Error(), ": failed to read body: ") }

// sdkEventCut reports go-sdk's error, without a type, of a response
// stream (SSE) whose event does not decode: cut off mid-event. go-sdk
// fails the connection.
func sdkEventCut(err error) bool { return strings.Contains(err.Error(), ": failed to decode event: ") }

// sdkNotMCP reports go-sdk's error, without a type, of a 2xx answer
// whose body is neither JSON nor an event stream (a proxy's HTML page).
// go-sdk closes the connection.
func sdkNotMCP(err error) bool { return strings.Contains(err.Error(), ": unsupported content type ") }

// sdkHTTPRefused reports go-sdk's error, without a type, of an HTTP answer
// 4xx other than 408 and 429: its text ends with the status text.
func sdkHTTPRefused(err error) bool {
	msg := err.Error()
	for code := 400; code < 500; code++ {
		if t := http.StatusText(code); t != "" && code != http.StatusRequestTimeout && code != http.StatusTooManyRequests && strings.HasSuffix(msg, ": "+t) {
			return true
		}
	}
	return false
}

// sdkMRTRPrefix begins every error of go-sdk's own multi round-trip
// handling for clients before protocol 2026-07-28, which fulfils a
// handler's input requests in process.
const sdkMRTRPrefix = "multi-round-trip: "

// sdkInputFailed reports err, a handler's error as the server sees it, to
// be go-sdk's failure to fulfil input requests in process (which it sends
// as JSON-RPC code 0).
func sdkInputFailed(err error) bool {
	if _, ok := err.(*jsonrpc.Error); ok {
		return false
	}
	return strings.HasPrefix(err.Error(), sdkMRTRPrefix)
}

// sdkInputCapability is the capability a refusal names when go-sdk's
// in-process fulfilment of input requests fails for an older client:
// elicitation. go-sdk fulfils sampling and roots requests there too, which
// its error does not tell apart (see the hooks above).
const sdkInputCapability = mcptoken.CapElicitation

// sdkDeclared is what caps declares of [sdkInputCapability]; nil (no
// declaration seen: a stateless HTTP session of an older client) is nil.
func sdkDeclared(caps *mcp.ClientCapabilities) *mcptoken.Declared {
	if caps == nil {
		return nil
	}
	return &mcptoken.Declared{Elicitation: caps.Elicitation != nil}
}
