package ctokenmcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ctoken/ctoken"
	"github.com/ctoken/ctoken/mcptoken"
	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestCaller pins where a handler's caller comes from and what a request without one gets.
func TestCaller(t *testing.T) {
	for _, tc := range []struct {
		name string
		test func(*testing.T)
	}{
		{"a request without caller is refused", requestWithoutCallerIsRefused},
		{"TokenUserID reads the bearer token's user", tokenUserIDReadsBearerTokenUser},
	} {
		t.Run(tc.name, tc.test)
	}
}

func requestWithoutCallerIsRefused(t *testing.T) {
	f := newFleet(t, 1, "s1")
	// In-memory transports carry no bearer token, so TokenUserID finds
	// nobody: nothing is issued to, or accepted from, an anonymous caller.
	cs := connect(t, f.server(t, TokenUserID, nil), manual)
	_, err := callList(t, cs, "list", listIn{})
	wantRPCError(t, err, jsonrpc.CodeInternalError, 0)
	_, err = cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "ask", Arguments: askIn{Target: "x"}})
	wantRPCError(t, err, jsonrpc.CodeInternalError, 0)
	// Nor does an empty fixed caller name anybody.
	cs = connect(t, f.server(t, FixedCaller(""), nil), manual)
	_, err = callList(t, cs, "list", listIn{})
	wantRPCError(t, err, jsonrpc.CodeInternalError, 0)
	// A CallerFunc's own failure is logged for the operator, not sent.
	failing := func(context.Context, mcp.Request) (string, error) { return "", errors.New("directory unreachable") }
	cs = connect(t, f.server(t, failing, nil), manual)
	_, err = callList(t, cs, "list", listIn{})
	wantRPCError(t, err, jsonrpc.CodeInternalError, 0)
	if strings.Contains(err.Error(), "directory unreachable") || !strings.Contains(f.log.String(), "directory unreachable") {
		t.Errorf("caller error: client sees %q; log %q", err, f.log.String())
	}
}

func tokenUserIDReadsBearerTokenUser(t *testing.T) {
	req := &mcp.CallToolRequest{Params: &mcp.CallToolParamsRaw{Name: "t"}}
	for _, tc := range []struct {
		name  string
		extra *mcp.RequestExtra
		want  string
	}{
		{"no extra", nil, ""},
		{"no token", &mcp.RequestExtra{}, ""},
		{"token without user", &mcp.RequestExtra{TokenInfo: &auth.TokenInfo{}}, ""},
		{"user", &mcp.RequestExtra{TokenInfo: &auth.TokenInfo{UserID: "carol"}}, "carol"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req.Extra = tc.extra
			got, err := TokenUserID(context.Background(), req)
			if got != tc.want {
				t.Errorf("TokenUserID = %q, want %q", got, tc.want)
			}
			if (err != nil) != (tc.want == "") || (err != nil && !errors.Is(err, ErrNoCaller)) {
				t.Errorf("err = %v", err)
			}
		})
	}
	if _, err := TokenUserID(context.Background(), nil); !errors.Is(err, ErrNoCaller) {
		t.Errorf("nil request: err = %v", err)
	}
}

// TestTokenErrorCode pins the ctoken code a client reads from the errors it gets.
func TestTokenErrorCode(t *testing.T) {
	for _, tc := range []struct {
		name string
		test func(*testing.T)
	}{
		{"other errors carry no code", tokenErrorCodeIgnoresOtherErrors},
		{"outcome unknown is read in both of its errors", tokenErrorCodeReadsOutcomeUnknownInBothErrors},
		{"a busy refusal carries its retry hint", refusedBusyCarriesItsRetryHint},
	} {
		t.Run(tc.name, tc.test)
	}
}

func tokenErrorCodeIgnoresOtherErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
	}{
		{"nil", nil},
		{"plain", errors.New("x")},
		{"other code", &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Data: json.RawMessage(`{"ctokenCode":1021}`)}},
		{"no data", &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams}},
		{"bad data", &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Data: json.RawMessage(`[`)}},
		{"unknown code", &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Data: json.RawMessage(`{"ctokenCode":7}`)}},
	} {
		if got := TokenErrorCode(tc.err); got != 0 {
			t.Errorf("%s: TokenErrorCode = %d", tc.name, got)
		}
	}
}

