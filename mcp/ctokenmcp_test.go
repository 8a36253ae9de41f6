package ctokenmcp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ctoken/ctoken"
	"github.com/ctoken/ctoken/replay"
	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// clock is a settable test clock, safe for concurrent use.
type clock struct{ unix atomic.Int64 }

func newClock() *clock {
	c := &clock{}
	c.unix.Store(time.Now().Unix())
	return c
}
func (c *clock) now() time.Time          { return time.Unix(c.unix.Load(), 0) }
func (c *clock) advance(d time.Duration) { c.unix.Add(int64(d / time.Second)) }
func keyring(t testing.TB, b byte) *ctoken.Keyring {
	t.Helper()
	kr, err := ctoken.NewKeyring(bytes.Repeat([]byte{b}, 32))
	if err != nil {
		t.Fatal(err)
	}
	return kr
}

// syncBuffer is a bytes.Buffer safe for the concurrent writes of several
// servers' loggers.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// fleet is what every server instance of one deployment shares: keys,
// cursor session, clock, and so one issuer and one codec.
type fleet struct {
	clock  *clock
	issuer *ctoken.CursorIssuer
	codec  *ctoken.RequestStateCodec
	log    *syncBuffer
}

func newFleet(t testing.TB, key byte, session string) *fleet {
	t.Helper()
	f := &fleet{clock: newClock(), log: &syncBuffer{}}
	var err error
	f.issuer, err = ctoken.NewCursorIssuer(ctoken.CursorConfig{Keys: keyring(t, key), Session: []byte(session), Now: f.clock.now})
	if err != nil {
		t.Fatal(err)
	}
	f.codec, err = ctoken.NewRequestStateCodec(ctoken.RequestStateSecurity{
		Keys: keyring(t, key), Mode: ctoken.Encrypted, Binding: ctoken.BindSubjectAndTool, Now: f.clock.now,
	})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// Test tools.

const testPageSize = 5

var testItems = []string{"a1", "a2", "a3", "a4", "a5", "a6", "a7", "b1", "b2", "b3", "b4", "b5"}

type listIn struct {
	Prefix string `json:"prefix"`
	Cursor string `json:"cursor,omitempty"`
}

type listOut struct {
	Items []string `json:"items"`
	Next  string   `json:"next,omitempty"`
}

type askIn struct {
	Target string `json:"target"`
}

type askOut struct {
	Done string `json:"done"`
	Plan int    `json:"plan"`
}

type askState struct {
	Target string `json:"target"`
	Plan   int    `json:"plan"`
}

// server returns a server with paginated tools "list" and "list2" and
// input-asking tools "ask" and "ask2", whose tokens are bound to who.
func (f *fleet) server(t testing.TB, who CallerFunc, sopts *StateOptions) *mcp.Server {
	t.Helper()
	logger := slog.New(slog.NewTextHandler(f.log, nil))
	cursors, err := NewCursors(f.issuer, &CursorOptions{Caller: who, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	if sopts == nil {
		sopts = &StateOptions{}
	}
	sopts.Caller, sopts.Logger = who, logger
	states, err := NewStates(f.codec, sopts)
	if err != nil {
		t.Fatal(err)
	}
	list := func(ctx context.Context, req *mcp.CallToolRequest, in listIn) (*mcp.CallToolResult, listOut, error) {
		bound := in
		bound.Cursor = ""
		p, err := cursors.Resume(ctx, req, bound, in.Cursor)
		if err != nil {
			return nil, listOut{}, err
		}
		var match []string
		for _, it := range testItems {
			if strings.HasPrefix(it, in.Prefix) {
				match = append(match, it)
			}
		}
		start := min(int(p.Page)*testPageSize, len(match))
		end := min(start+testPageSize, len(match))
		out := listOut{Items: append([]string{}, match[start:end]...)}
		if end < len(match) {
			if out.Next, err = cursors.Next(ctx, req, bound, p.Page+1, nil); err != nil {
				return nil, listOut{}, err
			}
		}
		return nil, out, nil
	}
	ask := func(ctx context.Context, req *mcp.CallToolRequest, in askIn) (*mcp.CallToolResult, askOut, error) {
		st, ok, err := OpenJSON[askState](ctx, states, req)
		if err != nil {
			return nil, askOut{}, err
		}
		if !ok {
			state, err := SealJSON(ctx, states, req, askState{Target: in.Target, Plan: 42})
			if err != nil {
				return nil, askOut{}, err
			}
			return &mcp.CallToolResult{
				InputRequests: mcp.InputRequestMap{"ok": &mcp.ElicitParams{
					Message:         "proceed with " + in.Target + "?",
					RequestedSchema: map[string]any{"type": "object", "properties": map[string]any{"ok": map[string]any{"type": "boolean"}}},
				}},
				RequestState: state,
			}, askOut{}, nil
		}
		answer, _ := req.Params.InputResponses["ok"].(*mcp.ElicitResult)
		if answer == nil || answer.Content["ok"] != true {
			return nil, askOut{Done: "cancelled", Plan: st.Plan}, nil
		}
		return nil, askOut{Done: st.Target, Plan: st.Plan}, nil
	}
	s := mcp.NewServer(&mcp.Implementation{Name: "test", Version: "v0"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "list"}, list)
	mcp.AddTool(s, &mcp.Tool{Name: "list2"}, list)
	mcp.AddTool(s, &mcp.Tool{Name: "ask"}, ask)
	mcp.AddTool(s, &mcp.Tool{Name: "ask2"}, ask)
	return s
}

// connect joins a client to s over in-memory transports. A nil opts is a
// client that answers every elicitation with {"ok": true} and lets the SDK
// retry on its own.
func connect(t testing.TB, s *mcp.Server, opts *mcp.ClientOptions) *mcp.ClientSession {
	t.Helper()
	ctx := context.Background()
	st, ct := mcp.NewInMemoryTransports()
	ss, err := s.Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ss.Close() })
	if opts == nil {
		opts = &mcp.ClientOptions{ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"ok": true}}, nil
		}}
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test-client", Version: "v0"}, opts).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// manual is client options that leave the multi round trip to the test.
var manual = &mcp.ClientOptions{MultiRoundTrip: &mcp.MultiRoundTripOptions{Disabled: true}}

