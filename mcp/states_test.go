package ctokenmcp

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"errors"
	"log/slog"

	"github.com/ctoken/ctoken"
	"github.com/ctoken/ctoken/mcptoken"
	"github.com/ctoken/ctoken/replay"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

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

func callAsk(cs *mcp.ClientSession, tool string, in askIn, state string, ok bool) (*mcp.CallToolResult, error) {
	p := &mcp.CallToolParams{Name: tool, Arguments: in}
	if state != "" {
		p.RequestState = state
		p.InputResponses = mcp.InputResponseMap{"ok": &mcp.ElicitResult{Action: "accept", Content: map[string]any{"ok": ok}}}
	}
	return cs.CallTool(context.Background(), p)
}

func askResult(t testing.TB, res *mcp.CallToolResult) askOut {
	t.Helper()
	if res.IsError || res.NeedsInput() {
		t.Fatalf("not a final result: isError %v, needsInput %v", res.IsError, res.NeedsInput())
	}
	var out askOut
	b, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestStates pins request states through States: the rounds of a call, the binding to the tool and its arguments, and clients on the older protocol.
func TestStates(t *testing.T) {
	for _, tc := range []struct {
		name string
		test func(*testing.T)
	}{
		{"a multi round-trip through the SDK client", statesDriveMultiRoundTripThroughSDKClient},
		{"a manual round trip", statesManualRoundTrip},
		{"clients on the older protocol", statesWorkForClientsOnOlderProtocol},
		{"UnboundArgs states ignore arguments", unboundArgsStatesIgnoreArguments},
		{"arguments are bound canonically", statesBindArgumentsCanonically},
		{"a state of one tool never opens for another", statesStateOfOneToolNeverOpensForAnother},
		{"no refusal consumes a single-use state", statesNoRefusalConsumesASingleUseState},
	} {
		t.Run(tc.name, tc.test)
	}
}

func statesDriveMultiRoundTripThroughSDKClient(t *testing.T) {
	f := newFleet(t, 1, "s1")
	cs := connect(t, f.server(t, FixedCaller("alice"), nil), nil)
	res, err := callAsk(cs, "ask", askIn{Target: "prod"}, "", false)
	if err != nil {
		t.Fatal(err)
	}
	if out := askResult(t, res); out.Done != "prod" || out.Plan != 42 {
		t.Errorf("result = %+v", out)
	}
}

func statesManualRoundTrip(t *testing.T) {
	f := newFleet(t, 1, "s1")
	cs := connect(t, f.server(t, FixedCaller("alice"), nil), manual)
	first, err := callAsk(cs, "ask", askIn{Target: "prod"}, "", false)
	if err != nil {
		t.Fatal(err)
	}
	if !first.NeedsInput() || first.RequestState == "" || !strings.HasPrefix(first.RequestState, "v1e.") {
		t.Fatalf("round one: needsInput %v, state %q", first.NeedsInput(), first.RequestState)
	}
	if strings.Contains(first.RequestState, "prod") {
		t.Error("encrypted state shows its content")
	}
	for _, ok := range []bool{true, false} {
		res, err := callAsk(cs, "ask", askIn{Target: "prod"}, first.RequestState, ok)
		if err != nil {
			t.Fatal(err)
		}
		want := askOut{Done: "prod", Plan: 42}
		if !ok {
			want.Done = "cancelled"
		}
		if out := askResult(t, res); out != want {
			t.Errorf("answer %v: result %+v, want %+v", ok, out, want)
		}
	}
}

// TestStatesRefuse pins what States.Open and Seal refuse and what the client is told.
func TestStatesRefuse(t *testing.T) {
	for _, tc := range []struct {
		name string
		test func(*testing.T)
	}{
		{"rejections are invalid params", stateRejectionsAreInvalidParams},
		{"an expired state tells the client to start over", expiredStateTellsClientToStartOver},
		{"OpenJSON refuses a state of another type", openJSONRefusesStateOfAnotherType},
		{"Open claims a single-use state with the request's context", openClaimsSingleUseStateWithRequestContext},
		{"a replay store failure is an internal error", openReportsReplayStoreFailureAsInternalError},
		{"Seal refuses a state that is not UTF-8", sealRefusesStateThatIsNotUTF8},
	} {
		t.Run(tc.name, tc.test)
	}
}

func stateRejectionsAreInvalidParams(t *testing.T) {
	f := newFleet(t, 1, "s1")
	alice := connect(t, f.server(t, FixedCaller("alice"), nil), manual)
	bob := connect(t, f.server(t, FixedCaller("bob"), nil), manual)
	otherKey := connect(t, newFleet(t, 2, "s1").server(t, FixedCaller("alice"), nil), manual)
	first, err := callAsk(alice, "ask", askIn{Target: "prod"}, "", false)
	if err != nil {
		t.Fatal(err)
	}
	st := first.RequestState
	flipped := []byte(st)
	flipped[len(st)/2] ^= 1
	signed, err := ctoken.NewRequestStateCodec(ctoken.RequestStateSecurity{Keys: keyring(t, 1), Binding: ctoken.BindSubjectAndTool})
	if err != nil {
		t.Fatal(err)
	}
	// Authentic and correctly bound, but not a state States sealed.
	bare, err := ctoken.NewRequestStateCodec(ctoken.RequestStateSecurity{Keys: keyring(t, 1), Mode: ctoken.Encrypted, Binding: ctoken.BindSubjectAndTool})
	if err != nil {
		t.Fatal(err)
	}
	unwrapped, err := bare.Encode(`{"target":"prod","plan":7}`, "alice", ctoken.MCPTarget("tools/call", "ask"))
	if err != nil {
		t.Fatal(err)
	}
	signedState, err := signed.Encode("x", "alice", ctoken.MCPTarget("tools/call", "ask"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		cs    *mcp.ClientSession
		tool  string
		in    askIn
		state string
	}{
		{"another caller", bob, "ask", askIn{Target: "prod"}, st},
		{"another tool", alice, "ask2", askIn{Target: "prod"}, st},
		{"other arguments", alice, "ask", askIn{Target: "staging"}, st},
		{"another key", otherKey, "ask", askIn{Target: "prod"}, st},
		{"edited", alice, "ask", askIn{Target: "prod"}, string(flipped)},
		{"truncated", alice, "ask", askIn{Target: "prod"}, st[:len(st)-2]},
		{"signed where encrypted is configured", alice, "ask", askIn{Target: "prod"}, signedState},
		{"not sealed by States", alice, "ask", askIn{Target: "prod"}, unwrapped},
		{"garbage", alice, "ask", askIn{Target: "prod"}, "v1e.garbage"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := callAsk(tc.cs, tc.tool, tc.in, tc.state, true)
			if err == nil {
				t.Fatalf("accepted: %+v", res.StructuredContent)
			}
			wantRPCError(t, err, jsonrpc.CodeInvalidParams, StateInvalid)
		})
	}
}

func expiredStateTellsClientToStartOver(t *testing.T) {
	f := newFleet(t, 1, "s1")
	cs := connect(t, f.server(t, FixedCaller("alice"), nil), manual)
	first, err := callAsk(cs, "ask", askIn{Target: "prod"}, "", false)
	if err != nil {
		t.Fatal(err)
	}
	f.clock.advance(time.Hour)
	_, err = callAsk(cs, "ask", askIn{Target: "prod"}, first.RequestState, true)
	wantRPCError(t, err, jsonrpc.CodeInvalidParams, StateExpired)
}

func unboundArgsStatesIgnoreArguments(t *testing.T) {
	f := newFleet(t, 1, "s1")
	cs := connect(t, f.server(t, FixedCaller("alice"), &StateOptions{UnboundArgs: true}), manual)
	first, err := callAsk(cs, "ask", askIn{Target: "prod"}, "", false)
	if err != nil {
		t.Fatal(err)
	}
	// The state is the application's JSON, as another implementation of the
	// codec would seal it...
	plain, err := f.codec.Decode(first.RequestState, "alice", ctoken.MCPTarget("tools/call", "ask"))
	if err != nil || plain != `{"target":"prod","plan":42}` {
		t.Fatalf("sealed state = %q, %v", plain, err)
	}
	// ...and the retry is not checked against the arguments: the documented
	// cost of the option.
	res, err := callAsk(cs, "ask", askIn{Target: "staging"}, first.RequestState, true)
	if err != nil {
		t.Fatal(err)
	}
	if out := askResult(t, res); out.Done != "prod" {
		t.Errorf("result = %+v", out)
	}
}

func openJSONRefusesStateOfAnotherType(t *testing.T) {
	f := newFleet(t, 1, "s1")
	states, err := NewStates(f.codec, &StateOptions{Caller: FixedCaller("alice")})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	req := &mcp.CallToolRequest{Params: &mcp.CallToolParamsRaw{Name: "ask", Arguments: json.RawMessage(`{"target":"x"}`)}}
	if req.Params.RequestState, err = states.Seal(ctx, req, "not json"); err != nil {
		t.Fatal(err)
	}
	v, ok, err := OpenJSON[askState](ctx, states, req)
	if ok || v != (askState{}) {
		t.Errorf("OpenJSON returned %+v, %v", v, ok)
	}
	wantRPCError(t, err, jsonrpc.CodeInvalidParams, StateInvalid)
	// Open itself returns the raw state.
	if s, ok, err := states.Open(ctx, req); s != "not json" || !ok || err != nil {
		t.Errorf("Open = %q, %v, %v", s, ok, err)
	}
}

func statesBindArgumentsCanonically(t *testing.T) {
	f := newFleet(t, 1, "s1")
	states, err := NewStates(f.codec, &StateOptions{Caller: FixedCaller("alice")})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	req := &mcp.CallToolRequest{Params: &mcp.CallToolParamsRaw{Name: "ask", Arguments: json.RawMessage(`{"a":1,"b":[true,null]}`)}}
	st, err := states.Seal(ctx, req, "s")
	if err != nil {
		t.Fatal(err)
	}
	// Key order and white space are not the arguments.
	req.Params.Arguments = json.RawMessage(`{ "b": [true, null], "a": 1.0 }`)
	req.Params.RequestState = st
	if s, ok, err := states.Open(ctx, req); s != "s" || !ok || err != nil {
		t.Errorf("Open = %q, %v, %v", s, ok, err)
	}
	// Absent arguments are {}.
	req = &mcp.CallToolRequest{Params: &mcp.CallToolParamsRaw{Name: "ask"}}
	if req.Params.RequestState, err = states.Seal(ctx, req, "t"); err != nil {
		t.Fatal(err)
	}
	req.Params.Arguments = json.RawMessage(`{}`)
	if s, ok, err := states.Open(ctx, req); s != "t" || !ok || err != nil {
		t.Errorf("Open with {} = %q, %v, %v", s, ok, err)
	}
}

// FuzzOpen feeds arbitrary requestState to States.Open: nothing but an
// error may come back, and nothing may panic.
func FuzzOpen(f *testing.F) {
	fl := newFleet(f, 1, "s1")
	states, err := NewStates(fl.codec, &StateOptions{Caller: FixedCaller("alice")})
	if err != nil {
		f.Fatal(err)
	}
	ctx := context.Background()
	seedReq := &mcp.CallToolRequest{Params: &mcp.CallToolParamsRaw{Name: "ask", Arguments: json.RawMessage(`{"target":"x"}`)}}
	seed, err := states.Seal(ctx, seedReq, "state")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(seed, `{"target":"y"}`)
	f.Add("v1e.AAAA", `{}`)
	f.Add("v1.e30.AAAA", `null`)
	// The fleet's keys are fixed, but every fuzzing process seals its own
	// seed (a fresh nonce), so a worker may meet another process's seed:
	// an accepted input must be a state this fleet sealed, opened with
	// the arguments it was sealed with.
	sealedArgs, err := ctoken.ArgsFingerprint(json.RawMessage(`{"target":"x"}`))
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, wire, args string) {
		if wire == "" {
			return
		}
		req := &mcp.CallToolRequest{Params: &mcp.CallToolParamsRaw{Name: "ask", Arguments: json.RawMessage(args), RequestState: wire}}
		s, ok, err := states.Open(ctx, req)
		if err != nil {
			if ok || s != "" {
				t.Fatalf("Open returned data with its error: %q, %v, %v", s, ok, err)
			}
			return
		}
		if fp, ferr := ctoken.ArgsFingerprint(json.RawMessage(args)); s != "state" || !ok || ferr != nil || fp != sealedArgs {
			t.Fatalf("Open accepted fuzz input: %q, %v (args %q)", s, ok, args)
		}
	})
}

