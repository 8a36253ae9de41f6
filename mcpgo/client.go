package ctokenmcpgo

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/ctoken/ctoken"
	"github.com/ctoken/ctoken/idempotency"
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
	// MaxAttempts bounds the attempts, the first included. Zero means 5.
	MaxAttempts int
	// MaxElapsed bounds the time in which attempts start: no wait
	// between attempts extends past it, and none starts after it. An
	// attempt in flight is bounded by the caller's context only. Zero
	// means 30 seconds.
	MaxElapsed time.Duration
}

// CallOptions defaults, as documented on its fields.
const (
	defaultCallAttempts = 5
	defaultCallElapsed  = 30 * time.Second
)

// CallTool calls req's tool through c once as a logical call: every
// attempt sends the same request with the same idempotency key in the
// _meta member [mcptoken.MetaIdempotencyKey], so that a tool wrapped by
// [Idempotency.Wrap] (with KeyFromMeta) runs at most once, and every retry
// gets its first result. The key is opts.Key, else the one req's _meta
// already holds, else a fresh random one (128 bits from crypto/rand,
// base64url). The caller's request and its _meta are not modified. A
// server without ctoken sees an ordinary call with one more _meta member,
// and runs the tool once per attempt that reaches it: against it a retry
// is not exactly-once.
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
// cut off, a response stream (SSE) that ended before the response), after
// a tool error result with _meta ctokenCode [InProgress] (1025) or
// [OutcomeUnknown] (1028), after a JSON-RPC -32603 [StateBusy] (1027)
// refusal and after the -32603 [ErrIdempotencyStore] (which mcp-go cannot
// tell from a first result that was not recorded: such a call is retried
// until its budget ends). It waits for the refusal's retryAfterMs
// ([RetryAfter], [StateRetryAfter]), else for a backoff (100 ms, doubling,
// at most 2 s, jittered). Anything else ends the call at once and is
// returned as it is: a result (a tool error result too, [KeyReused] among
// them), a JSON-RPC error (the -32603 "(ctokenCode 1028)" of an
// interrupted round, which no retry settles, among them), an error of the
// client itself.
//
// A 1025 or 1028 result is never returned as the call's result. By
// default there are at most 5 attempts, started within 30 seconds (see
// [CallOptions]); ctx's end stops a wait at once. A call that ends without
// a result after an attempt that may have reached the server (the budget
// spent, the session or client closed, ctx done) returns a nil result and
// an error matching [ErrOutcomeUnknown] and the last attempt's error,
// which for a 1025 or 1028 result is an error matching
// [mcptoken.ErrInProgress] or [mcptoken.ErrOutcomeUnknown]; [RetryKey]
// returns its key, and CallOptions.Key with it calls again. A session the
// server ended (transport.ErrSessionTerminated), a closed client or stdio
// transport carries no further attempt. No error holds the key in its
// text.
//
// Refused before anything is sent: a nil c, a key that is malformed or
// not a string in _meta, or that differs from opts.Key (matching
// mcptoken.ErrIdempotencyKey), a negative field of opts (ctoken.ErrConfig).
func CallTool(ctx context.Context, c *client.Client, req mcp.CallToolRequest, opts CallOptions) (*mcp.CallToolResult, error) {
	if c == nil {
		return nil, fmt.Errorf("ctokenmcpgo: CallTool: %w: nil client", ctoken.ErrConfig)
	}
	if opts.MaxAttempts < 0 || opts.MaxElapsed < 0 {
		return nil, fmt.Errorf("ctokenmcpgo: CallTool: %w: MaxAttempts or MaxElapsed is negative", ctoken.ErrConfig)
	}
	attempts, elapsed := opts.MaxAttempts, opts.MaxElapsed
	if attempts == 0 {
		attempts = defaultCallAttempts
	}
	if elapsed == 0 {
		elapsed = defaultCallElapsed
	}
	req, key, err := keyedRequest(req, opts.Key)
	if err != nil {
		return nil, err
	}
	return mcptoken.CallWithRetries(ctx, "ctokenmcpgo", ErrOutcomeUnknown, key, attempts, elapsed, func() (*mcp.CallToolResult, mcptoken.RetryVerdict, error) {
		res, err := c.CallTool(ctx, req)
		if err != nil {
			return nil, classify(err), err
		}
		if code := TokenCode(res); code == InProgress || code == OutcomeUnknown {
			hint, _ := RetryAfter(res)
			return nil, verdict{Retry: true, Reached: true, Hint: hint}, &refusedResult{code: code}
		}
		return res, verdict{}, nil
	})
}

