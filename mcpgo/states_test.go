package ctokenmcpgo

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"strconv"
	"sync"

	"github.com/ctoken/ctoken"
	"github.com/ctoken/ctoken/mcptoken"
	"github.com/ctoken/ctoken/replay"
	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
)

// refused checks that SecureRequestState refused a state with code: the
// client got no result but JSON-RPC error -32603 (the only code mcp-go
// v1.2.1 gives a handler's error) whose message is the rejection's fixed
// text, carrying code, as it came over p's wire.
func refused(t *testing.T, p *peer, res *mcp.CallToolResult, err error, code int) {
	t.Helper()
	if res != nil {
		t.Fatalf("a result (isError %v, %q); want a JSON-RPC error", res.IsError, text(res))
	}
	if !errors.Is(err, mcp.ErrInternalError) {
		t.Fatalf("err = %v; want mcp.ErrInternalError (-32603)", err)
	}
	p.wire.mu.Lock()
	got := p.wire.lastErr
	p.wire.mu.Unlock()
	want := map[int]string{
		StateExpired: stateExpired.Error(),
		StateUsed:    stateUsed.Error(),
	}[code]
	if code == StateBusy {
		// The one message with a hint of its own: how long the round's
		// lease still runs, at most a second.
		d, ok := StateRetryAfter(err)
		if !ok || d <= 0 || d > time.Second {
			t.Fatalf("busy: %v carries the hint %v, %v; want one in (0, 1s]", err, d, ok)
		}
		busy := mcptoken.RefuseState(mcptoken.ErrStateBusy)
		busy.RetryAfter = d
		want = newRejection(busy).Error()
	}
	if want == "" {
		want = stateInvalid.Error()
	}
	if got == nil || got.Code != mcp.INTERNAL_ERROR || got.Message != want || got.Data != nil {
		t.Fatalf("wire error %+v; want code %d, message %q, no data", got, mcp.INTERNAL_ERROR, want)
	}
}

// TestStatesRefuse pins what a refused state becomes: a JSON-RPC error carrying its code, a single-use state used once, a store failure the server's.
func TestStatesRefuse(t *testing.T) {
	for _, tc := range []struct {
		name string
		test func(*testing.T)
	}{
		{"every refused state is an error carrying its code", stateRefusals},
		{"a single-use state is refused the second time", singleUseStateRefusedTheSecondTime},
		{"a replay store failure is an internal error", replayStoreFailureIsInternalError},
	} {
		t.Run(tc.name, tc.test)
	}
}

