package ctokenmcpgo

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/ctoken/ctoken"
	"github.com/ctoken/ctoken/mcptoken"
	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
)

// ErrOutcomeUnknown reports a call of [CallTool] that ended without a
// result after an attempt that may have reached the server: the tool may
// have run, or may still run. Call again under the same idempotency key
// ([RetryKey]) to get its result, never under a new one.
var ErrOutcomeUnknown = errors.New("ctokenmcpgo: the outcome of the tool call is unknown")

// CallOptions configures [CallTool]. A zero field means its default; a
// negative one is refused.
type CallOptions struct {
	// Key is the idempotency key of the call: 1 to 255 visible ASCII
	// bytes other than '"', '\', ',' and ';', as the server accepts. Use
	// it to call again after [ErrOutcomeUnknown], or to carry a key the
	// application keeps (one per payment, say). Empty: the key the
	// request's _meta already holds, else a fresh random one.
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
	// Reconnect, when set, gives a client initialized on a new session (c
	// itself after c.Initialize, or another), which the application keeps
	// for its later calls: CallTool without Task calls it when the server
	// no longer knows the session (transport.ErrSessionTerminated, the 404
	// of a stateful server that restarted) or c's transport closed, then
	// sends the same call with the same key on it, within MaxElapsed. A
	// Reconnect error that an attempt's would be retried for (a refused
	// connection, a 5xx) is retried; any other ends the call. Nil: such a
	// session ends the call.
	Reconnect func(ctx context.Context) (*client.Client, error)
	// Task, when set, declares the MCP Tasks extension on the call and
	// drives a task the server answers with to its result (see CallTool,
	// "Tasks").
	Task *TaskOptions
}

// defaultCallElapsed is CallOptions.MaxElapsed's default.
const defaultCallElapsed = 30 * time.Second