func callList(t testing.TB, cs *mcp.ClientSession, tool string, in listIn) (listOut, error) {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: tool, Arguments: in})
	if err != nil {
		return listOut{}, err
	}
	if res.IsError {
		t.Fatalf("tool error: %v", res.Content)
	}
	var out listOut
	b, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out, nil
}

// wantRPCError checks that err is a JSON-RPC error with code and, when
// tokenCode is non-zero, that ctoken code in its data.
func wantRPCError(t testing.TB, err error, code int64, tokenCode int) {
	t.Helper()
	var we *jsonrpc.Error
	if !errors.As(err, &we) {
		t.Fatalf("error %v (%T) is not a JSON-RPC error", err, err)
	}
	if we.Code != code {
		t.Errorf("JSON-RPC code %d (%q), want %d", we.Code, we.Message, code)
	}
	if got := TokenErrorCode(err); got != tokenCode {
		t.Errorf("TokenErrorCode = %d, want %d", got, tokenCode)
	}
}

func TestCursorsPageThroughEveryItem(t *testing.T) {
	f := newFleet(t, 1, "s1")
	cs := connect(t, f.server(t, FixedCaller("alice"), nil), nil)
	var got []string
	in := listIn{Prefix: "a"}
	for pages := 0; ; pages++ {
		if pages > 5 {
			t.Fatal("pagination does not end")
		}
		out, err := callList(t, cs, "list", in)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, out.Items...)
		if out.Next == "" {
			break
		}
		in.Cursor = out.Next
	}
	if strings.Join(got, ",") != "a1,a2,a3,a4,a5,a6,a7" {
		t.Errorf("items = %v", got)
	}
}

func TestCursorsWorkAcrossInstancesOfAFleet(t *testing.T) {
	f := newFleet(t, 1, "s1")
	one := connect(t, f.server(t, FixedCaller("alice"), nil), nil)
	two := connect(t, f.server(t, FixedCaller("alice"), nil), nil)
	first, err := callList(t, one, "list", listIn{Prefix: "a"})
	if err != nil {
		t.Fatal(err)
	}
	second, err := callList(t, two, "list", listIn{Prefix: "a", Cursor: first.Next})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(second.Items, ",") != "a6,a7" {
		t.Errorf("second page = %v", second.Items)
	}
}

