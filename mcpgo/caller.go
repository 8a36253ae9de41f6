package ctokenmcpgo

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/ctoken/ctoken"
	"github.com/ctoken/ctoken/mcptoken"
	"github.com/mark3labs/mcp-go/mcp"
)

// ErrNoCaller reports a request without an authenticated caller. Tokens are
// never issued to, or accepted from, an anonymous request. mcp-go sends it,
// like every error a handler returns, as JSON-RPC error -32603.
var ErrNoCaller = errors.New("ctokenmcpgo: request has no authenticated caller")

// ErrStoreUnavailable reports that the replay store of a single-use codec
// could not answer (full, unreachable, request cancelled). The state was not
// consumed. mcp-go sends it as JSON-RPC error -32603.
var ErrStoreUnavailable = errors.New("ctokenmcpgo: request state store unavailable")

// ErrInternal reports a token the server could not judge at all: its codec
// or issuer has no key (one not made by ctoken.NewRequestStateCodec or
// ctoken.NewCursorIssuer, which NewStates and NewCursors refuse up front).
// It is logged at Error; mcp-go sends it as JSON-RPC error -32603.
var ErrInternal = errors.New("ctokenmcpgo: internal error")

// CallerFunc returns the stable identity of the authenticated caller of the
// request whose context is ctx (a user or client ID), or an error. It must
// never return "" with a nil error; this package treats "" as [ErrNoCaller].
type CallerFunc func(ctx context.Context) (string, error)

type callerKey struct{}

// WithCaller returns a copy of ctx naming id as the authenticated caller, for
// [ContextCaller]. Call it where the request is authenticated: in a
// server.WithHTTPContextFunc for the streamable HTTP transport (after checking
// the bearer token), or on the client's context for an in-process client.
func WithCaller(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, callerKey{}, id)
}

// ContextCaller is the default CallerFunc: the caller stored in the request's
// context by [WithCaller]. mcp-go has no authentication of its own, so a
// server that never calls WithCaller refuses every token with [ErrNoCaller].
func ContextCaller(ctx context.Context) (string, error) {
	id, _ := ctx.Value(callerKey{}).(string)
	if id == "" {
		return "", ErrNoCaller
	}
	return id, nil
}

// FixedCaller returns a CallerFunc that names id as the caller of every
// request: for a transport whose peer is known by construction, such as a
// stdio server started by one local user. An empty id makes every request
// fail with [ErrNoCaller].
func FixedCaller(id string) CallerFunc {
	return func(context.Context) (string, error) {
		if id == "" {
			return "", ErrNoCaller
		}
		return id, nil
	}
}

// Codes carried with a rejected request state, beside ctoken's cursor codes
// [ctoken.CodeCursorExpired] (1020) and [ctoken.CodeCursorInvalid] (1021),
// which come from the reference protocol. These two are local to ctoken (the
// values of [mcptoken.CodeStateExpired] and [mcptoken.CodeStateInvalid],
// which package ctokenmcp uses too); the reference protocol defines no code
// for request state.
const (
	StateExpired     = mcptoken.CodeStateExpired     // call again without the state
	StateInvalid     = mcptoken.CodeStateInvalid     // forged, edited, another caller's or other arguments'
	StateUsed        = mcptoken.CodeStateUsed        // see [mcptoken.CodeStateUsed]
	StateBusy        = mcptoken.CodeStateBusy        // see [mcptoken.CodeStateBusy]; the message carries [StateRetryAfter]
	RoundInterrupted = mcptoken.CodeRoundInterrupted // see [mcptoken.CodeRoundInterrupted]
)

// MetaTokenCode is the _meta key of a refusal's tool result that carries its
// ctoken code.
const MetaTokenCode = "ctokenCode"