// CallTool calls req's tool through c once as a logical call: every
// attempt sends the same request with the same idempotency key in the
// _meta member [mcptoken.MetaIdempotencyKey], so that a tool wrapped by
// [Idempotency.Wrap] (with KeyFromMeta) runs at most once, and every retry
// gets its first result. The key is the argument opts.KeyArgument's, else
// opts.Key, else the one req's _meta already holds, else a fresh random
// one (128 bits from crypto/rand, base64url). The caller's request and its
// _meta are not modified. A server without ctoken sees an ordinary call
// with one more _meta member, and runs the tool once per attempt that
// reaches it: against it a retry is not exactly-once.
//
// mcp-go's client (v1.2.1) drives the rounds of a multi round-trip call
// (SEP-2322) itself, inside c.CallTool, with the same _meta on every
// round: one attempt is all of its rounds, and a retry starts again at
// round one, which the server answers with the result recorded for the
// round that completed the call. (c.CallTool sends round one without the
// request's requestState and inputResponses.)
//
// An attempt is made again when it was not delivered, its answer was
// lost, or the server says to retry: after a transport failure (a
// connection refused, which sent nothing; an HTTP exchange that failed
// after the request was sent, a connection closed or reset, a response
// cut off, a response stream (SSE) that ended before the response; an
// HTTP 5xx, 408 or 429, a proxy's 502 among them), after a tool error
// result with _meta ctokenCode [InProgress] (1025) or [OutcomeUnknown]
// (1028), after a JSON-RPC -32603 [StateBusy] (1027) refusal and after
// the -32603 [ErrIdempotencyStore] (which mcp-go cannot tell from a first
// result that was not recorded: such a call is retried until its budget
// ends). It waits for the refusal's retryAfterMs ([RetryAfter],
// [StateRetryAfter]), else for a backoff (100 ms, doubling, at most 2 s,
// jittered). Anything else ends the call at once: a result (a tool error
// result too, [KeyReused] among them) is returned, and so is, as it is,
// an error that says the tool did not run (JSON-RPC -32700, -32600,
// -32601, -32602; an HTTP 4xx; a connection refused; the server's 404 for
// a lost session) when no earlier attempt may have reached the server.
//
// A tool's failure the server recorded (a -32603 whose text ends
// " (ctokenCode 1030)", [ToolFailed]) ends the call at once with an error
// matching [mcptoken.ErrToolFailed] that wraps the server's: every call
// under the key gets it again, without a run; check the tool's effect,
// and call under a new key only to run it again.
//
// Once an attempt may have reached the server, the call ends with a
// result or with a nil result and an error matching [ErrOutcomeUnknown],
// whatever the later attempts met (a 4xx, a tool error result with a
// ctoken code such as [KeyReused] or [StateUsed], a closed session, the
// budget spent, ctx done); so does a first attempt whose error does not
// prove that the tool did not run (a -32603 of a tool that failed, a
// client closed mid-call). The error wraps the last attempt's error,
// which for a 1025 or 1028 result matches [mcptoken.ErrInProgress] or
// [mcptoken.ErrOutcomeUnknown]; [RetryKey] returns its key, and
// CallOptions.Key with it calls again, never a new key. A 1025 or 1028
// result is never returned as the call's result. A session the server
// ended (transport.ErrSessionTerminated), a closed client or stdio
// transport carries no further attempt; with CallOptions.Reconnect, the
// next attempt goes on a new session. No error holds the key in its
// text. By default attempts start within 30 seconds (see [CallOptions]);
// ctx's end stops a wait at once.
//
// Refused before anything is sent: a nil c, a key that is malformed, not
// a string in _meta or in the argument opts.KeyArgument, or that differs
// from another of opts.Key, _meta's and the argument's (matching
// mcptoken.ErrIdempotencyKey), a negative field of opts (ctoken.ErrConfig).
//
// # Tasks
//
// With opts.Task (a client on protocol 2026-07-28; any other is refused
// with ctoken.ErrConfig), the call declares the Tasks extension
// (io.modelcontextprotocol/tasks) in its _meta, besides the client's own
// capabilities, and is sent on c's transport directly: mcp-go's client
// cannot take a CreateTaskResult. A result is returned as above; the
// multi round-trip rounds a server asks before it creates a task are
// answered by opts.Task.Input (up to 10); a task is polled with tasks/get
// at the interval its server asks (pollIntervalMs), its input requests are
// answered by opts.Task.Input (each once) and sent with tasks/update, and
// its result is the call's. A task that failed is an error matching
// [*mcptoken.TaskFailure] (the JSON-RPC error it failed with), one
// cancelled [mcptoken.ErrTaskCancelled]. While the task runs, a server
// that is down or a lost connection is waited out until ctx ends: the task
// is in the server's store, and [ResumeTask] with the ID opts.Task.Started
// was given gets its result later, from this client or another of the
// same caller. The tools/call itself is sent again only after an attempt
// that cannot have reached the server (each call that reaches it creates a
// task). Whenever the task's effect is unknown (ctx ended while it ran,
// polling failed, or its server stopped while it ran: "the server running
// the task stopped", a TaskFailure matching [mcptoken.ErrOutcomeUnknown]),
// the error matches [ErrOutcomeUnknown] and [RetryKey] returns the key: a
// call under it gets the same task, or its recorded end, without running it
// again; the error's text says what to check first when its server
// stopped (see [mcptoken.Tasks.AllowRerun]). A Transactional task that
// failed keeping nothing is run again by the next call under its key.
func CallTool(ctx context.Context, c *client.Client, req mcp.CallToolRequest, opts CallOptions) (*mcp.CallToolResult, error) {
	if c == nil {
		return nil, fmt.Errorf("ctokenmcpgo: CallTool: %w: nil client", ctoken.ErrConfig)
	}
	if opts.MaxAttempts < 0 || opts.MaxElapsed < 0 {
		return nil, fmt.Errorf("ctokenmcpgo: CallTool: %w: MaxAttempts or MaxElapsed is negative", ctoken.ErrConfig)
	}
	attempts, elapsed := opts.MaxAttempts, opts.MaxElapsed
	if elapsed == 0 {
		elapsed = defaultCallElapsed
	}
	req, key, err := keyedRequest(req, opts.Key, opts.KeyArgument)
	if err != nil {
		return nil, err
	}
	if opts.Task != nil {
		return callTask(ctx, c, req, key, opts)
	}
	reached := false // an attempt may have reached the server
	return mcptoken.CallWithRetries(ctx, "ctokenmcpgo", ErrOutcomeUnknown, key, attempts, elapsed, func() (*mcp.CallToolResult, mcptoken.RetryVerdict, error) {
		if c == nil { // the server lost the last session
			nc, err := opts.Reconnect(ctx)
			if err == nil && nc == nil {
				err = fmt.Errorf("%w: Reconnect returned no client and no error", ctoken.ErrConfig)
			}
			if err != nil {
				return nil, reconnectVerdict(err), fmt.Errorf("ctokenmcpgo: CallTool: Reconnect: %w", err)
			}
			c = nc
		}
		res, err := c.CallTool(ctx, req)
		if err != nil {
			v := classify(err)
			reached = reached || v.Reached
			if v.Closed && opts.Reconnect != nil {
				// A session the server no longer knows (not run), or a
				// transport that closed: the next attempt goes on a new
				// session.
				c, v.Closed, v.Retry = nil, false, true
			}
			return nil, v, err
		}
		code := TokenCode(res)
		switch {
		case code == InProgress || code == OutcomeUnknown:
			reached = true
			hint, _ := RetryAfter(res)
			return nil, verdict{Retry: true, Reached: true, Hint: hint}, &refusedResult{code: code}
		case reached && mcptoken.KnownCode(code):
			// A refusal of this attempt (a key reused, a state already
			// used), not the result of the call an earlier attempt may
			// have run.
			return nil, verdict{Reached: true}, &refusedResult{code: code}
		}
		return res, verdict{}, nil
	})
}