func TestCursorRejectionsAreInvalidParams(t *testing.T) {
	f := newFleet(t, 1, "s1")
	alice := connect(t, f.server(t, FixedCaller("alice"), nil), nil)
	bob := connect(t, f.server(t, FixedCaller("bob"), nil), nil)
	otherSession := connect(t, newFleet(t, 1, "s2").server(t, FixedCaller("alice"), nil), nil)
	otherKey := connect(t, newFleet(t, 2, "s1").server(t, FixedCaller("alice"), nil), nil)

	first, err := callList(t, alice, "list", listIn{Prefix: ""})
	if err != nil {
		t.Fatal(err)
	}
	c := first.Next
	flipped := []byte(c)
	flipped[len(c)/2] ^= 1
	for _, tc := range []struct {
		name string
		cs   *mcp.ClientSession
		tool string
		in   listIn
		code int
	}{
		{"another caller", bob, "list", listIn{Cursor: c}, ctoken.CodeCursorInvalid},
		{"another tool", alice, "list2", listIn{Cursor: c}, ctoken.CodeCursorInvalid},
		{"other arguments", alice, "list", listIn{Prefix: "b", Cursor: c}, ctoken.CodeCursorInvalid},
		// Under another key, a cursor whose body names the verifier's own
		// session is a forgery, not a stale cursor.
		{"another key", otherKey, "list", listIn{Cursor: c}, ctoken.CodeCursorInvalid},
		{"another server session", otherSession, "list", listIn{Cursor: c}, ctoken.CodeCursorExpired},
		{"edited", alice, "list", listIn{Cursor: string(flipped)}, ctoken.CodeCursorInvalid},
		{"truncated", alice, "list", listIn{Cursor: c[:len(c)-1]}, ctoken.CodeCursorInvalid},
		{"garbage", alice, "list", listIn{Cursor: "not a cursor"}, ctoken.CodeCursorInvalid},
		{"oversize", alice, "list", listIn{Cursor: strings.Repeat("A", ctoken.MaxCursorBytes+1)}, ctoken.CodeCursorInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := callList(t, tc.cs, tc.tool, tc.in)
			wantRPCError(t, err, jsonrpc.CodeInvalidParams, tc.code)
		})
	}
}

func TestExpiredCursorTellsClientToStartOver(t *testing.T) {
	f := newFleet(t, 1, "s1")
	cs := connect(t, f.server(t, FixedCaller("alice"), nil), nil)
	first, err := callList(t, cs, "list", listIn{})
	if err != nil {
		t.Fatal(err)
	}
	f.clock.advance(ctoken.DefaultCursorTTL + time.Minute)
	_, err = callList(t, cs, "list", listIn{Cursor: first.Next})
	wantRPCError(t, err, jsonrpc.CodeInvalidParams, ctoken.CodeCursorExpired)
}

