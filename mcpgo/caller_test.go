package ctokenmcpgo

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ctoken/ctoken/mcptoken"
	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
)

// TestCaller pins where a handler's caller comes from and what a request without one, or a caller that fails, gets.
func TestCaller(t *testing.T) {
	for _, tc := range []struct {
		name string
		test func(*testing.T)
	}{
		{"a request without caller is an internal error", requestWithoutCallerIsInternalError},
		{"each CallerFunc reads its caller", callers},
		{"a caller's failure reaches the log only", callerFailureReachesTheLogOnly},
	} {
		t.Run(tc.name, tc.test)
	}
}

func requestWithoutCallerIsInternalError(t *testing.T) {
	transports(t, func(t *testing.T, connect func(*server.MCPServer, string, *elicitor, ...client.ClientOption) *peer) {
		f := newFleet(t, 1, "s1", nil)
		nobody := connect(f.server(t, ContextCaller, nil), "", &elicitor{answer: true})
		for _, tool := range []string{"list", "ask"} {
			_, err := nobody.call(tool, map[string]any{"target": "prod"})
			if !errors.Is(err, mcp.ErrInternalError) {
				t.Errorf("%s without a caller: err = %v, want -32603", tool, err)
			}
		}
		if e := nobody.wire.lastErr; e == nil || e.Code != mcp.INTERNAL_ERROR || strings.Contains(e.Message, "v1") {
			t.Errorf("wire error = %+v", e)
		}
	})
}

// TestTokenErrorCode pins the ctoken code and the retry hint a server and a client read from a refusal.
func TestTokenErrorCode(t *testing.T) {
	for _, tc := range []struct {
		name string
		test func(*testing.T)
	}{
		{"ToolResult and TokenCode", toolResultAndTokenCode},
		{"StateRetryAfter reads a busy refusal's hint", stateRetryAfter},
	} {
		t.Run(tc.name, tc.test)
	}
}

func toolResultAndTokenCode(t *testing.T) {
	other := errors.New("x")
	if res, err := ToolResult(other); res != nil || err != other {
		t.Errorf("ToolResult(other) = %v, %v", res, err)
	}
	if res, err := ToolResult(nil); res != nil || err != nil {
		t.Errorf("ToolResult(nil) = %v, %v", res, err)
	}
	for _, r := range []*Rejection{cursorExpired, cursorInvalid, stateExpired, stateInvalid, rejection(mcptoken.RefuseState(mcptoken.ErrRoundInterrupted))} {
		res, err := ToolResult(fmt.Errorf("wrapped: %w", r))
		if err != nil || !res.IsError || TokenCode(res) != r.Code {
			t.Errorf("%d: %v, %v", r.Code, res, err)
		}
	}
	for _, m := range []map[string]any{{}, {MetaTokenCode: 7.0}, {MetaTokenCode: 1021.5}, {MetaTokenCode: "1021"}} {
		res := mcp.NewToolResultError("x")
		res.Meta = mcp.NewMetaFromMap(m)
		if TokenCode(res) != 0 {
			t.Errorf("TokenCode(%v) = %d", m, TokenCode(res))
		}
	}
	ok := mcp.NewToolResultText("fine")
	ok.Meta = mcp.NewMetaFromMap(map[string]any{MetaTokenCode: 1021})
	if TokenCode(ok) != 0 || TokenCode(nil) != 0 {
		t.Error("TokenCode of a result that is not an error")
	}
}

func callers(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		f    CallerFunc
		ctx  context.Context
		want string
	}{
		{"context without caller", ContextCaller, ctx, ""},
		{"context with empty caller", ContextCaller, WithCaller(ctx, ""), ""},
		{"context caller", ContextCaller, WithCaller(ctx, "carol"), "carol"},
		{"fixed", FixedCaller("dave"), ctx, "dave"},
		{"fixed empty", FixedCaller(""), ctx, ""},
	} {
		got, err := tc.f(tc.ctx)
		if got != tc.want || (tc.want == "") != errors.Is(err, ErrNoCaller) {
			t.Errorf("%s: %q, %v", tc.name, got, err)
		}
	}
}

// A CallerFunc's own failure is logged for the operator, not sent.
func callerFailureReachesTheLogOnly(t *testing.T) {
	f := newFleet(t, 1, "s1", nil)
	failing := func(context.Context) (string, error) { return "", errors.New("directory unreachable") }
	p := inProcess(t, f.server(t, failing, nil), "alice", nil)
	_, err := p.call("list", nil)
	if !errors.Is(err, mcp.ErrInternalError) || strings.Contains(err.Error(), "directory") {
		t.Errorf("client sees %v", err)
	}
	if !strings.Contains(f.log.String(), "directory unreachable") {
		t.Errorf("log lacks the caller error: %s", f.log.String())
	}
}

// StateRetryAfter reads the hint of a busy refusal (1027) from the
// Rejection itself and from the error a client gets for it, whose message
// carries it, and nothing else.
func stateRetryAfter(t *testing.T) {
	busy := func(d time.Duration) *Rejection {
		r := mcptoken.RefuseState(mcptoken.ErrStateBusy)
		if d != 0 {
			r.RetryAfter = d
		}
		return rejection(r)
	}
	// asClient is the error mcp-go's client returns for the JSON-RPC
	// error -32603 with message msg.
	asClient := func(msg string) error {
		return (&mcp.JSONRPCErrorDetails{Code: mcp.INTERNAL_ERROR, Message: msg}).AsError()
	}
	const tail = ") (ctokenCode 1027)"
	for _, tc := range []struct {
		name string
		err  error
		want time.Duration
		ok   bool
	}{
		{"rejection", busy(250 * time.Millisecond), 250 * time.Millisecond, true},
		{"wrapped rejection", fmt.Errorf("tool: %w", busy(250*time.Millisecond)), 250 * time.Millisecond, true},
		{"as a client sees it", asClient(busy(250 * time.Millisecond).Error()), 250 * time.Millisecond, true},
		{"under a millisecond", asClient(busy(400 * time.Microsecond).Error()), time.Millisecond, true},
		{"no hint from the store", asClient(busy(0).Error()), time.Second, true},
		{"already used", asClient(stateUsed.Error()), 0, false},
		{"already used, rejection", stateUsed, 0, false},
		{"nil", nil, 0, false},
		{"another error", errors.New("x"), 0, false},
		{"zero", asClient("busy (retryAfterMs 0" + tail), 0, false},
		{"negative", asClient("busy (retryAfterMs -5" + tail), 0, false},
		{"signed", asClient("busy (retryAfterMs +5" + tail), 0, false},
		{"not a number", asClient("busy (retryAfterMs 12a" + tail), 0, false},
		{"empty", asClient("busy (retryAfterMs " + tail), 0, false},
		{"over an hour", asClient("busy (retryAfterMs 3600001" + tail), 0, false},
		{"too many digits", asClient("busy (retryAfterMs 00000001" + tail), 0, false},
		{"another code", asClient("busy (retryAfterMs 250) (ctokenCode 1025)"), 0, false},
		{"no hint", asClient("busy (ctokenCode 1027)"), 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, ok := StateRetryAfter(tc.err)
			if d != tc.want || ok != tc.ok {
				t.Fatalf("StateRetryAfter(%v) = %v, %v; want %v, %v", tc.err, d, ok, tc.want, tc.ok)
			}
		})
	}
}
