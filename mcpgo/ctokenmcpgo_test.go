package ctokenmcpgo

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
	"github.com/ctoken/ctoken/replay"
	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
)

// transports runs f once with an in-process client and once with a client
// over streamable HTTP on 127.0.0.1; connect joins a client to a server as
// a user.
func transports(t *testing.T, f func(t *testing.T, connect func(s *server.MCPServer, user string, e *elicitor, opts ...client.ClientOption) *peer)) {
	t.Run("in-process", func(t *testing.T) {
		f(t, func(s *server.MCPServer, user string, e *elicitor, opts ...client.ClientOption) *peer {
			return inProcess(t, s, user, e, opts...)
		})
	})
	t.Run("streamable-http", func(t *testing.T) {
		f(t, func(s *server.MCPServer, user string, e *elicitor, opts ...client.ClientOption) *peer {
			return overHTTP(t, serveHTTP(t, s), user, e, opts...)
		})
	})
}

// page calls list and returns its items and next cursor.
func page(t *testing.T, p *peer, tool, prefix, cursor string) ([]string, string, *mcp.CallToolResult) {
	t.Helper()
	res, err := p.call(tool, map[string]any{"prefix": prefix, "cursor": cursor})
	if err != nil {
		t.Fatal(err)
	}
	if res.IsError {
		return nil, "", res
	}
	m, _ := res.StructuredContent.(map[string]any)
	var items []string
	for _, it := range m["items"].([]any) {
		items = append(items, it.(string))
	}
	next, _ := m["next"].(string)
	return items, next, res
}

func TestCursorsPageThroughEveryItem(t *testing.T) {
	transports(t, func(t *testing.T, connect func(*server.MCPServer, string, *elicitor, ...client.ClientOption) *peer) {
		f := newFleet(t, 1, "s1", nil)
		p := connect(f.server(t, ContextCaller, nil), "alice", nil)
		var got []string
		cursor := ""
		for pages := 0; ; pages++ {
			if pages > 5 {
				t.Fatal("pagination does not end")
			}
			items, next, res := page(t, p, "list", "", cursor)
			if res.IsError {
				t.Fatalf("page %d refused: %s", pages, text(res))
			}
			got = append(got, items...)
			if next == "" {
				break
			}
			cursor = next
		}
		if strings.Join(got, ",") != strings.Join(testItems, ",") {
			t.Errorf("items = %v, want every item once, in order", got)
		}
	})
}

func TestCursorSurvivesRestartWithSameKeys(t *testing.T) {
	transports(t, func(t *testing.T, connect func(*server.MCPServer, string, *elicitor, ...client.ClientOption) *peer) {
		before := connect(newFleet(t, 1, "fleet", nil).server(t, ContextCaller, nil), "alice", nil)
		items, next, _ := page(t, before, "list", "a", "")
		// A new process: new issuer, codec and server from the same keys and
		// session.
		after := connect(newFleet(t, 1, "fleet", nil).server(t, ContextCaller, nil), "alice", nil)
		rest, last, res := page(t, after, "list", "a", next)
		if res != nil && res.IsError {
			t.Fatalf("restarted server refused the cursor: %s", text(res))
		}
		if got := strings.Join(append(items, rest...), ","); got != "a1,a2,a3,a4,a5,a6,a7" || last != "" {
			t.Errorf("items across the restart = %s (next %q)", got, last)
		}
	})
}

