package ctokenmcp

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	mrand "math/rand/v2"
	"net"
	"strings"
	"time"

	"github.com/ctoken/ctoken"
	"github.com/ctoken/ctoken/idempotency"
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

// Waits between the attempts a server gives no hint for: the first after
// firstBackoff, each next one after twice the last, at most maxBackoff,
// each taken at random in its upper half.
const (
	firstBackoff = 100 * time.Millisecond
	maxBackoff   = 2 * time.Second
)

// codeRejected is the JSON-RPC code of go-sdk's jsonrpc2.ErrRejected
// ("rejected by transport"), an internal package's error: a request the
// client's transport could not deliver or whose answer it did not get,
// never a code a ctoken server sends.
const codeRejected = -32005

// msgStoreUnavailable is the message of [Idempotency.Wrap]'s -32603 for a
// store that could not answer, which carries no ctoken code.
const msgStoreUnavailable = "idempotency store unavailable: retry later"

// CallTool calls params' tool on cs once as a logical call: every attempt
// sends the same params with the same idempotency key in the _meta member
// [mcptoken.MetaIdempotencyKey], so that a tool wrapped by
// [Idempotency.Wrap] (with KeyFromMeta) runs at most once, and every retry
// gets its first result. The key is opts.Key, else the one params' _meta
// already holds, else a fresh random one (128 bits from crypto/rand,
// base64url). params is not modified. A server without ctoken sees an
// ordinary call with one more _meta member, and runs the tool once per
// attempt that reaches it: against it a retry is not exactly-once.
//
// An attempt is made again when its answer was lost or the server says
// to retry: after a transport failure (go-sdk's -32005 "rejected by
// transport" for a connection refused, reset or closed before the
// response; a response stream cut off), and after [InProgress] (1025),
// [StateBusy] (1027), the [OutcomeUnknown] (1028) of a -32603 error and
// the -32603 "idempotency store unavailable". It waits for the refusal's
// retryAfterMs, else for a backoff (100 ms, doubling, at most 2 s,
// jittered). Anything else ends the call at once and is returned as it
// is: a result (one with IsError too), a JSON-RPC error such as -32602,
// [KeyReused] or the 1028 of an interrupted round (a -32602 error, which
// no retry settles), an error of the client itself.
//
// By default there are at most 5 attempts, started within 30 seconds (see
// [CallOptions]); ctx's end stops a wait at once. A call that ends without
// a result after an attempt that may have reached the server (the budget
// spent, the session closed, ctx done) returns an error matching
// [ErrOutcomeUnknown] and the last attempt's error; [RetryKey] returns its
// key, and CallOptions.Key with it calls again. A session that closed
// (mcp.ErrConnectionClosed, mcp.ErrSessionMissing) carries no further
// attempt. No error holds the key in its text.
//
// Refused before anything is sent: a nil cs or params, a key that is
// malformed or not a string in _meta, or that differs from opts.Key
// (matching mcptoken.ErrIdempotencyKey), a negative field of opts
// (ctoken.ErrConfig).
func CallTool(ctx context.Context, cs *mcp.ClientSession, params *mcp.CallToolParams, opts CallOptions) (*mcp.CallToolResult, error) {
	if cs == nil || params == nil {
		return nil, fmt.Errorf("ctokenmcp: CallTool: %w: nil session or params", ctoken.ErrConfig)
	}
	if opts.MaxAttempts < 0 || opts.MaxElapsed < 0 {
		return nil, fmt.Errorf("ctokenmcp: CallTool: %w: MaxAttempts or MaxElapsed is negative", ctoken.ErrConfig)
	}
	attempts, elapsed := opts.MaxAttempts, opts.MaxElapsed
	if attempts == 0 {
		attempts = defaultCallAttempts
	}
	if elapsed == 0 {
		elapsed = defaultCallElapsed
	}
	p, key, err := keyedParams(params, opts.Key)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(elapsed)
	c := &callError{key: key}
	for {
		if err := ctx.Err(); err != nil {
			return nil, c.end("the context ended", err)
		}
		c.attempts++
		res, err := cs.CallTool(ctx, p)
		if err == nil {
			return res, nil
		}
		c.last = err
		if ctx.Err() != nil {
			c.unknown = true // the attempt may have been sent
			return nil, c.end("the context ended", ctx.Err())
		}
		v := classify(err)
		c.unknown = c.unknown || v.reached
		switch {
		case v.closed:
			return nil, c.end("the session closed", nil)
		case !v.retry:
			return nil, err
		case c.attempts >= attempts:
			return nil, c.end("no attempt left", nil)
		}
		wait := v.hint
		if wait <= 0 {
			wait = backoff(c.attempts)
		}
		left := time.Until(deadline)
		if left <= 0 {
			return nil, c.end("no time left", nil)
		}
		t := time.NewTimer(min(wait, left))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, c.end("the context ended", ctx.Err())
		case <-t.C:
		}
	}
}

// RetryKey returns the idempotency key of the call that an
// [ErrOutcomeUnknown] error of [CallTool] ended, to call again with
// ([CallOptions].Key), and false for any other error.
func RetryKey(err error) (string, bool) {
	var c *callError
	if !errors.As(err, &c) || !c.unknown {
		return "", false
	}
	return c.key, true
}