// reconnectVerdict returns the verdict on err, the error of a Reconnect:
// nothing of the call was sent; what an attempt would retry (a refused
// connection, a 5xx) is retried, anything else (a 4xx, an authorization
// required, a misconfiguration) ends the call.
func reconnectVerdict(err error) verdict { return verdict{Retry: classify(err).Retry} }

// RetryKey returns the idempotency key of the call that an
// [ErrOutcomeUnknown] error of [CallTool] ended, to call again with
// ([CallOptions].Key), and false for any other error.
func RetryKey(err error) (string, bool) { return mcptoken.RetryKey(err) }

// keyedRequest returns req with a copy of its _meta that holds the call's
// key, and the key ([mcptoken.CallKey]).
func keyedRequest(req mcp.CallToolRequest, key, keyArg string) (mcp.CallToolRequest, string, error) {
	meta := &mcp.Meta{AdditionalFields: map[string]any{}}
	if req.Params.Meta != nil {
		meta.ProgressToken = req.Params.Meta.ProgressToken
		meta.AdditionalFields = make(map[string]any, len(req.Params.Meta.AdditionalFields)+1)
		maps.Copy(meta.AdditionalFields, req.Params.Meta.AdditionalFields)
	}
	key, err := mcptoken.CallKey(key, keyArg, req.Params.Arguments, mcptoken.MetaKeyOf(meta.AdditionalFields))
	if err != nil {
		return req, "", fmt.Errorf("ctokenmcpgo: CallTool: %w", err)
	}
	delete(meta.AdditionalFields, mcptoken.LegacyMetaIdempotencyKey)
	meta.AdditionalFields[mcptoken.MetaIdempotencyKey] = key
	req.Params.Meta = meta
	return req, key, nil
}

// verdict is what one failed attempt tells CallTool.
type verdict = mcptoken.RetryVerdict