// Rejection is a cursor or request state that did not verify. Its text is a
// fixed message that never contains the token or the reason (a [StateBusy]
// one also carries its retry hint, see [StateRetryAfter]); the reason goes
// to the logger. In a handler, turn it into the result the client sees
// with [ToolResult]; [SecureRequestState] sends a refused requestState as a
// JSON-RPC error -32603 whose message is the rejection's text.
type Rejection struct {
	// Code is ctoken.CodeCursorExpired, ctoken.CodeCursorInvalid,
	// StateExpired, StateInvalid, StateUsed or StateBusy.
	Code    int
	message string
	// retryAfter is the hint of a StateBusy rejection; 0 for the others.
	retryAfter time.Duration
}

// Error returns the fixed message the client is shown.
func (r *Rejection) Error() string { return r.message }

// Expired reports whether the client should start over (call again without
// the token) rather than treat the token as forged.
func (r *Rejection) Expired() bool { return mcptoken.Refusal{Code: r.Code}.Expired() }

// Busy reports whether the client should retry the same call later with the
// same state ([StateBusy]).
func (r *Rejection) Busy() bool { return mcptoken.Refusal{Code: r.Code}.Busy() }

// The six rejections without a hint, built once: the message of
// [mcptoken.Refusal] followed by its code.
var (
	cursorExpired = newRejection(mcptoken.RefuseCursor(ctoken.ErrCursorExpired))
	cursorInvalid = newRejection(mcptoken.RefuseCursor(ctoken.ErrCursorInvalid))
	stateExpired  = newRejection(mcptoken.RefuseState(ctoken.ErrStateExpired))
	stateInvalid  = newRejection(mcptoken.RefuseState(ctoken.ErrStateInvalid))
	stateUsed     = newRejection(mcptoken.RefuseState(mcptoken.ErrStateUsed))
	// roundInterrupted: the round of the state began under a server that
	// stopped before recording it (ctokenCode 1029, no hint).
	roundInterrupted = newRejection(mcptoken.RefuseState(mcptoken.ErrRoundInterrupted))
)

// newRejection returns the Rejection of r: its message, then, for a
// StateBusy refusal, " (retryAfterMs N)" (N its hint in whole
// milliseconds, at least 1), then " (ctokenCode C)".
func newRejection(r mcptoken.Refusal) *Rejection {
	if !r.Busy() {
		return &Rejection{Code: r.Code, message: fmt.Sprintf("%s (ctokenCode %d)", r.Message, r.Code)}
	}
	ms := max(r.RetryAfter.Milliseconds(), 1)
	return &Rejection{
		Code:       r.Code,
		message:    fmt.Sprintf("%s (%s %d) (ctokenCode %d)", r.Message, MetaRetryAfterMs, ms, r.Code),
		retryAfter: time.Duration(ms) * time.Millisecond,
	}
}

// rejection returns the Rejection of a refused token (r is not a store
// failure); anything but the six other codes is invalid state.
func rejection(r mcptoken.Refusal) *Rejection {
	switch r.Code {
	case ctoken.CodeCursorExpired:
		return cursorExpired
	case ctoken.CodeCursorInvalid:
		return cursorInvalid
	case StateExpired:
		return stateExpired
	case StateUsed:
		return stateUsed
	case StateBusy:
		return newRejection(r) // its own hint
	case OutcomeUnknown:
		return roundInterrupted
	}
	return stateInvalid
}

// integration returns the description of this package the shared core
// reports through, logging to log: a request without a caller is
// [ErrNoCaller], and a refused token the error [refusal] builds.
func integration(log *slog.Logger) *mcptoken.Integration {
	return &mcptoken.Integration{Name: "ctokenmcpgo", Log: log, NoCaller: func() error { return ErrNoCaller }, Refused: refusal}
}

// refusal is the error a handler returns for a refused token: a
// [*Rejection], or [ErrInternal] for a codec or issuer without a key, or
// [ErrStoreUnavailable] for a replay store that could not answer.
func refusal(r mcptoken.Refusal) error {
	if r.Internal {
		return ErrInternal
	}
	if r.StoreFailed {
		return ErrStoreUnavailable
	}
	return rejection(r)
}

