package ctokenmcp

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"time"

	"github.com/ctoken/ctoken/mcptoken"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// ErrNoCaller reports a request without an authenticated caller. Tokens are
// never issued to, or accepted from, an anonymous request.
var ErrNoCaller = errors.New("ctokenmcp: request has no authenticated caller")

// errNilRequest reports a nil request, or one without params.
var errNilRequest = errors.New("ctokenmcp: nil request")

// CallerFunc returns the stable identity of the authenticated caller of req
// (a user or client ID), or an error. It must never return "" with a nil
// error; the helpers of this package treat "" as ErrNoCaller.
type CallerFunc func(ctx context.Context, req mcp.Request) (string, error)

// TokenUserID is the default CallerFunc: the UserID of the request's bearer
// token, as set by auth.RequireBearerToken on the streamable HTTP transport
// (req.GetExtra().TokenInfo.UserID). It returns ErrNoCaller when the request
// carries no token or the token names no user.
func TokenUserID(_ context.Context, req mcp.Request) (string, error) {
	if req == nil {
		return "", ErrNoCaller
	}
	extra := req.GetExtra()
	if extra == nil || extra.TokenInfo == nil || extra.TokenInfo.UserID == "" {
		return "", ErrNoCaller
	}
	return extra.TokenInfo.UserID, nil
}

// FixedCaller returns a CallerFunc that names id as the caller of every
// request. Use it for a transport whose peer is known by construction, such
// as a stdio server started by one local user. An empty id makes every
// request fail with ErrNoCaller.
func FixedCaller(id string) CallerFunc {
	return func(context.Context, mcp.Request) (string, error) {
		if id == "" {
			return "", ErrNoCaller
		}
		return id, nil
	}
}

// integration returns the description of this package the shared core
// reports through, logging to log: a request without a caller is a JSON-RPC
// internal error (-32603), since a request without a caller reaching a tool
// is a server configuration problem, not bad input, and a refused token is
// the error [refused] builds.
func integration(log *slog.Logger) *mcptoken.Integration {
	return &mcptoken.Integration{
		Name: "ctokenmcp",
		Log:  log,
		NoCaller: func() error {
			return &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "no authenticated caller"}
		},
		Refused: refused,
	}
}

// refused is the error the client is sent for a refused token: -32602 with
// the token code in data (and, for [StateBusy], the retry hint as
// "retryAfterMs"), or -32603 for a replay store that could not answer or a
// codec or issuer without a key (Internal).
func refused(r mcptoken.Refusal) error {
	if r.StoreFailed || r.Internal {
		return &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: r.Message}
	}
	if r.Busy() {
		data, _ := json.Marshal(errorData{Code: r.Code, RetryAfterMs: max(r.RetryAfter.Milliseconds(), 1)}) // cannot fail
		return &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: r.Message, Data: data}
	}
	return invalidParams(r.Message, r.Code)
}

// callerOf returns the authenticated caller of req as f finds it, or the
// -32603 error sent for a request without one (f's own error goes to the
// log, not to the client).
func callerOf(ctx context.Context, in *mcptoken.Integration, f CallerFunc, req mcp.Request) (string, error) {
	id, err := f(ctx, req)
	return in.Caller(ctx, id, err)
}

// Codes in the data member ({"ctokenCode":N}) of a rejected request state's
// -32602 error, the same values package mcptoken defines and the mcp-go
// integration sends.
//
// Cursors use ctoken.CodeCursorExpired (1020) and ctoken.CodeCursorInvalid
// (1021), the codes of the reference protocol. StateExpired (1022) and
// StateInvalid (1023), StateUsed (1026) and StateBusy (1027) are local to
// ctoken: the reference protocol defines no code for a refused
// requestState, and no other implementation is known to send or understand
// them.
const (
	StateExpired     = mcptoken.CodeStateExpired     // call again without the state
	StateInvalid     = mcptoken.CodeStateInvalid     // forged, edited, another caller's or other arguments'
	StateUsed        = mcptoken.CodeStateUsed        // see [mcptoken.CodeStateUsed]
	StateBusy        = mcptoken.CodeStateBusy        // see [mcptoken.CodeStateBusy]; data holds "retryAfterMs"
	RoundInterrupted = mcptoken.CodeRoundInterrupted // see [mcptoken.CodeRoundInterrupted]
)

// errorData is the data member of the -32602 errors this package returns.
type errorData struct {
	// Code is ctoken.CodeCursorExpired or ctoken.CodeCursorInvalid for a
	// cursor; StateExpired, StateInvalid, StateUsed, StateBusy or
	// RoundInterrupted for a request state.
	Code int `json:"ctokenCode"`
	// RetryAfterMs is, for StateBusy, the milliseconds after which to
	// retry: how long the round's lease still runs, at most 1000, and at
	// least 1. Absent for every other code.
	RetryAfterMs int64 `json:"retryAfterMs,omitempty"`
}

// invalidParams returns the -32602 error for a rejected token.
func invalidParams(message string, code int) *jsonrpc.Error {
	data, _ := json.Marshal(errorData{Code: code}) // cannot fail
	return &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: message, Data: data}
}

// TokenErrorCode returns the ctoken code in the data member of a JSON-RPC
// error returned by this package (for example as seen by a client from
// ClientSession.CallTool): ctoken.CodeCursorExpired, ctoken.CodeCursorInvalid,
// StateExpired, StateInvalid, StateUsed, StateBusy, RoundInterrupted or
// KeyReused (sent in a -32602 error), InProgress or OutcomeUnknown (sent in
// a -32603 error); 0 for any other error.
func TokenErrorCode(err error) int {
	var we *jsonrpc.Error
	if !errors.As(err, &we) || len(we.Data) == 0 {
		return 0
	}
	if we.Code != jsonrpc.CodeInvalidParams && we.Code != jsonrpc.CodeInternalError {
		return 0
	}
	var d errorData
	if json.Unmarshal(we.Data, &d) != nil {
		return 0
	}
	// InProgress and OutcomeUnknown come in -32603 only, the others in
	// -32602 only.
	if !mcptoken.KnownCode(d.Code) || (d.Code == InProgress || d.Code == OutcomeUnknown) != (we.Code == jsonrpc.CodeInternalError) {
		return 0
	}
	return d.Code
}

// busyRetryAfter returns the retry hint of a [StateBusy] error as a client
// sees it (from ClientSession.CallTool): the -32602 error whose data is
// {"ctokenCode":1027,"retryAfterMs":N}; false for any other error, and
// for a hint that is not a positive number of milliseconds.
func busyRetryAfter(err error) (time.Duration, bool) {
	var we *jsonrpc.Error
	if !errors.As(err, &we) || we.Code != jsonrpc.CodeInvalidParams || len(we.Data) == 0 {
		return 0, false
	}
	var d errorData
	if json.Unmarshal(we.Data, &d) != nil || d.Code != StateBusy || d.RetryAfterMs <= 0 {
		return 0, false
	}
	return time.Duration(d.RetryAfterMs) * time.Millisecond, true
}

// callerOr returns f, or the default CallerFunc, TokenUserID, for nil.
func callerOr(f CallerFunc) CallerFunc {
	if f == nil {
		return TokenUserID
	}
	return f
}