// RetryKey returns the idempotency key of the call that an
// [ErrOutcomeUnknown] error of [CallTool] ended, to call again with
// ([CallOptions].Key), and false for any other error.
func RetryKey(err error) (string, bool) { return mcptoken.RetryKey(err) }

// keyedRequest returns req with a copy of its _meta that holds the call's
// key, and the key. The key is chosen and checked as ctokenmcp.CallTool
// does.
func keyedRequest(req mcp.CallToolRequest, key string) (mcp.CallToolRequest, string, error) {
	bad := func(msg string) error {
		return fmt.Errorf("ctokenmcpgo: CallTool: %w: %s", mcptoken.ErrIdempotencyKey, msg)
	}
	meta := &mcp.Meta{AdditionalFields: map[string]any{}}
	if req.Params.Meta != nil {
		meta.ProgressToken = req.Params.Meta.ProgressToken
		meta.AdditionalFields = make(map[string]any, len(req.Params.Meta.AdditionalFields)+1)
		maps.Copy(meta.AdditionalFields, req.Params.Meta.AdditionalFields)
	}
	if v, inMeta := meta.AdditionalFields[mcptoken.MetaIdempotencyKey]; inMeta {
		s, ok := v.(string)
		switch {
		case !ok:
			return req, "", bad("_meta " + mcptoken.MetaIdempotencyKey + " is not a string")
		case key != "" && s != key:
			return req, "", bad("_meta " + mcptoken.MetaIdempotencyKey + " holds another key than CallOptions.Key")
		}
		key = s
	} else if key == "" {
		var b [16]byte
		rand.Read(b[:]) // never fails (crypto/rand)
		key = base64.RawURLEncoding.EncodeToString(b[:])
	}
	// A bare key is one idempotency.ParseKey returns as it is: the
	// server's keys (a quoted or space-padded one comes back changed).
	if k, err := idempotency.ParseKey(key, mcptoken.DefaultMaxIdempotencyKeyBytes); err != nil || k != key {
		return req, "", bad("the key is empty, over 255 bytes, or holds a byte outside visible ASCII, or one of \" \\ , ;")
	}
	meta.AdditionalFields[mcptoken.MetaIdempotencyKey] = key
	req.Params.Meta = meta
	return req, key, nil
}

// verdict is what one failed attempt tells CallTool.
type verdict = mcptoken.RetryVerdict

// errNilResponse is the text of mcp-go v1.2.1's error, without a type, of
// a response stream (SSE) that ended before the call's response.
const errNilResponse = "unexpected nil response"

// classify returns the verdict on err, the error of an attempt made while
// its context was live.
func classify(err error) verdict {
	var te *transport.Error
	if !errors.As(err, &te) {
		// The server's JSON-RPC error, or the client's own.
		if !errors.Is(err, mcp.ErrInternalError) {
			return verdict{}
		}
		if hint, ok := StateRetryAfter(err); ok {
			return verdict{Retry: true, Reached: true, Hint: hint}
		}
		if err.Error() == mcp.ErrInternalError.Error()+": "+ErrIdempotencyStore.Error() {
			return verdict{Retry: true, Reached: true}
		}
		return verdict{}
	}
	var op *net.OpError
	var ue *url.Error
	switch {
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
	case errors.As(err, &ue), errors.As(err, &op), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		strings.HasSuffix(err.Error(), errNilResponse):
		// An HTTP exchange that failed after its connection was
		// made, or a response cut off: the call may have run.
		return verdict{Retry: true, Reached: true}
	}
	return verdict{}
}

// refusedResult is the error CallTool keeps for an attempt answered with
// a tool error result that says retry: [InProgress] or [OutcomeUnknown].
type refusedResult struct{ code int }

func (r *refusedResult) Error() string {
	if r.code == InProgress {
		return "ctokenmcpgo: tool error result: a call with this idempotency key is in progress (ctokenCode 1025)"
	}
	return "ctokenmcpgo: tool error result: the outcome of this call is unknown (ctokenCode 1028)"
}

// Unwrap returns mcptoken.ErrInProgress for 1025, and
// mcptoken.ErrOutcomeUnknown for 1028.
func (r *refusedResult) Unwrap() error {
	if r.code == InProgress {
		return mcptoken.ErrInProgress
	}
	return mcptoken.ErrOutcomeUnknown
}