func stateRefusals(t *testing.T) {
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
				refused(t, tc.p, res, err, StateInvalid)
			})
		}
		t.Run("expired", func(t *testing.T) {
			p := connect(s, "alice", yes())
			p.wire.setSwap(func(s string) string { f.clock.advance(time.Hour); return s })
			res, err := p.call("ask", map[string]any{"target": "prod"})
			refused(t, p, res, err, StateExpired)
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

func singleUseStateRefusedTheSecondTime(t *testing.T) {
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
		refused(t, p, res, err, StateUsed)
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

func replayStoreFailureIsInternalError(t *testing.T) {
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

// TestStates pins request states through States: on any instance with the same keys, bound to the tool and its arguments, and sealed as the reference dispatch seals them.
func TestStates(t *testing.T) {
	for _, tc := range []struct {
		name string
		test func(*testing.T)
	}{
		{"UnboundArgs seals the reference dispatch's text", unboundArgsSealsReferenceDispatchText},
		{"states work across instances with the same keys", statesWorkAcrossInstancesWithSameKeys},
		{"a state of one tool never opens for another", statesStateOfOneToolNeverOpensForAnother},
		{"no refusal consumes a single-use state", statesNoRefusalConsumesASingleUseState},
		{"SealTool and OpenTool", sealToolAndOpenTool},
	} {
		t.Run(tc.name, tc.test)
	}
}

func unboundArgsSealsReferenceDispatchText(t *testing.T) {
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

// TestConstructors pins the arguments NewStates and NewCursors refuse.
func TestConstructors(t *testing.T) {
	for _, tc := range []struct {
		name string
		test func(*testing.T)
	}{
		{"nil is refused", constructorsRefuseNil},
		{"a keyless codec or issuer is refused", constructorsRefuseKeylessCodecAndIssuer},
	} {
		t.Run(tc.name, tc.test)
	}
}

func constructorsRefuseNil(t *testing.T) {
	if _, err := NewCursors(nil, nil); err == nil {
		t.Error("NewCursors(nil) succeeded")
	}
	if _, err := NewStates(nil, nil); err == nil {
		t.Error("NewStates(nil) succeeded")
	}
}

// Every round of a call lands on another instance built from the same keys
// (a fleet, or a restart between rounds): each state opens where it did not
// start.
func statesWorkAcrossInstancesWithSameKeys(t *testing.T) {
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
	refused(t, p, res, err, StateInvalid)
}

// swapOnce returns a swap that replaces the first requestState sent with
// st and passes the later ones through.
func swapOnce(st string) func(string) string {
	var once sync.Once
	return func(s string) string {
		once.Do(func() { s = st })
		return s
	}
}

// The case, through a real mcp-go client: under the default
// configuration a state sealed by preview_delete with {"id":5} never opens
// for delete_now with {"id":5}. A codec with no Binding is not made at
// all, and NewStates refuses ctoken.BindSubject, under which it would.
func statesStateOfOneToolNeverOpensForAnother(t *testing.T) {
	f := newFleet(t, 1, "s1", nil)
	if _, err := ctoken.NewRequestStateCodec(ctoken.RequestStateSecurity{Keys: keyring(t, 1)}); !errors.Is(err, ctoken.ErrConfig) {
		t.Fatalf("NewRequestStateCodec with no Binding: %v; want ErrConfig", err)
	}
	subjectOnly, err := ctoken.NewRequestStateCodec(ctoken.RequestStateSecurity{Keys: keyring(t, 1), Binding: ctoken.BindSubject})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewStates(subjectOnly, nil); !errors.Is(err, mcptoken.ErrTargetUnbound) || !errors.Is(err, ctoken.ErrConfig) {
		t.Fatalf("NewStates with BindSubject: %v; want ErrTargetUnbound and ErrConfig", err)
	}
	states, err := NewStates(f.codec, &StateOptions{Logger: newTextLogger(f.log)})
	if err != nil {
		t.Fatal(err)
	}
	var ran []string
	var mu sync.Mutex
	confirm := func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		id := strconv.Itoa(req.GetInt("id", 0))
		if req.Params.RequestState == "confirm:"+id {
			mu.Lock()
			ran = append(ran, req.Params.Name+" "+id)
			mu.Unlock()
			return mcp.NewToolResultText("deleted " + id), nil
		}
		return server.NewInputRequestBuilder("confirm:"+id).Elicit("ok", mcp.ElicitationParams{Message: "delete " + id + "?", RequestedSchema: confirmSchema}).ToolResult(), nil
	}
	s := server.NewMCPServer("test", "v0", SecureRequestState(states), server.WithToolCapabilities(false), server.WithElicitation())
	s.AddTool(mcp.NewTool("preview_delete"), confirm)
	s.AddTool(mcp.NewTool("delete_now"), confirm)
	p := inProcess(t, s, "alice", &elicitor{answer: true})
	if res, err := p.call("preview_delete", map[string]any{"id": 5}); err != nil || text(res) != "deleted 5" {
		t.Fatalf("preview_delete: %v, %q", err, text(res))
	}
	results, _ := p.wire.states()
	p.wire.setSwap(swapOnce(results[0]))
	res, err := p.call("delete_now", map[string]any{"id": 5})
	refused(t, p, res, err, StateInvalid)
	if len(ran) != 1 || ran[0] != "preview_delete 5" {
		t.Fatalf("handlers that ran on a confirmed state: %q", ran)
	}
}

// No refusal consumes a single-use state: refused for its caller, its tool,
// its arguments or its audience, it then opens for the right request
// exactly once, through a real mcp-go client and SecureRequestState.
func statesNoRefusalConsumesASingleUseState(t *testing.T) {
	store := replay.NewMemoryStore(0)
	f := newFleet(t, 1, "s1", store)
	s := f.server(t, ContextCaller, nil)
	other := newFleet(t, 1, "s1", store)
	var err error
	other.codec, err = ctoken.NewRequestStateCodec(ctoken.RequestStateSecurity{
		Keys: keyring(t, 1), Mode: ctoken.Encrypted, Binding: ctoken.BindSubjectAndTool, Now: other.clock.now, Replay: store, Audience: "other-server",
	})
	if err != nil {
		t.Fatal(err)
	}
	sOther := other.server(t, ContextCaller, nil)
	yes := func() *elicitor { return &elicitor{answer: true} }

	// alice's first-round state for ask(prod), taken from a call whose
	// second round sent something else.
	alice := inProcess(t, s, "alice", yes())
	alice.wire.setSwap(swapOnce("v1e.not-a-state"))
	res, err := alice.call("ask", map[string]any{"target": "prod"})
	refused(t, alice, res, err, StateInvalid)
	results, _ := alice.wire.states()
	st := results[0]

	for _, r := range []struct {
		name, tool, target string
		p                  *peer
	}{
		{"caller", "ask", "prod", inProcess(t, s, "bob", yes())},
		{"tool", "ask2", "prod", inProcess(t, s, "alice", yes())},
		{"arguments", "ask", "staging", inProcess(t, s, "alice", yes())},
		{"audience", "ask", "prod", inProcess(t, sOther, "alice", yes())},
	} {
		t.Run(r.name, func(t *testing.T) {
			r.p.wire.setSwap(swapOnce(st))
			res, err := r.p.call(r.tool, map[string]any{"target": r.target})
			refused(t, r.p, res, err, StateInvalid)
			if store.Len() != 0 {
				t.Fatal("the refused state was claimed")
			}
		})
	}
	right := inProcess(t, s, "alice", yes())
	right.wire.setSwap(swapOnce(st))
	if res, err := right.call("ask", map[string]any{"target": "prod"}); err != nil || text(res) != "done prod" {
		t.Fatalf("the right request after the refusals: %v, %q", err, text(res))
	}
	again := inProcess(t, s, "alice", yes())
	again.wire.setSwap(swapOnce(st))
	res, err = again.call("ask", map[string]any{"target": "prod"})
	refused(t, again, res, err, StateUsed)
}

// A codec or issuer not made by its constructor has no key: NewStates and
// NewCursors refuse it with ctoken.ErrConfig.
func constructorsRefuseKeylessCodecAndIssuer(t *testing.T) {
	if _, err := NewStates(&ctoken.RequestStateCodec{}, nil); !errors.Is(err, ctoken.ErrConfig) {
		t.Errorf("NewStates(zero codec): %v; want ErrConfig", err)
	}
	if _, err := NewCursors(&ctoken.CursorIssuer{}, nil); !errors.Is(err, ctoken.ErrConfig) {
		t.Errorf("NewCursors(zero issuer): %v; want ErrConfig", err)
	}
}

func sealToolAndOpenTool(t *testing.T) {
	f := newFleet(t, 1, "s1", nil)
	states, err := NewStates(f.codec, &StateOptions{Caller: FixedCaller("alice")})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	req := mcp.CallToolRequest{}
	req.Params.Name = "ask"
	req.Params.Arguments = map[string]any{"b": []any{true, nil}, "a": 1}
	if s, ok, err := states.OpenTool(ctx, req); s != "" || ok || err != nil {
		t.Fatalf("OpenTool without a state = %q, %v, %v", s, ok, err)
	}
	st, err := states.SealTool(ctx, req, "step")
	if err != nil {
		t.Fatal(err)
	}
	// The arguments as they arrive from the wire, in another order and
	// spacing: the same fingerprint.
	req.Params.RequestState = st
	req.Params.RawArguments = json.RawMessage(`{ "a": 1.0, "b": [true, null] }`)
	if s, ok, err := states.OpenTool(ctx, req); s != "step" || !ok || err != nil {
		t.Errorf("OpenTool = %q, %v, %v", s, ok, err)
	}
	req.Params.RawArguments = json.RawMessage(`{"a":2,"b":[true,null]}`)
	var r *Rejection
	if _, ok, err := states.OpenTool(ctx, req); ok || !errors.As(err, &r) || r.Code != StateInvalid || r.Expired() {
		t.Errorf("OpenTool with other arguments: %v, %v", ok, err)
	}
	if _, err := states.SealTool(ctx, req, "step\xff"); err == nil {
		t.Error("SealTool sealed a state that is not UTF-8")
	}
	nobody, err := NewStates(f.codec, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := nobody.SealTool(ctx, req, "x"); !errors.Is(err, ErrNoCaller) {
		t.Errorf("SealTool without a caller: %v", err)
	}
	if _, _, err := nobody.OpenTool(ctx, req); !errors.Is(err, ErrNoCaller) {
		t.Errorf("OpenTool without a caller: %v", err)
	}
}

// FuzzOpenTool feeds arbitrary requestState and arguments to OpenTool:
// nothing but an error may come back, and nothing may panic.
func FuzzOpenTool(f *testing.F) {
	fl := newFleet(f, 1, "s1", nil)
	states, err := NewStates(fl.codec, &StateOptions{Caller: FixedCaller("alice")})
	if err != nil {
		f.Fatal(err)
	}
	ctx := context.Background()
	seedReq := mcp.CallToolRequest{}
	seedReq.Params.Name = "ask"
	seedReq.Params.RawArguments = json.RawMessage(`{"target":"x"}`)
	seed, err := states.SealTool(ctx, seedReq, "state")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(seed, `{"target":"y"}`)
	f.Add("v1e.AAAA", `{}`)
	f.Add("v1.e30.AAAA", `null`)
	// Every fuzzing process seals its own seed (a fresh nonce) under the
	// fleet's fixed keys, so a worker may meet another process's seed: an
	// accepted input must be a state this fleet sealed, opened with the
	// arguments it was sealed with.
	sealedArgs, err := ctoken.ArgsFingerprint(json.RawMessage(`{"target":"x"}`))
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, wire, args string) {
		if wire == "" {
			return
		}
		req := mcp.CallToolRequest{}
		req.Params.Name = "ask"
		req.Params.RawArguments = json.RawMessage(args)
		req.Params.RequestState = wire
		s, ok, err := states.OpenTool(ctx, req)
		if err == nil {
			if fp, ferr := ctoken.ArgsFingerprint(json.RawMessage(args)); s != "state" || !ok || ferr != nil || fp != sealedArgs {
				t.Fatalf("OpenTool accepted fuzz input: %q, %v (args %q)", s, ok, args)
			}
			return
		}
		if ok || s != "" {
			t.Fatalf("OpenTool returned data with its error: %q, %v, %v", s, ok, err)
		}
		var r *Rejection
		if !errors.As(err, &r) {
			t.Fatalf("error is not a Rejection: %v", err)
		}
	})
}