func statesWorkForClientsOnOlderProtocol(t *testing.T) {
	// Before 2026-07-28 the SDK fulfils input requests itself with a
	// server-to-client call and re-invokes the handler with the state in
	// process: the state still goes through Seal and Open.
	f := newFleet(t, 1, "s1")
	s := f.server(t, FixedCaller("alice"), nil)
	ctx := context.Background()
	st, ct := mcp.NewInMemoryTransports()
	ss, err := s.Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ss.Close()
	asked := 0
	c := mcp.NewClient(&mcp.Implementation{Name: "old", Version: "v0"}, &mcp.ClientOptions{
		ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			asked++
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"ok": true}}, nil
		},
	})
	cs, err := c.Connect(ctx, ct, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	res, err := callAsk(cs, "ask", askIn{Target: "prod"}, "", false)
	if err != nil {
		t.Fatal(err)
	}
	if out := askResult(t, res); out.Done != "prod" || out.Plan != 42 || asked != 1 {
		t.Errorf("result %+v after %d question(s)", out, asked)
	}
}

// singleUseStates returns States over a single-use codec (Replay set) that
// names alice as the caller, and a request with a state it sealed.
func singleUseStates(t *testing.T) (*States, *mcp.CallToolRequest) {
	t.Helper()
	codec, err := ctoken.NewRequestStateCodec(ctoken.RequestStateSecurity{
		Keys: keyring(t, 1), Mode: ctoken.Encrypted, Binding: ctoken.BindSubjectAndTool,
		Replay: replay.NewMemoryStore(0),
	})
	if err != nil {
		t.Fatal(err)
	}
	states, err := NewStates(codec, &StateOptions{Caller: FixedCaller("alice")})
	if err != nil {
		t.Fatal(err)
	}
	req := &mcp.CallToolRequest{Params: &mcp.CallToolParamsRaw{Name: "ask", Arguments: json.RawMessage(`{"target":"x"}`)}}
	if req.Params.RequestState, err = states.Seal(context.Background(), req, "s"); err != nil {
		t.Fatal(err)
	}
	return states, req
}

