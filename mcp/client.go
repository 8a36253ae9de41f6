package ctokenmcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"time"

	"github.com/ctoken/ctoken"
	"github.com/ctoken/ctoken/mcptoken"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// ErrOutcomeUnknown reports a call of [CallTool] that ended without a
// result after an attempt that may have reached the server: the tool may
// have run, or may still run. Call again under the same idempotency key
// ([RetryKey]) to get its result, never under a new one.
var ErrOutcomeUnknown = errors.New("ctokenmcp: the outcome of the tool call is unknown")

// CallOptions configures [CallTool]. A zero field means its default; a
// negative one is refused.
type CallOptions struct {
	// Key is the idempotency key of the call: 1 to 255 visible ASCII
	// bytes other than '"', '\', ',' and ';', as the server accepts. Use
	// it to call again after [ErrOutcomeUnknown], or to carry a key the
	// application keeps (one per payment, say). Empty: the key the
	// params' _meta already holds, else a fresh random one.
	Key string
	// MaxAttempts bounds the attempts, the first included. Zero means no
	// bound but MaxElapsed's.
	MaxAttempts int
	// MaxElapsed bounds the time in which attempts start: no wait
	// between attempts extends past it, and none starts after it. An
	// attempt in flight is bounded by the caller's context only. Zero
	// means 30 seconds, which rides out a server that is down (refusing
	// connections, or answering 502 behind a proxy) for about 25 seconds.
	MaxElapsed time.Duration
	// KeyArgument names the tool argument that carries the key, as the
	// server's [mcptoken.IdempotencyConfig].KeyArgument: the key is that
	// argument's value, sent in _meta too, and a call whose arguments do
	// not hold it as a string, or whose Key or _meta key differs from it,
	// is refused before anything is sent.
	KeyArgument string
	// Reconnect, when set, opens a new session, which the application
	// keeps for its later calls: CallTool calls it when the server no
	// longer knows the session (mcp.ErrSessionMissing, the 404 of a
	// stateful server that restarted) or the session's connection closed,
	// then sends the same call with the same key on the new session,
	// within MaxElapsed. A Reconnect error that an attempt's would be
	// retried for (a refused connection, a 5xx) is retried; any other ends
	// the call. Nil: such a session ends the call.
	Reconnect func(ctx context.Context) (*mcp.ClientSession, error)
}

// defaultCallElapsed is CallOptions.MaxElapsed's default.
const defaultCallElapsed = 30 * time.Second

// msgStoreUnavailable is the message of [Idempotency.Wrap]'s -32603 for a
// store that could not answer, which carries no ctoken code.
const msgStoreUnavailable = "idempotency store unavailable: retry later"