func TestCursorRejectionsAreToolErrorsWithCode(t *testing.T) {
	transports(t, func(t *testing.T, connect func(*server.MCPServer, string, *elicitor, ...client.ClientOption) *peer) {
		f := newFleet(t, 1, "s1", nil)
		s := f.server(t, ContextCaller, nil)
		alice := connect(s, "alice", nil)
		bob := connect(s, "bob", nil)
		otherKey := connect(newFleet(t, 2, "s1", nil).server(t, ContextCaller, nil), "alice", nil)
		otherSession := connect(newFleet(t, 1, "s2", nil).server(t, ContextCaller, nil), "alice", nil)
		_, c, _ := page(t, alice, "list", "", "")
		flipped := []byte(c)
		flipped[len(c)/2] ^= 1
		for _, tc := range []struct {
			name   string
			p      *peer
			tool   string
			prefix string
			cursor string
			code   int
		}{
			{"tampered", alice, "list", "", string(flipped), ctoken.CodeCursorInvalid},
			{"truncated", alice, "list", "", c[:len(c)-1], ctoken.CodeCursorInvalid},
			{"other caller", bob, "list", "", c, ctoken.CodeCursorInvalid},
			{"other arguments", alice, "list", "b", c, ctoken.CodeCursorInvalid},
			{"other tool", alice, "list2", "", c, ctoken.CodeCursorInvalid},
			{"other key", otherKey, "list", "", c, ctoken.CodeCursorInvalid},
			{"other server session", otherSession, "list", "", c, ctoken.CodeCursorExpired},
			{"garbage", alice, "list", "", "not a cursor", ctoken.CodeCursorInvalid},
		} {
			t.Run(tc.name, func(t *testing.T) {
				_, _, res := page(t, tc.p, tc.tool, tc.prefix, tc.cursor)
				if !res.IsError || TokenCode(res) != tc.code {
					t.Fatalf("isError %v, TokenCode %d (%q); want a tool error with code %d", res.IsError, TokenCode(res), text(res), tc.code)
				}
				if strings.Contains(text(res), "mac") || strings.Contains(text(res), "wrong") {
					t.Errorf("the client learns the reason: %q", text(res))
				}
			})
		}
		f.clock.advance(ctoken.DefaultCursorTTL + time.Minute)
		if _, _, res := page(t, alice, "list", "", c); TokenCode(res) != ctoken.CodeCursorExpired {
			t.Errorf("expired cursor: TokenCode %d (%q)", TokenCode(res), text(res))
		}
		logged := f.log.String()
		for _, reason := range []string{"forged or wrong scope (tool, caller or arguments)"} {
			if !strings.Contains(logged, reason) {
				t.Errorf("log lacks %q", reason)
			}
		}
		if strings.Contains(logged, c[:16]) {
			t.Error("the cursor reached the log")
		}
	})
}

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

func TestMRTRAcceptedAndDeclinedWithPlaintextHandlers(t *testing.T) {
	transports(t, func(t *testing.T, connect func(*server.MCPServer, string, *elicitor, ...client.ClientOption) *peer) {
		f := newFleet(t, 1, "s1", nil)
		s := f.server(t, ContextCaller, nil)
		for _, answer := range []bool{true, false} {
			e := &elicitor{answer: answer}
			p := connect(s, "alice", e)
			res, err := p.call("ask", map[string]any{"target": "prod"})
			if err != nil {
				t.Fatal(err)
			}
			want, asked := "done prod", int32(2)
			if !answer {
				want, asked = "cancelled", 1
			}
			if res.IsError || text(res) != want || e.asked.Load() != asked {
				t.Errorf("answer %v: %q (isError %v) after %d question(s); want %q after %d", answer, text(res), res.IsError, e.asked.Load(), want, asked)
			}
			// The wire carries only sealed states, never the plaintext.
			results, sent := p.wire.states()
			if len(results) != int(asked) || len(sent) != int(asked) {
				t.Errorf("answer %v: %d states received, %d sent", answer, len(results), len(sent))
			}
			for _, st := range append(results, sent...) {
				if !strings.HasPrefix(st, "v1e.") || strings.Contains(st, "round") {
					t.Errorf("state on the wire is not sealed: %q", st)
				}
			}
		}
	})
}

// An input-required result without a state passes through the middleware
// as the handler wrote it: nothing to seal, and the retry reaches the
// handler.
func TestInputRequiredWithoutStatePassesThrough(t *testing.T) {
	transports(t, func(t *testing.T, connect func(*server.MCPServer, string, *elicitor, ...client.ClientOption) *peer) {
		f := newFleet(t, 1, "s1", nil)
		e := &elicitor{answer: true}
		p := connect(f.server(t, ContextCaller, nil), "alice", e)
		res, err := p.call("askonce", nil)
		if err != nil {
			t.Fatal(err)
		}
		if res.IsError || text(res) != "done once" || e.asked.Load() != 1 {
			t.Errorf("%q (isError %v) after %d question(s)", text(res), res.IsError, e.asked.Load())
		}
		if results, sent := p.wire.states(); len(results) != 0 || len(sent) != 0 {
			t.Errorf("states on the wire: %q, %q", results, sent)
		}
	})
}