func openClaimsSingleUseStateWithRequestContext(t *testing.T) {
	states, req := singleUseStates(t)
	// A request that is already cancelled cannot claim the state: the
	// replay store sees the request's context, refuses, and the state is
	// not consumed.
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	if s, ok, err := states.Open(cancelled, req); err == nil || ok || s != "" {
		t.Fatalf("Open with a cancelled request = %q, %v, %v", s, ok, err)
	}
	ctx := context.Background()
	if s, ok, err := states.Open(ctx, req); s != "s" || !ok || err != nil {
		t.Fatalf("first Open = %q, %v, %v", s, ok, err)
	}
	_, _, err := states.Open(ctx, req)
	wantRPCError(t, err, jsonrpc.CodeInvalidParams, StateUsed)
}

// A replay store that cannot decide is the server's failure, not the
// client's: the client must not be told its (unconsumed) state is invalid.
func openReportsReplayStoreFailureAsInternalError(t *testing.T) {
	states, req := singleUseStates(t)
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	_, _, err := states.Open(cancelled, req)
	wantRPCError(t, err, jsonrpc.CodeInternalError, 0)
	// The state was not consumed.
	if s, ok, err := states.Open(context.Background(), req); s != "s" || !ok || err != nil {
		t.Fatalf("Open after the failure = %q, %v, %v", s, ok, err)
	}
}