// CallTool calls params' tool on cs once as a logical call: every attempt
// sends the same params with the same idempotency key in the _meta member
// [mcptoken.MetaIdempotencyKey], so that a tool wrapped by
// [Idempotency.Wrap] (with KeyFromMeta) runs at most once, and every retry
// gets its first result. The key is the argument opts.KeyArgument's, else
// opts.Key, else the one params' _meta already holds, else a fresh random
// one (128 bits from crypto/rand, base64url). params is not modified. A
// server without ctoken sees an ordinary call with one more _meta member,
// and runs the tool once per attempt that reaches it: against it a retry
// is not exactly-once.
//
// An attempt is made again when its answer was lost or the server says
// to retry: after a transport failure (go-sdk's -32005 "rejected by
// transport" for a connection refused, reset or closed before the
// response, and for an HTTP 5xx or 429, a proxy's 502 among them; a
// response stream cut off), and after [InProgress] (1025), [StateBusy]
// (1027), the [OutcomeUnknown] (1028) of a -32603 error and the -32603
// "idempotency store unavailable". It waits for the refusal's
// retryAfterMs, else for a backoff (100 ms, doubling, at most 2 s,
// jittered). Anything else ends the call at once: a result (one with
// IsError too) is returned, and so is, as it is, an error that says the
// tool did not run (JSON-RPC -32700, -32600, -32601, -32602: [KeyReused],
// a refused request state, [RoundInterrupted] among them; an HTTP 4xx; a
// connection refused; the server's 404 for a lost session) when no
// earlier attempt may have reached the server.
//
// A tool's failure the server recorded ([ToolFailed], 1030) ends the call
// at once with an error matching [mcptoken.ErrToolFailed] that wraps the
// server's: every call under the key gets it again, without a run; check
// the tool's effect, and call under a new key only to run it again.
//
// Once an attempt may have reached the server, the call ends with a
// result or with an error matching [ErrOutcomeUnknown], whatever the
// later attempts met (a 4xx, a -32602, a closed session, the budget
// spent, ctx done); so does a first attempt whose error does not prove
// that the tool did not run (a -32603 of a tool that failed, a
// connection closed mid-call). The error wraps the last attempt's error;
// [RetryKey] returns its key, and CallOptions.Key with it calls again,
// never a new key. A session that closed (mcp.ErrConnectionClosed,
// mcp.ErrSessionMissing; a response, or an event of a response stream,
// cut off mid-way; a 2xx whose body is neither JSON nor an event stream,
// a proxy's HTML page) carries no further attempt; with
// CallOptions.Reconnect, the next attempt goes on a new session. No error
// holds the key in its text. By default attempts start within 30 seconds (see
// [CallOptions]); ctx's end stops a wait at once.
//
// Refused before anything is sent: a nil cs or params, a key that is
// malformed, not a string in _meta or in the argument opts.KeyArgument, or
// that differs from another of opts.Key, _meta's and the argument's
// (matching mcptoken.ErrIdempotencyKey), a negative field of opts
// (ctoken.ErrConfig).
//
// Over a StreamableClientTransport whose HTTPClient's transport is a
// [TaskTransport], a call the server answers with a task (the MCP Tasks
// extension) returns the task's result, or its end, as one attempt: a
// task that failed is an error matching [*mcptoken.TaskFailure], one
// cancelled [mcptoken.ErrTaskCancelled]. Whenever the task's effect is
// unknown (ctx ended while it ran, polling failed, or its server stopped
// while it ran: "the server running the task stopped", a TaskFailure
// matching [mcptoken.ErrOutcomeUnknown]), the error matches
// [ErrOutcomeUnknown] and [RetryKey] returns the key: a call under it gets
// the same task, or its recorded end, without running it again; the
// error's text says what to check first when its server stopped (see
// [mcptoken.Tasks.AllowRerun]). A Transactional task that failed keeping
// nothing is run again by the next call under its key.
func CallTool(ctx context.Context, cs *mcp.ClientSession, params *mcp.CallToolParams, opts CallOptions) (*mcp.CallToolResult, error) {
	if cs == nil || params == nil {
		return nil, fmt.Errorf("ctokenmcp: CallTool: %w: nil session or params", ctoken.ErrConfig)
	}
	if opts.MaxAttempts < 0 || opts.MaxElapsed < 0 {
		return nil, fmt.Errorf("ctokenmcp: CallTool: %w: MaxAttempts or MaxElapsed is negative", ctoken.ErrConfig)
	}
	attempts, elapsed := opts.MaxAttempts, opts.MaxElapsed
	if elapsed == 0 {
		elapsed = defaultCallElapsed
	}
	p, key, err := keyedParams(params, opts.Key, opts.KeyArgument)
	if err != nil {
		return nil, err
	}
	return mcptoken.CallWithRetries(ctx, "ctokenmcp", ErrOutcomeUnknown, key, attempts, elapsed, func() (*mcp.CallToolResult, mcptoken.RetryVerdict, error) {
		if cs == nil { // the server lost the last session
			s, err := opts.Reconnect(ctx)
			if err == nil && s == nil {
				err = fmt.Errorf("%w: Reconnect returned no session and no error", ctoken.ErrConfig)
			}
			if err != nil {
				return nil, reconnectVerdict(err), fmt.Errorf("ctokenmcp: CallTool: Reconnect: %w", err)
			}
			cs = s
		}
		end := &taskEnd{}
		res, err := cs.CallTool(context.WithValue(ctx, taskEndKey{}, end), p)
		if err != nil {
			if ok, terr := end.get(); ok && terr != nil {
				// The end of the task the call created (TaskTransport).
				return nil, taskVerdict(terr), terr
			}
			v := classify(err)
			if v.Closed && opts.Reconnect != nil {
				// A session the server no longer knows (not run), or a
				// connection that failed (a 4xx too: the new session's
				// own 4xx ends the call): the next attempt goes on a new
				// session.
				cs, v.Closed, v.Retry = nil, false, true
			}
			return nil, v, err
		}
		return res, mcptoken.RetryVerdict{}, nil
	})
}

// reconnectVerdict returns the verdict on err, the error of a Reconnect:
// nothing of the call was sent; what an attempt would retry (a refused
// connection, a 5xx) is retried, anything else (a 4xx, a misconfiguration)
// ends the call.
func reconnectVerdict(err error) verdict { return verdict{Retry: classify(err).Retry} }

// taskVerdict is the verdict on err, the end of a task a call created
// other than its result: a failure whose effect is known and a cancel
// settle the call; any other end (the task's instance stopped, a
// transport failure, an input handler's error) leaves its outcome
// unknown, with no attempt left to make.
func taskVerdict(err error) verdict {
	var f *mcptoken.TaskFailure
	if errors.Is(err, mcptoken.ErrTaskCancelled) || errors.As(err, &f) && !errors.Is(err, mcptoken.ErrOutcomeUnknown) {
		return verdict{}
	}
	return verdict{Reached: true}
}