func TestPromptMRTRWithPlaintextHandler(t *testing.T) {
	transports(t, func(t *testing.T, connect func(*server.MCPServer, string, *elicitor, ...client.ClientOption) *peer) {
		f := newFleet(t, 1, "s1", nil)
		p := connect(f.server(t, ContextCaller, nil), "alice", &elicitor{answer: true})
		res, err := p.prompt("greet", map[string]string{"who": "bob"})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Messages) != 1 || res.Messages[0].Content.(mcp.TextContent).Text != "hello bob" {
			t.Errorf("messages = %+v", res.Messages)
		}
		results, _ := p.wire.states()
		if len(results) != 1 || !strings.HasPrefix(results[0], "v1e.") {
			t.Errorf("prompt states on the wire = %q", results)
		}
		// A tampered prompt state: prompts have no error result, so -32603
		// with the fixed message.
		p.wire.setSwap(func(s string) string { return s[:len(s)-2] })
		_, err = p.prompt("greet", map[string]string{"who": "bob"})
		if !errors.Is(err, mcp.ErrInternalError) || p.wire.lastErr == nil || !strings.Contains(p.wire.lastErr.Message, "invalid requestState (ctokenCode 1023)") {
			t.Errorf("tampered prompt state: err %v, wire %+v", err, p.wire.lastErr)
		}
		// Other arguments.
		p.wire.setSwap(func(string) string { return results[0] })
		if _, err = p.prompt("greet", map[string]string{"who": "carol"}); !errors.Is(err, mcp.ErrInternalError) {
			t.Errorf("prompt state with other arguments: err %v", err)
		}
	})
}

// refused checks a tool result refusing a state with code.
func refused(t *testing.T, res *mcp.CallToolResult, err error, code int) {
	t.Helper()
	if err != nil {
		t.Fatalf("err = %v, want a tool error result", err)
	}
	if !res.IsError || TokenCode(res) != code {
		t.Fatalf("isError %v, TokenCode %d (%q); want code %d", res.IsError, TokenCode(res), text(res), code)
	}
}

func TestStateRefusals(t *testing.T) {
	transports(t, func(t *testing.T, connect func(*server.MCPServer, string, *elicitor, ...client.ClientOption) *peer) {
		f := newFleet(t, 1, "s1", nil)
		s := f.server(t, ContextCaller, nil)
		yes := func() *elicitor { return &elicitor{answer: true} }
		alice := connect(s, "alice", yes())
		if _, err := alice.call("ask", map[string]any{"target": "prod"}); err != nil {
			t.Fatal(err)
		}
		results, _ := alice.wire.states()
		st := results[0] // alice's first-round state for ask(prod)
		use := func(p *peer, wire string) { p.wire.setSwap(func(string) string { return wire }) }

		for _, tc := range []struct {
			name   string
			p      *peer
			tool   string
			target string
			state  string
		}{
			{"tampered", connect(s, "alice", yes()), "ask", "prod", st[:len(st)/2] + flip(st[len(st)/2]) + st[len(st)/2+1:]},
			{"truncated", connect(s, "alice", yes()), "ask", "prod", st[:len(st)-2]},
			{"other caller", connect(s, "bob", yes()), "ask", "prod", st},
			{"other arguments", connect(s, "alice", yes()), "ask", "staging", st},
			{"other tool", connect(s, "alice", yes()), "ask2", "prod", st},
			{"other key", connect(newFleet(t, 2, "s1", nil).server(t, ContextCaller, nil), "alice", yes()), "ask", "prod", st},
			{"not sealed", connect(s, "alice", yes()), "ask", "prod", "round1:prod"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				use(tc.p, tc.state)
				res, err := tc.p.call(tc.tool, map[string]any{"target": tc.target})
				refused(t, res, err, StateInvalid)
			})
		}
		t.Run("expired", func(t *testing.T) {
			p := connect(s, "alice", yes())
			p.wire.setSwap(func(s string) string { f.clock.advance(time.Hour); return s })
			res, err := p.call("ask", map[string]any{"target": "prod"})
			refused(t, res, err, StateExpired)
		})
		logged := f.log.String()
		for _, reason := range []string{"decryption failed", "arguments differ from the sealed call", "past exp"} {
			if !strings.Contains(logged, reason) {
				t.Errorf("log lacks %q:\n%s", reason, logged)
			}
		}
		if strings.Contains(logged, st[:20]) {
			t.Error("a state reached the log")
		}
	})
}