func TestRejectionIsLoggedWithReasonButNotToken(t *testing.T) {
	f := newFleet(t, 1, "s1")
	alice := connect(t, f.server(t, FixedCaller("alice"), nil), nil)
	bob := connect(t, f.server(t, FixedCaller("bob"), nil), nil)
	first, err := callList(t, alice, "list", listIn{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = callList(t, bob, "list", listIn{Cursor: first.Next})
	wantRPCError(t, err, jsonrpc.CodeInvalidParams, ctoken.CodeCursorInvalid)
	logged := f.log.String()
	if !strings.Contains(logged, "wrong scope") || !strings.Contains(logged, "tool=list") {
		t.Errorf("log lacks the reason or tool: %q", logged)
	}
	if strings.Contains(logged, first.Next[:16]) || strings.Contains(err.Error(), first.Next[:16]) {
		t.Errorf("the cursor leaked into the log or the error")
	}
	if strings.Contains(err.Error(), "wrong scope") {
		t.Errorf("the client learns the rejection reason: %v", err)
	}
}

func TestRequestWithoutCallerIsRefused(t *testing.T) {
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

func TestTokenUserIDReadsBearerTokenUser(t *testing.T) {
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

func TestConstructorsRefuseNil(t *testing.T) {
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

func TestStatesDriveMultiRoundTripThroughSDKClient(t *testing.T) {
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

func TestStatesManualRoundTrip(t *testing.T) {
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

func TestStateRejectionsAreInvalidParams(t *testing.T) {
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

func TestExpiredStateTellsClientToStartOver(t *testing.T) {
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

func TestUnboundArgsStatesIgnoreArguments(t *testing.T) {
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

func TestOpenJSONRefusesStateOfAnotherType(t *testing.T) {
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

func TestStatesBindArgumentsCanonically(t *testing.T) {
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

func TestTokenErrorCodeIgnoresOtherErrors(t *testing.T) {
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
	f.Fuzz(func(t *testing.T, wire, args string) {
		if wire == "" || (wire == seed && json.Valid([]byte(args))) {
			return
		}
		req := &mcp.CallToolRequest{Params: &mcp.CallToolParamsRaw{Name: "ask", Arguments: json.RawMessage(args), RequestState: wire}}
		s, ok, err := states.Open(ctx, req)
		if err == nil || ok || s != "" {
			t.Fatalf("Open accepted fuzz input: %q, %v, %v", s, ok, err)
		}
	})
}

// FuzzTokenErrorCode parses arbitrary error data, as a client does with a
// server's reply.
func FuzzTokenErrorCode(f *testing.F) {
	f.Add([]byte(`{"ctokenCode":1021}`))
	f.Add([]byte(`{"ctokenCode":1e400}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		code := TokenErrorCode(&jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Data: data})
		switch code {
		case 0, ctoken.CodeCursorExpired, ctoken.CodeCursorInvalid, StateExpired, StateInvalid:
		default:
			t.Fatalf("TokenErrorCode = %d", code)
		}
	})
}

func TestStatesWorkForClientsOnOlderProtocol(t *testing.T) {
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

func BenchmarkCursorsResumeAndNext(b *testing.B) {
	f := newFleet(b, 1, "s1")
	cursors, err := NewCursors(f.issuer, &CursorOptions{Caller: FixedCaller("alice")})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	req := &mcp.CallToolRequest{Params: &mcp.CallToolParamsRaw{Name: "list"}}
	in := listIn{Prefix: "a"}
	cursor, err := cursors.Next(ctx, req, in, 1, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		p, err := cursors.Resume(ctx, req, in, cursor)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := cursors.Next(ctx, req, in, p.Page+1, nil); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCursorsTurnAndNext is a page turn as handlers write it: Turn
// verifies the cursor and keeps the scope, Turn.Next issues the next
// cursor; the arguments are fingerprinted once (twice with Resume and Next).
func BenchmarkCursorsTurnAndNext(b *testing.B) {
	f := newFleet(b, 1, "s1")
	cursors, err := NewCursors(f.issuer, &CursorOptions{Caller: FixedCaller("alice")})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	req := &mcp.CallToolRequest{Params: &mcp.CallToolParamsRaw{Name: "list"}}
	in := listIn{Prefix: "a"}
	cursor, err := cursors.Next(ctx, req, in, 1, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		turn, err := cursors.Turn(ctx, req, in, cursor)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := turn.Next(turn.Payload.Page+1, nil); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkArgsFingerprintOfPageArgs is the floor of the page-turn
// benchmarks: one fingerprint of the same arguments, the work Turn does
// once and Resume and Next do twice.
func BenchmarkArgsFingerprintOfPageArgs(b *testing.B) {
	in := listIn{Prefix: "a"}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ctoken.ArgsFingerprint(in); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkStatesSealAndOpen(b *testing.B) {
	f := newFleet(b, 1, "s1")
	states, err := NewStates(f.codec, &StateOptions{Caller: FixedCaller("alice")})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	req := &mcp.CallToolRequest{Params: &mcp.CallToolParamsRaw{Name: "ask", Arguments: json.RawMessage(`{"target":"prod"}`)}}
	b.ReportAllocs()
	for b.Loop() {
		st, err := SealJSON(ctx, states, req, askState{Target: "prod", Plan: 42})
		if err != nil {
			b.Fatal(err)
		}
		req.Params.RequestState = st
		if _, _, err := OpenJSON[askState](ctx, states, req); err != nil {
			b.Fatal(err)
		}
		req.Params.RequestState = ""
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

func TestOpenClaimsSingleUseStateWithRequestContext(t *testing.T) {
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
	wantRPCError(t, err, jsonrpc.CodeInvalidParams, StateInvalid)
}

// A replay store that cannot decide is the server's failure, not the
// client's: the client must not be told its (unconsumed) state is invalid.
func TestOpenReportsReplayStoreFailureAsInternalError(t *testing.T) {
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
func TestSealRefusesStateThatIsNotUTF8(t *testing.T) {
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