// RetryKey returns the idempotency key of the call that an
// [ErrOutcomeUnknown] error of [CallTool] ended, to call again with
// ([CallOptions].Key), and false for any other error.
func RetryKey(err error) (string, bool) { return mcptoken.RetryKey(err) }

// keyedParams returns a copy of params whose _meta holds the call's key,
// and the key ([mcptoken.CallKey]).
func keyedParams(params *mcp.CallToolParams, key, keyArg string) (*mcp.CallToolParams, string, error) {
	key, err := mcptoken.CallKey(key, keyArg, params.Arguments, mcptoken.MetaKeyOf(params.Meta))
	if err != nil {
		return nil, "", fmt.Errorf("ctokenmcp: CallTool: %w", err)
	}
	p := *params
	p.Meta = make(mcp.Meta, len(params.Meta)+4) // and the SDK's own three members
	maps.Copy(p.Meta, params.Meta)
	delete(p.Meta, mcptoken.LegacyMetaIdempotencyKey)
	p.Meta[mcptoken.MetaIdempotencyKey] = key
	return &p, key, nil
}

// verdict is what one failed attempt tells CallTool.
type verdict = mcptoken.RetryVerdict

// classify returns the verdict on err, the error of an attempt, made
// while its context was live. What it cannot prove did not run is
// Reached.
func classify(err error) verdict {
	if errors.Is(err, mcp.ErrSessionMissing) {
		// The server's 404 for a session it no longer has: not run, and
		// the session carries nothing more.
		return verdict{Closed: true}
	}
	if errors.Is(err, mcp.ErrConnectionClosed) {
		// The connection closed before the call was sent or while it was
		// in flight (a stateful session closed mid-call): the client
		// cannot tell which.
		return verdict{Reached: true, Closed: true}
	}
	var we *jsonrpc.Error
	if errors.As(err, &we) { // the first is the server's, when it sent one
		if we.Code == codeRejected {
			// A request the transport could not deliver, a 5xx or 429
			// (a proxy's 502 after its upstream ran the tool among them),
			// or an exchange that failed after the request was sent.
			var op *net.OpError
			return verdict{Retry: true, Reached: !errors.As(err, &op) || op.Op != "dial"}
		}
		return refusal(we)
	}
	switch {
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		// A connection (in-memory, stdio) that ended while the call
		// was in flight: closed for good.
		return verdict{Reached: true, Closed: true}
	case sdkStreamEnded(err):
		// A response stream (SSE) that ended before the call's
		// response: the session lives on.
		return verdict{Retry: true, Reached: true}
	case sdkBodyCut(err), sdkEventCut(err), sdkNotMCP(err):
		// A JSON response, or an event of a response stream, cut off; a
		// 2xx that is not the server's answer (a proxy's HTML page,
		// perhaps after its upstream ran the tool): the connection has
		// failed.
		return verdict{Reached: true, Closed: true}
	case sdkHTTPRefused(err):
		// A 4xx without a JSON-RPC body (401, 403, 400 of a proxy or
		// of the server's own middleware): refused before any tool
		// ran, and go-sdk fails the connection.
		return verdict{Closed: true}
	}
	return verdict{Reached: true}
}

// refusal returns the verdict on we, a JSON-RPC error the server sent:
// retry what the server says to retry; -32700, -32600, -32601 and -32602
// (a refused key, state or argument, an unknown tool) did not run; any
// other error (a tool that failed after it began, among them) may have.
func refusal(we *jsonrpc.Error) verdict {
	var d idempotencyData
	if len(we.Data) > 0 && json.Unmarshal(we.Data, &d) != nil {
		d = idempotencyData{Code: -1} // unreadable: no ctoken code
	}
	hint := time.Duration(max(d.RetryAfterMs, 0)) * time.Millisecond
	switch {
	case d.Code == ToolFailed:
		return verdict{Reached: true, Recorded: true}
	case we.Code == jsonrpc.CodeInternalError && (d.Code == InProgress || d.Code == OutcomeUnknown),
		we.Code == jsonrpc.CodeInvalidParams && d.Code == StateBusy:
		return verdict{Retry: true, Reached: true, Hint: hint}
	case we.Code == jsonrpc.CodeInternalError && d.Code == 0 && we.Message == msgStoreUnavailable:
		return verdict{Retry: true, Reached: true}
	case we.Code == jsonrpc.CodeParseError, we.Code == jsonrpc.CodeInvalidRequest,
		we.Code == jsonrpc.CodeMethodNotFound, we.Code == jsonrpc.CodeInvalidParams:
		return verdict{}
	}
	return verdict{Reached: true}
}