// maxRetryAfterMs bounds the hint [StateRetryAfter] accepts: an hour, as
// [RetryAfter] bounds a tool result's.
const maxRetryAfterMs = int64(time.Hour / time.Millisecond)

// StateRetryAfter returns the retry hint of a [StateBusy] refusal: from
// the error a client gets for it (from client.CallTool: mcp-go sends it as
// JSON-RPC error -32603 with no data member, so the hint is in the
// message, which ends "(retryAfterMs N) (ctokenCode 1027)"), or from the
// [*Rejection] itself on the server side. The hint is how long the
// round's lease still runs, at most a second. It returns false for any
// other error, and for a hint that is not a whole number of milliseconds
// from 1 to an hour.
func StateRetryAfter(err error) (time.Duration, bool) {
	var r *Rejection
	if errors.As(err, &r) {
		return r.retryAfter, r.Busy() && r.retryAfter > 0
	}
	if err == nil {
		return 0, false
	}
	rest, ok := sdkCutMessageEnd(err, ") (ctokenCode "+strconv.Itoa(StateBusy)+")")
	if !ok {
		return 0, false
	}
	i := strings.LastIndex(rest, " ("+MetaRetryAfterMs+" ")
	if i < 0 {
		return 0, false
	}
	digits := rest[i+len(" ("+MetaRetryAfterMs+" "):]
	if digits == "" || len(digits) > 7 || strings.Trim(digits, "0123456789") != "" {
		return 0, false
	}
	ms, err := strconv.ParseInt(digits, 10, 64)
	if err != nil || ms < 1 || ms > maxRetryAfterMs {
		return 0, false
	}
	return time.Duration(ms) * time.Millisecond, true
}

// ToolResult turns the error of a tool handler into what the handler
// returns. A [*Rejection] becomes a tool error result (isError true) whose
// text is the rejection's message and whose _meta carries
// {"ctokenCode": code}; any other error is returned as is, which mcp-go sends
// as JSON-RPC error -32603. A nil err returns nil, nil.
//
// mcp-go (v1.2.1) sends every error a handler returns as -32603 and offers no
// way to choose the code, so a refused token cannot be the -32602 that
// package ctokenmcp sends; a tool error result is how mcp-go tells a client
// (and the model) that its input was wrong. Use it for cursors, which are
// tool arguments a model can correct. [SecureRequestState] does not use it
// for a refused requestState: it sends a JSON-RPC error, since a client
// must not take a refused state for the tool's answer (the official MCP
// conformance suite's input-required-result-tampered-state accepts only an
// error); a handler of [States.OpenTool] can do the same by returning the
// error unwrapped.
func ToolResult(err error) (*mcp.CallToolResult, error) {
	var r *Rejection
	if !errors.As(err, &r) {
		return nil, err
	}
	res := mcp.NewToolResultError(r.message)
	res.Meta = mcp.NewMetaFromMap(map[string]any{MetaTokenCode: r.Code})
	return res, nil
}

// TokenCode returns the ctoken code of a tool result made by [ToolResult]
// (as a client sees it), or 0 for any other result.
func TokenCode(res *mcp.CallToolResult) int {
	if res == nil || !res.IsError || res.Meta == nil {
		return 0
	}
	var code int
	switch v := res.Meta.AdditionalFields[MetaTokenCode].(type) {
	case int:
		code = v
	case float64:
		if v != float64(int(v)) {
			return 0
		}
		code = int(v)
	default:
		return 0
	}
	if !mcptoken.KnownCode(code) {
		return 0
	}
	return code
}

// callerOr returns f, or the default CallerFunc, ContextCaller, for nil.
func callerOr(f CallerFunc) CallerFunc {
	if f == nil {
		return ContextCaller
	}
	return f
}
