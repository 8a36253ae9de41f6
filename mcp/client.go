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
	return mcptoken.CallWithRetries(ctx, "ctokenmcp", ErrOutcomeUnknown, key, attempts, elapsed, func() (*mcp.CallToolResult, mcptoken.RetryVerdict, error) {
		res, err := cs.CallTool(ctx, p)
		if err != nil {
			return nil, classify(err), err
		}
		return res, mcptoken.RetryVerdict{}, nil
	})
}

// RetryKey returns the idempotency key of the call that an
// [ErrOutcomeUnknown] error of [CallTool] ended, to call again with
// ([CallOptions].Key), and false for any other error.
func RetryKey(err error) (string, bool) { return mcptoken.RetryKey(err) }

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
type verdict = mcptoken.RetryVerdict

// classify returns the verdict on err, the error of an attempt, made
// while its context was live.
func classify(err error) verdict {
	if errors.Is(err, mcp.ErrConnectionClosed) || errors.Is(err, mcp.ErrSessionMissing) {
		// Refused by the client's connection, or by the server for a
		// session it no longer has: not run.
		return verdict{Closed: true}
	}
	var we *jsonrpc.Error
	if errors.As(err, &we) { // the first is the server's, when it sent one
		if we.Code == codeRejected {
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
	case strings.HasSuffix(err.Error(), "request terminated without response"):
		// go-sdk v1.8.0's error, without a type, of a response stream
		// (SSE) that ended before the call's response: the session
		// lives on.
		return verdict{Retry: true, Reached: true}
	case strings.Contains(err.Error(), ": failed to read body: "):
		// go-sdk v1.8.0's error, without a type, of a JSON response
		// cut off: the connection has failed.
		return verdict{Reached: true, Closed: true}
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
		return verdict{Retry: true, Reached: true, Hint: hint}
	case we.Code == jsonrpc.CodeInternalError && d.Code == 0 && we.Message == msgStoreUnavailable:
		return verdict{Retry: true, Reached: true}
	}
	return verdict{}
}
