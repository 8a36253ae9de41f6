package ctokenmcpgo

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
)

func TestRequestWithoutCallerIsInternalError(t *testing.T) {
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

func TestToolResultAndTokenCode(t *testing.T) {
	other := errors.New("x")
	if res, err := ToolResult(other); res != nil || err != other {
		t.Errorf("ToolResult(other) = %v, %v", res, err)
	}
	if res, err := ToolResult(nil); res != nil || err != nil {
		t.Errorf("ToolResult(nil) = %v, %v", res, err)
	}
	for _, r := range []*Rejection{cursorExpired, cursorInvalid, stateExpired, stateInvalid} {
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

func TestCallers(t *testing.T) {
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
func TestCallerFailureReachesTheLogOnly(t *testing.T) {
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