func flip(c byte) string {
	if c == 'A' {
		return "B"
	}
	return "A"
}

func TestSingleUseStateRefusedTheSecondTime(t *testing.T) {
	transports(t, func(t *testing.T, connect func(*server.MCPServer, string, *elicitor, ...client.ClientOption) *peer) {
		f := newFleet(t, 1, "s1", replay.NewMemoryStore(0))
		p := connect(f.server(t, ContextCaller, nil), "alice", &elicitor{answer: true})
		res, err := p.call("ask", map[string]any{"target": "prod"})
		if err != nil || text(res) != "done prod" {
			t.Fatalf("first flow: %v, %v", res, err)
		}
		results, _ := p.wire.states()
		// Present the (already used) first-round state again.
		p.wire.setSwap(func(string) string { return results[0] })
		res, err = p.call("ask", map[string]any{"target": "prod"})
		refused(t, res, err, StateInvalid)
		if !strings.Contains(f.log.String(), "already used") {
			t.Errorf("log lacks the replay: %s", f.log.String())
		}
	})
}

// failingStore is a replay store that cannot answer.
type failingStore struct{}

func (failingStore) Claim(context.Context, string, time.Time) (bool, error) {
	return false, errors.New("store unreachable")
}

func TestReplayStoreFailureIsInternalError(t *testing.T) {
	f := newFleet(t, 1, "s1", failingStore{})
	p := inProcess(t, f.server(t, ContextCaller, nil), "alice", &elicitor{answer: true})
	_, err := p.call("ask", map[string]any{"target": "prod"})
	if !errors.Is(err, mcp.ErrInternalError) || !strings.Contains(p.wire.lastErr.Message, "store unavailable") {
		t.Errorf("err = %v, wire %+v; want -32603", err, p.wire.lastErr)
	}
	if !strings.Contains(f.log.String(), "store unreachable") || strings.Contains(p.wire.lastErr.Message, "unreachable") {
		t.Errorf("the store's error must reach the log only")
	}
}

func TestHandlerThatSealsItselfIsRefused(t *testing.T) {
	f := newFleet(t, 1, "s1", nil)
	p := inProcess(t, f.server(t, ContextCaller, nil), "alice", &elicitor{answer: true})
	_, err := p.call("sealer", nil)
	if !errors.Is(err, mcp.ErrInternalError) || !strings.Contains(f.log.String(), "handler returned a sealed requestState") {
		t.Errorf("err = %v; log %s", err, f.log.String())
	}
}

// A client on 2025-11-25 over stateless HTTP has no session the server could
// send elicitation/create on, and declares no elicitation capability: the
// tool says so in a tool error, not a failed round trip.
func TestOlderClientWithoutElicitationGetsClearToolError(t *testing.T) {
	f := newFleet(t, 1, "s1", nil)
	endpoint := serveHTTP(t, f.server(t, ContextCaller, nil), server.WithStateLess(true))
	p := overHTTP(t, endpoint, "alice", nil, client.WithProtocolVersion(mcp.ProtocolVersion20251125))
	if v := p.c.ProtocolVersion(); v != "2025-11-25" {
		t.Fatalf("client negotiated %q", v)
	}
	res, err := p.call("ask", map[string]any{"target": "prod"})
	if err != nil {
		t.Fatalf("err = %v, want a tool error result", err)
	}
	if !res.IsError || !strings.Contains(text(res), "needs the elicitation capability") || !strings.Contains(text(res), "2025-11-25") {
		t.Errorf("isError %v, %q", res.IsError, text(res))
	}
	// Worded as ctokenmcp words its -32021, saying what the server saw.
	if !strings.HasPrefix(text(res), mcptoken.ErrClientCannotAnswer.Error()) || !strings.Contains(text(res), "over stateless HTTP the server cannot see a declaration") {
		t.Errorf("message %q", text(res))
	}
	// A prompt has no error result: -32603 with the same explanation.
	_, err = p.prompt("greet", map[string]string{"who": "bob"})
	if !errors.Is(err, mcp.ErrInternalError) || !strings.Contains(p.wire.lastErr.Message, "elicitation capability") {
		t.Errorf("prompt: err %v, wire %+v", err, p.wire.lastErr)
	}
}