// The two unknowns reach the client under codes of their own: -32603 with
// OutcomeUnknown (1028) from an idempotent call whose commit's outcome is
// unknown (retry with the key), -32602 with RoundInterrupted (1029) for a
// request state whose round was interrupted (without a retry hint).
func tokenErrorCodeReadsOutcomeUnknownInBothErrors(t *testing.T) {
	for _, tc := range []struct {
		name     string
		err      error
		code     int64
		ctokenCd int
	}{
		{"idempotent call", idempotencyError(fmt.Errorf("%w: commit", mcptoken.ErrOutcomeUnknown)), jsonrpc.CodeInternalError, OutcomeUnknown},
		{"interrupted round", refused(mcptoken.RefuseState(mcptoken.ErrRoundInterrupted)), jsonrpc.CodeInvalidParams, RoundInterrupted},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var we *jsonrpc.Error
			if !errors.As(tc.err, &we) || we.Code != tc.code || TokenErrorCode(tc.err) != tc.ctokenCd {
				t.Fatalf("sent %v; want JSON-RPC %d with ctokenCode %d", tc.err, tc.code, tc.ctokenCd)
			}
		})
	}
	if _, ok := RetryAfter(refused(mcptoken.RefuseState(mcptoken.ErrRoundInterrupted))); ok {
		t.Fatal("an interrupted round carries a retry hint: no retry settles it")
	}
}

// FuzzTokenErrorCode parses arbitrary error data, as a client does with a
// server's reply.
func FuzzTokenErrorCode(f *testing.F) {
	f.Add([]byte(`{"ctokenCode":1021}`))
	f.Add([]byte(`{"ctokenCode":1e400}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		code := TokenErrorCode(&jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Data: data})
		switch code {
		case 0, ctoken.CodeCursorExpired, ctoken.CodeCursorInvalid, StateExpired, StateInvalid, StateUsed, StateBusy, KeyReused, OutcomeUnknown:
		default:
			t.Fatalf("TokenErrorCode = %d", code)
		}
	})
}

// A busy refusal (1027) is -32602 whose data carries the retry hint in
// whole milliseconds, at least 1 (a second when the store does not say);
// no other refusal carries one. busyRetryAfter reads it back from such an
// error and from nothing else.
func refusedBusyCarriesItsRetryHint(t *testing.T) {
	busy := func(d time.Duration) mcptoken.Refusal {
		r := mcptoken.RefuseState(mcptoken.ErrStateBusy)
		if d != 0 {
			r.RetryAfter = d
		}
		return r
	}
	for _, tc := range []struct {
		name string
		r    mcptoken.Refusal
		data string
		want time.Duration
	}{
		{"busy", busy(250 * time.Millisecond), `{"ctokenCode":1027,"retryAfterMs":250}`, 250 * time.Millisecond},
		{"busy under a millisecond", busy(400 * time.Microsecond), `{"ctokenCode":1027,"retryAfterMs":1}`, time.Millisecond},
		{"busy, no hint from the store", busy(0), `{"ctokenCode":1027,"retryAfterMs":1000}`, time.Second},
		{"already used", mcptoken.RefuseState(mcptoken.ErrStateUsed), `{"ctokenCode":1026}`, 0},
		{"invalid", mcptoken.RefuseState(ctoken.ErrStateInvalid), `{"ctokenCode":1023}`, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := refused(tc.r)
			var we *jsonrpc.Error
			if !errors.As(err, &we) || we.Code != jsonrpc.CodeInvalidParams || string(we.Data) != tc.data || TokenErrorCode(err) != tc.r.Code {
				t.Fatalf("refused = %v (data %s); want -32602 with %s", err, we.Data, tc.data)
			}
			if d, ok := busyRetryAfter(err); d != tc.want || ok != (tc.want != 0) {
				t.Fatalf("busyRetryAfter = %v, %v; want %v", d, ok, tc.want)
			}
		})
	}
	for _, tc := range []struct {
		name string
		err  error
	}{
		{"nil", nil},
		{"plain", errors.New("x")},
		{"internal error", &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Data: json.RawMessage(`{"ctokenCode":1027,"retryAfterMs":250}`)}},
		{"in progress", &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Data: json.RawMessage(`{"ctokenCode":1025,"retryAfterMs":250}`)}},
		{"no hint", &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Data: json.RawMessage(`{"ctokenCode":1027}`)}},
		{"zero", &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Data: json.RawMessage(`{"ctokenCode":1027,"retryAfterMs":0}`)}},
		{"negative", &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Data: json.RawMessage(`{"ctokenCode":1027,"retryAfterMs":-5}`)}},
		{"not a number", &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Data: json.RawMessage(`{"ctokenCode":1027,"retryAfterMs":"250"}`)}},
		{"bad data", &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Data: json.RawMessage(`[`)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if d, ok := busyRetryAfter(tc.err); ok || d != 0 {
				t.Fatalf("busyRetryAfter = %v, %v; want none", d, ok)
			}
		})
	}
}