// The codec refuses a state that is not valid UTF-8; with the argument
// binding, Seal must refuse it too rather than seal a silently altered
// state (json.Marshal replaces invalid bytes with U+FFFD).
func sealRefusesStateThatIsNotUTF8(t *testing.T) {
	f := newFleet(t, 1, "s1")
	for _, unbound := range []bool{false, true} {
		states, err := NewStates(f.codec, &StateOptions{Caller: FixedCaller("alice"), UnboundArgs: unbound})
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		req := &mcp.CallToolRequest{Params: &mcp.CallToolParamsRaw{Name: "ask", Arguments: json.RawMessage(`{}`)}}
		st, err := states.Seal(ctx, req, "step\xff1")
		if err == nil {
			req.Params.RequestState = st
			got, _, _ := states.Open(ctx, req)
			t.Errorf("UnboundArgs %v: sealed a state that is not UTF-8; it opens as %q", unbound, got)
		}
	}
}

type deleteIn struct {
	ID int `json:"id"`
}

type deleteOut struct {
	Deleted int `json:"deleted"`
}

// deleteServer returns a server whose tools preview_delete and delete_now
// both ask for confirmation and delete on a state that opens, with states
// resolving the caller as who.
func deleteServer(t testing.TB, states *States) *mcp.Server {
	t.Helper()
	handler := func(ctx context.Context, req *mcp.CallToolRequest, in deleteIn) (*mcp.CallToolResult, deleteOut, error) {
		st, ok, err := states.Open(ctx, req)
		if err != nil {
			return nil, deleteOut{}, err
		}
		if ok && st == `{"confirmed":true}` {
			return nil, deleteOut{Deleted: in.ID}, nil
		}
		state, err := states.Seal(ctx, req, `{"confirmed":true}`)
		if err != nil {
			return nil, deleteOut{}, err
		}
		return &mcp.CallToolResult{
			InputRequests: mcp.InputRequestMap{"ok": &mcp.ElicitParams{Message: "delete?", RequestedSchema: map[string]any{"type": "object"}}},
			RequestState:  state,
		}, deleteOut{}, nil
	}
	s := mcp.NewServer(&mcp.Implementation{Name: "test", Version: "v0"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "preview_delete"}, handler)
	mcp.AddTool(s, &mcp.Tool{Name: "delete_now"}, handler)
	return s
}