// A 2025-11-25 client that can elicit, over stateful HTTP: mcp-go asks it
// with elicitation/create and re-runs the handler in process; the state
// still goes through the middleware on every round.
func TestOlderClientWithElicitationIsBridged(t *testing.T) {
	f := newFleet(t, 1, "s1", nil)
	endpoint := serveHTTP(t, f.server(t, ContextCaller, nil))
	e := &elicitor{answer: true}
	p := overHTTP(t, endpoint, "alice", e, client.WithProtocolVersion("2025-11-25"))
	res, err := p.call("ask", map[string]any{"target": "prod"})
	if err != nil {
		t.Fatal(err)
	}
	if text(res) != "done prod" || e.asked.Load() != 2 {
		t.Errorf("%q after %d question(s)", text(res), e.asked.Load())
	}
	if results, _ := p.wire.states(); len(results) != 0 {
		t.Errorf("an older client saw requestState: %q", results)
	}
}

// mcp-go sends every error a tool handler returns as -32603: this is why a
// refused token is a tool error result here and not the -32602 of package
// ctokenmcp. If mcp-go ever honours a handler's code, this test fails.
func TestMCPGoSendsHandlerErrorsAsInternalError(t *testing.T) {
	s := server.NewMCPServer("pin", "v0")
	s.AddTool(mcp.NewTool("fail"), func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return nil, fmt.Errorf("%w: bad cursor", mcp.ErrInvalidParams)
	})
	p := inProcess(t, s, "alice", nil)
	_, err := p.call("fail", nil)
	if !errors.Is(err, mcp.ErrInternalError) || p.wire.lastErr.Code != mcp.INTERNAL_ERROR {
		t.Errorf("err = %v (%+v): mcp-go now keeps a handler's error code; send -32602 like ctokenmcp", err, p.wire.lastErr)
	}
}

