package ctokenmcpgo

import (
	"context"
	"errors"
	"log/slog"

	"github.com/ctoken/ctoken"
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

// caller runs f; a failure is logged and reported as ErrNoCaller, so the
// CallerFunc's own error text never reaches the client.
func caller(ctx context.Context, f CallerFunc, log *slog.Logger) (string, error) {
	id, err := f(ctx)
	if err == nil && id == "" {
		err = ErrNoCaller
	}
	if err != nil {
		log.LogAttrs(ctx, slog.LevelWarn, "ctokenmcpgo: no authenticated caller", slog.String("error", err.Error()))
		return "", ErrNoCaller
	}
	return id, nil
}

// Codes carried with a rejected request state, beside ctoken's cursor codes
// [ctoken.CodeCursorExpired] (1020) and [ctoken.CodeCursorInvalid] (1021),
// which come from the reference protocol. These two are local to ctoken (the
// same values as package ctokenmcp uses); the reference protocol defines no
// code for request state.
const (
	// StateExpired tells the client to call again without the state.
	StateExpired = 1022
	// StateInvalid reports a state that was refused as invalid.
	StateInvalid = 1023
)

// MetaTokenCode is the _meta key of a refusal's tool result that carries its
// ctoken code.
const MetaTokenCode = "ctokenCode"

// Rejection is a cursor or request state that did not verify. Its text is a
// fixed message that never contains the token or the reason; the reason goes
// to the logger. Turn it into the result the client sees with [ToolResult].
type Rejection struct {
	// Code is ctoken.CodeCursorExpired, ctoken.CodeCursorInvalid,
	// StateExpired or StateInvalid.
	Code    int
	message string
}

// Error returns the fixed message the client is shown.
func (r *Rejection) Error() string { return r.message }

// Expired reports whether the client should start over (call again without
// the token) rather than treat the token as forged.
func (r *Rejection) Expired() bool {
	return r.Code == ctoken.CodeCursorExpired || r.Code == StateExpired
}

var (
	cursorExpired = &Rejection{Code: ctoken.CodeCursorExpired, message: "expired cursor: call again without a cursor (ctokenCode 1020)"}
	cursorInvalid = &Rejection{Code: ctoken.CodeCursorInvalid, message: "invalid cursor (ctokenCode 1021)"}
	stateExpired  = &Rejection{Code: StateExpired, message: "expired requestState: call again without it (ctokenCode 1022)"}
	stateInvalid  = &Rejection{Code: StateInvalid, message: "invalid requestState (ctokenCode 1023)"}
)

// ToolResult turns the error of a tool handler into what the handler
// returns. A [*Rejection] becomes a tool error result (isError true) whose
// text is the rejection's message and whose _meta carries
// {"ctokenCode": code}; any other error is returned as is, which mcp-go sends
// as JSON-RPC error -32603. A nil err returns nil, nil.
//
// mcp-go (v1.2.1) sends every error a handler returns as -32603 and offers no
// way to choose the code, so a refused token cannot be the -32602 that
// package ctokenmcp sends; a tool error result is how mcp-go tells a client
// (and the model) that its input was wrong.
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
	switch code {
	case ctoken.CodeCursorExpired, ctoken.CodeCursorInvalid, StateExpired, StateInvalid:
		return code
	}
	return 0
}

// logger returns l, or a logger that discards everything.
func logger(l *slog.Logger) *slog.Logger {
	if l != nil {
		return l
	}
	return slog.New(slog.DiscardHandler)
}