// keyedParams returns a copy of params whose _meta holds the call's key,
// and the key.
func keyedParams(params *mcp.CallToolParams, key string) (*mcp.CallToolParams, string, error) {
	bad := func(msg string) error {
		return fmt.Errorf("ctokenmcp: CallTool: %w: %s", mcptoken.ErrIdempotencyKey, msg)
	}
	v, inMeta := params.Meta[mcptoken.MetaIdempotencyKey]
	if inMeta {
		s, ok := v.(string)
		switch {
		case !ok:
			return nil, "", bad("_meta " + mcptoken.MetaIdempotencyKey + " is not a string")
		case key != "" && s != key:
			return nil, "", bad("_meta " + mcptoken.MetaIdempotencyKey + " holds another key than CallOptions.Key")
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
		return nil, "", bad("the key is empty, over 255 bytes, or holds a byte outside visible ASCII, or one of \" \\ , ;")
	}
	p := *params
	p.Meta = make(mcp.Meta, len(params.Meta)+4) // and the SDK's own three members
	maps.Copy(p.Meta, params.Meta)
	p.Meta[mcptoken.MetaIdempotencyKey] = key
	return &p, key, nil
}

// verdict is what one failed attempt tells CallTool.
type verdict struct {
	retry   bool          // make another attempt
	reached bool          // the request may have reached the server
	closed  bool          // the session can carry no other attempt
	hint    time.Duration // the server's retry hint; 0: back off
}

// classify returns the verdict on err, the error of an attempt, made
// while its context was live.
func classify(err error) verdict {
	if errors.Is(err, mcp.ErrConnectionClosed) || errors.Is(err, mcp.ErrSessionMissing) {
		// Refused by the client's connection, or by the server for a
		// session it no longer has: not run.
		return verdict{closed: true}
	}
	var we *jsonrpc.Error
	if errors.As(err, &we) { // the first is the server's, when it sent one
		if we.Code == codeRejected {
			var op *net.OpError
			return verdict{retry: true, reached: !errors.As(err, &op) || op.Op != "dial"}
		}
		return refusal(we)
	}
	switch {
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		// A connection (in-memory, stdio) that ended while the call
		// was in flight: closed for good.
		return verdict{reached: true, closed: true}
	case strings.HasSuffix(err.Error(), "request terminated without response"):
		// go-sdk v1.8.0's error, without a type, of a response stream
		// (SSE) that ended before the call's response: the session
		// lives on.
		return verdict{retry: true, reached: true}
	case strings.Contains(err.Error(), ": failed to read body: "):
		// go-sdk v1.8.0's error, without a type, of a JSON response
		// cut off: the connection has failed.
		return verdict{reached: true, closed: true}
	}
	return verdict{}
}

// refusal returns the verdict on we, a JSON-RPC error the server sent.
func refusal(we *jsonrpc.Error) verdict {
	var d idempotencyData
	if len(we.Data) > 0 && json.Unmarshal(we.Data, &d) != nil {
		return verdict{}
	}
	hint := time.Duration(max(d.RetryAfterMs, 0)) * time.Millisecond
	switch {
	case we.Code == jsonrpc.CodeInternalError && (d.Code == InProgress || d.Code == OutcomeUnknown),
		we.Code == jsonrpc.CodeInvalidParams && d.Code == StateBusy:
		return verdict{retry: true, reached: true, hint: hint}
	case we.Code == jsonrpc.CodeInternalError && d.Code == 0 && we.Message == msgStoreUnavailable:
		return verdict{retry: true, reached: true}
	}
	return verdict{}
}

// backoff returns the wait after the n-th attempt (from 1) when the
// server gave no hint.
func backoff(n int) time.Duration {
	d := maxBackoff
	if n < 6 {
		d = min(firstBackoff<<(n-1), maxBackoff)
	}
	return d/2 + mrand.N(d/2+1)
}

// callError is the error of a call of [CallTool] that ended without a
// result after a retryable failure. Its text never holds the key.
type callError struct {
	key      string
	attempts int
	unknown  bool  // an attempt may have reached the server
	last     error // the last attempt's error
	why      string
	cause    error // the context's error, if it ended the call
}

// end completes c with why the call ended and cause, and returns it.
func (c *callError) end(why string, cause error) error {
	if c.attempts == 0 {
		return cause // nothing sent: the context had ended
	}
	c.why, c.cause = why, cause
	return c
}

func (c *callError) Error() string {
	what := "the tool call was not delivered"
	if c.unknown {
		what = "the outcome of the tool call is unknown: call again under the same idempotency key, never a new one"
	}
	s := fmt.Sprintf("ctokenmcp: %s (%d attempts; %s)", what, c.attempts, c.why)
	if c.cause != nil && !errors.Is(c.last, c.cause) {
		s += ": " + c.cause.Error()
	}
	return s + ": " + c.last.Error()
}

// Unwrap returns [ErrOutcomeUnknown] when the outcome is unknown, the
// context's error that ended the call, and the last attempt's error.
func (c *callError) Unwrap() []error {
	errs := make([]error, 0, 3)
	if c.unknown {
		errs = append(errs, ErrOutcomeUnknown)
	}
	if c.cause != nil {
		errs = append(errs, c.cause)
	}
	return append(errs, c.last)
}

// GoString keeps the key out of %#v.
func (c *callError) GoString() string { return fmt.Sprintf("&ctokenmcp.callError{%q}", c.Error()) }