func callDelete(cs *mcp.ClientSession, tool string, id int, state string) (*mcp.CallToolResult, error) {
	return cs.CallTool(context.Background(), &mcp.CallToolParams{Name: tool, Arguments: deleteIn{ID: id}, RequestState: state,
		InputResponses: mcp.InputResponseMap{"ok": &mcp.ElicitResult{Action: "accept"}}})
}

// The case, through a real go-sdk client: under the default
// configuration a state sealed by preview_delete with {"id":5} never opens
// for delete_now with {"id":5}. A codec with no Binding is not made at
// all, and NewStates refuses ctoken.BindSubject, under which it would.
func statesStateOfOneToolNeverOpensForAnother(t *testing.T) {
	f := newFleet(t, 1, "s1")
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
	states, err := NewStates(f.codec, &StateOptions{Caller: FixedCaller("alice")})
	if err != nil {
		t.Fatal(err)
	}
	cs := connect(t, deleteServer(t, states), manual)
	first, err := callDelete(cs, "preview_delete", 5, "")
	if err != nil || first.RequestState == "" {
		t.Fatalf("round one: %v", err)
	}
	res, err := callDelete(cs, "delete_now", 5, first.RequestState)
	if err == nil {
		t.Fatalf("delete_now ran on preview_delete's state: %+v", res.StructuredContent)
	}
	wantRPCError(t, err, jsonrpc.CodeInvalidParams, StateInvalid)
}

// No refusal consumes a single-use state: refused for its caller, its tool,
// its arguments or its audience, it then opens for the right request
// exactly once, through a real go-sdk client.
func statesNoRefusalConsumesASingleUseState(t *testing.T) {
	store := replay.NewMemoryStore(0)
	states := func(caller, aud string) *States {
		c, err := ctoken.NewRequestStateCodec(ctoken.RequestStateSecurity{
			Keys: keyring(t, 1), Mode: ctoken.Encrypted, Binding: ctoken.BindSubjectAndTool, Audience: aud, Replay: store,
		})
		if err != nil {
			t.Fatal(err)
		}
		s, err := NewStates(c, &StateOptions{Caller: FixedCaller(caller), Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	alice := connect(t, deleteServer(t, states("alice", "a")), manual)
	bob := connect(t, deleteServer(t, states("bob", "a")), manual)
	otherAudience := connect(t, deleteServer(t, states("alice", "b")), manual)
	first, err := callDelete(alice, "preview_delete", 5, "")
	if err != nil || first.RequestState == "" {
		t.Fatalf("round one: %v", err)
	}
	st := first.RequestState
	for _, r := range []struct {
		name string
		cs   *mcp.ClientSession
		tool string
		id   int
	}{
		{"caller", bob, "preview_delete", 5},
		{"tool", alice, "delete_now", 5},
		{"arguments", alice, "preview_delete", 6},
		{"audience", otherAudience, "preview_delete", 5},
	} {
		t.Run(r.name, func(t *testing.T) {
			_, err := callDelete(r.cs, r.tool, r.id, st)
			wantRPCError(t, err, jsonrpc.CodeInvalidParams, StateInvalid)
			if store.Len() != 0 {
				t.Fatal("the refused state was claimed")
			}
		})
	}
	res, err := callDelete(alice, "preview_delete", 5, st)
	if err != nil || res.IsError || res.NeedsInput() {
		t.Fatalf("the right request after the refusals: %v", err)
	}
	_, err = callDelete(alice, "preview_delete", 5, st)
	wantRPCError(t, err, jsonrpc.CodeInvalidParams, StateUsed)
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