// classify returns the verdict on err, the error of an attempt made while
// its context was live. What it cannot prove did not run is Reached.
func classify(err error) verdict {
	var te *transport.Error
	if !errors.As(err, &te) {
		// The server's JSON-RPC error, or the client's own.
		switch {
		case errors.Is(err, mcp.ErrInternalError):
			if hint, ok := StateRetryAfter(err); ok {
				return verdict{Retry: true, Reached: true, Hint: hint}
			}
			switch msg := sdkInternalMessage(err); {
			case strings.HasSuffix(msg, recordedSuffix):
				// The tool's failure, recorded: every call under the
				// key gets it.
				return verdict{Reached: true, Recorded: true}
			case msg == ErrIdempotencyStore.Error():
				return verdict{Retry: true, Reached: true}
			case msg == ErrNoCaller.Error(), msg == ErrStoreUnavailable.Error(), refusedState(msg):
				// Refusals of SecureRequestState and of a caller: the
				// tool did not run.
				return verdict{}
			}
			// A tool that failed after it began, among others.
			return verdict{Reached: true}
		case errors.Is(err, mcp.ErrParseError), errors.Is(err, mcp.ErrInvalidRequest),
			errors.Is(err, mcp.ErrMethodNotFound), errors.Is(err, mcp.ErrInvalidParams),
			errors.As(err, new(mcp.HeaderMismatchError)), errors.As(err, new(mcp.MissingRequiredClientCapabilityError)),
			errors.As(err, new(mcp.UnsupportedProtocolVersionError)), sdkNotInitialized(err):
			// Refused before any tool ran, or never sent.
			return verdict{}
		}
		// An error of another code, whose text alone mcp-go keeps, or
		// one of the client's own after the call was sent (a round's
		// input that could not be gathered): it may have run.
		return verdict{Reached: true}
	}
	var op *net.OpError
	var auth *transport.AuthorizationRequiredError
	var oauth *transport.OAuthAuthorizationRequiredError
	switch status := sdkHTTPStatus(err); {
	case errors.Is(err, transport.ErrSessionTerminated):
		// The server's 404 for a session it no longer has: not run,
		// and the transport sends nothing more.
		return verdict{Closed: true}
	case errors.Is(err, transport.ErrTransportClosed), errors.Is(err, context.Canceled):
		// A closed stdio transport, or a client closed while the call
		// was in flight (mcp-go cancels the request's context).
		return verdict{Reached: true, Closed: true}
	case errors.As(err, &op) && op.Op == "dial":
		return verdict{Retry: true}
	case errors.As(err, &auth), errors.As(err, &oauth), status >= 400 && status < 500 && status != http.StatusRequestTimeout && status != http.StatusTooManyRequests:
		// Refused by the server or a proxy before any tool ran.
		return verdict{}
	}
	// An HTTP exchange that failed after its connection was made, a
	// response cut off, a 5xx (a proxy's 502 after its upstream ran the
	// tool), a 408 or 429: the call may have run.
	return verdict{Retry: true, Reached: true}
}

// refusedState reports whether msg is the text of a [Rejection] of a
// cursor or request state, which ends " (ctokenCode N)": the tool did not
// run.
func refusedState(msg string) bool {
	for _, code := range []int{ctoken.CodeCursorExpired, ctoken.CodeCursorInvalid, StateExpired, StateInvalid, StateUsed, RoundInterrupted} {
		if strings.HasSuffix(msg, " ("+MetaTokenCode+" "+strconv.Itoa(code)+")") {
			return true
		}
	}
	return false
}

// refusedResult is the error CallTool keeps for an attempt answered with
// a tool error result that is no result of the call: [InProgress] or
// [OutcomeUnknown], which say retry, or, after an attempt that may have
// run the tool, any other ctoken refusal (a key reused, a state already
// used).
type refusedResult struct{ code int }

func (r *refusedResult) Error() string {
	switch r.code {
	case InProgress:
		return "ctokenmcpgo: tool error result: a call with this idempotency key is in progress (ctokenCode 1025)"
	case OutcomeUnknown:
		return "ctokenmcpgo: tool error result: the outcome of this call is unknown (ctokenCode 1028)"
	}
	return fmt.Sprintf("ctokenmcpgo: tool error result: the attempt was refused (ctokenCode %d)", r.code)
}

// Unwrap returns mcptoken.ErrInProgress for 1025, mcptoken.ErrOutcomeUnknown
// for 1028, and nil for any other code.
func (r *refusedResult) Unwrap() error {
	switch r.code {
	case InProgress:
		return mcptoken.ErrInProgress
	case OutcomeUnknown:
		return mcptoken.ErrOutcomeUnknown
	}
	return nil
}