func TestUnboundArgsSealsReferenceDispatchText(t *testing.T) {
	f := newFleet(t, 1, "s1", nil)
	p := inProcess(t, f.server(t, ContextCaller, &StateOptions{UnboundArgs: true}), "alice", &elicitor{answer: true})
	if _, err := p.call("ask", map[string]any{"target": "prod"}); err != nil {
		t.Fatal(err)
	}
	results, _ := p.wire.states()
	// Exactly what the reference dispatch seals: the state, bound to the
	// subject and "tools/call\x00ask".
	plain, err := f.codec.Decode(results[0], "alice", ctoken.MCPTarget("tools/call", "ask"))
	if err != nil || plain != "round1:prod" {
		t.Errorf("sealed text = %q, %v", plain, err)
	}
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

func TestConstructorsRefuseNil(t *testing.T) {
	if _, err := NewCursors(nil, nil); err == nil {
		t.Error("NewCursors(nil) succeeded")
	}
	if _, err := NewStates(nil, nil); err == nil {
		t.Error("NewStates(nil) succeeded")
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

// Every round of a call lands on another instance built from the same keys
// (a fleet, or a restart between rounds): each state opens where it did not
// start.
func TestStatesWorkAcrossInstancesWithSameKeys(t *testing.T) {
	one := newFleet(t, 1, "s1", nil).server(t, ContextCaller, nil)
	two := newFleet(t, 1, "s1", nil).server(t, ContextCaller, nil)
	tr := &alternate{ts: []transport.Interface{transport.NewInProcessTransport(one), transport.NewInProcessTransport(two)}}
	e := &elicitor{answer: true}
	p := start(t, tr, WithCaller(context.Background(), "alice"), e)
	res, err := p.call("ask", map[string]any{"target": "prod"})
	if err != nil || text(res) != "done prod" || e.asked.Load() != 2 {
		t.Fatalf("%v, %v after %d question(s)", res, err, e.asked.Load())
	}
	// The same across instances with other keys fails closed.
	other := newFleet(t, 2, "s1", nil).server(t, ContextCaller, nil)
	tr = &alternate{ts: []transport.Interface{transport.NewInProcessTransport(one), transport.NewInProcessTransport(other)}}
	p = start(t, tr, WithCaller(context.Background(), "alice"), &elicitor{answer: true})
	res, err = p.call("ask", map[string]any{"target": "prod"})
	refused(t, res, err, StateInvalid)
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

// TestSecureRequestStateFailsClosedForACodecThatDoesNotBindTheTool: with a
// codec bound to the subject only, a state sealed for one tool opened for
// another (the handler of "ask2" ran on a state of "ask"). SecureRequestState
// cannot return an error, so it logs the misconfiguration and refuses every
// state in and out with -32603; calls without a state pass.
func TestSecureRequestStateFailsClosedForACodecThatDoesNotBindTheTool(t *testing.T) {
	f := newFleet(t, 1, "s1", nil)
	var err error
	f.codec, err = ctoken.NewRequestStateCodec(ctoken.RequestStateSecurity{
		Keys: keyring(t, 1), Mode: ctoken.Encrypted, Binding: ctoken.BindSubject, Now: f.clock.now,
	})
	if err != nil {
		t.Fatal(err)
	}
	// NewStates refuses such a codec; with InsecureSkipToolBinding it
	// accepts it, but SecureRequestState still does not.
	if _, err := NewStates(f.codec, nil); !errors.Is(err, mcptoken.ErrTargetUnbound) || !errors.Is(err, ctoken.ErrConfig) {
		t.Fatalf("NewStates with a BindSubject codec: %v; want ErrTargetUnbound", err)
	}
	s := f.server(t, ContextCaller, &StateOptions{InsecureSkipToolBinding: true})
	if !strings.Contains(f.log.String(), "SecureRequestState: refusing every requestState") {
		t.Errorf("misconfiguration not logged: %s", f.log.String())
	}
	// A state of "ask", sealed per handler on the same codec.
	per, err := NewStates(f.codec, &StateOptions{InsecureSkipToolBinding: true})
	if err != nil {
		t.Fatal(err)
	}
	askReq := mcp.CallToolRequest{}
	askReq.Params.Name = "ask"
	askReq.Params.Arguments = map[string]any{"target": "prod"}
	askState, err := per.SealTool(WithCaller(context.Background(), "alice"), askReq, "round2:prod")
	if err != nil {
		t.Fatal(err)
	}
	p := inProcess(t, s, "alice", &elicitor{answer: true})
	// ask2's retry carries the state of ask instead of its own.
	p.wire.setSwap(func(string) string { return askState })
	if res, err := p.call("ask2", map[string]any{"target": "prod"}); !errors.Is(err, mcp.ErrInternalError) {
		t.Errorf("ask2 with a state of ask: %v, %q; want -32603", err, text(res))
	}
	p.wire.setSwap(nil)
	// A state sent to a tool that never asked for one (mcp-go's client
	// sends none on a first call, so the request is sent as JSON-RPC).
	if msg := handleRaw(s, "alice", "list", askState); !strings.Contains(msg, `"code":-32603`) {
		t.Errorf("a state sent to list: %s; want -32603", msg)
	}
	if _, err := p.call("ask", map[string]any{"target": "prod"}); !errors.Is(err, mcp.ErrInternalError) {
		t.Errorf("round one of ask: %v; want -32603 (no state is sealed)", err)
	}
	if _, err := p.prompt("greet", map[string]string{"who": "bob"}); !errors.Is(err, mcp.ErrInternalError) {
		t.Errorf("round one of greet: %v; want -32603", err)
	}
	if res, err := p.call("list", map[string]any{"prefix": "a"}); err != nil || res.IsError {
		t.Errorf("a call without state: %v, %+v", err, res)
	}
	// A nil States fails closed the same way.
	bare := server.NewMCPServer("bare", "v0", SecureRequestState(nil), server.WithToolCapabilities(false), server.WithElicitation())
	bare.AddTool(mcp.NewTool("echo"), func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return mcp.NewToolResultText("ok"), nil
	})
	q := inProcess(t, bare, "alice", nil)
	if res, err := q.call("echo", nil); err != nil || res.IsError {
		t.Errorf("nil States, no state: %v, %+v", err, res)
	}
	if msg := handleRaw(bare, "alice", "echo", askState); !strings.Contains(msg, `"code":-32603`) {
		t.Errorf("nil States, a state: %s; want -32603", msg)
	}
}

// handleRaw sends s a tools/call of tool by caller carrying requestState
// state, as JSON-RPC, and returns the response as JSON text.
func handleRaw(s *server.MCPServer, caller, tool, state string) string {
	req, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": "tools/call",
		"params": map[string]any{"name": tool, "arguments": map[string]any{}, "requestState": state}})
	out, _ := json.Marshal(s.HandleMessage(WithCaller(context.Background(), caller), req))
	return string(out)
}
