package ctokenmcpgo

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
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

// TestSecuredRounds pins the rounds of a call through SecureRequestState: plaintext to the handlers, a result without state untouched, and what a handler's error or a refusal becomes.
func TestSecuredRounds(t *testing.T) {
	for _, tc := range []struct {
		name string
		test func(*testing.T)
	}{
		{"a tool's rounds accepted and declined with plaintext handlers", mrtrAcceptedAndDeclinedWithPlaintextHandlers},
		{"a prompt's rounds with a plaintext handler", promptMRTRWithPlaintextHandler},
		{"input required without state passes through", inputRequiredWithoutStatePassesThrough},
		{"a handler that seals itself is refused", handlerThatSealsItselfIsRefused},
		{"mcp-go sends handler errors as internal error", mcpGoSendsHandlerErrorsAsInternalError},
		{"an unbound codec fails closed", unboundCodecFailsClosed},
		{"a refused state reaches OnError hooks as a Rejection", refusedStateReachesOnErrorHooksAsRejection},
	} {
		t.Run(tc.name, tc.test)
	}
}

func mrtrAcceptedAndDeclinedWithPlaintextHandlers(t *testing.T) {
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
func inputRequiredWithoutStatePassesThrough(t *testing.T) {
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

func promptMRTRWithPlaintextHandler(t *testing.T) {
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

func handlerThatSealsItselfIsRefused(t *testing.T) {
	f := newFleet(t, 1, "s1", nil)
	p := inProcess(t, f.server(t, ContextCaller, nil), "alice", &elicitor{answer: true})
	_, err := p.call("sealer", nil)
	if !errors.Is(err, mcp.ErrInternalError) || !strings.Contains(f.log.String(), "handler returned a sealed requestState") {
		t.Errorf("err = %v; log %s", err, f.log.String())
	}
}

// TestSecuredOlderClients pins what a 2025-11-25 client, which cannot carry a state, gets from a secured server.
func TestSecuredOlderClients(t *testing.T) {
	for _, tc := range []struct {
		name string
		test func(*testing.T)
	}{
		{"without elicitation it gets a clear tool error", olderClientWithoutElicitationGetsClearToolError},
		{"with elicitation it is bridged", olderClientWithElicitationIsBridged},
	} {
		t.Run(tc.name, tc.test)
	}
}

// A client on 2025-11-25 over stateless HTTP has no session the server could
// send elicitation/create on, and declares no elicitation capability: the
// tool says so in a tool error, not a failed round trip.
func olderClientWithoutElicitationGetsClearToolError(t *testing.T) {
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
func olderClientWithElicitationIsBridged(t *testing.T) {
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
// refused state is -32603 here (and a refused cursor a tool error result)
// and not the -32602 of package ctokenmcp. If mcp-go ever honours a
// handler's code, this test fails.
func mcpGoSendsHandlerErrorsAsInternalError(t *testing.T) {
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

// unboundCodecFailsClosed: with a codec bound to the subject only, a
// state sealed for one tool opened for another (the handler of "ask2" ran
// on a state of "ask"). SecureRequestState cannot return an error, so it
// logs the misconfiguration and refuses every state in and out with
// -32603; calls without a state pass.
func unboundCodecFailsClosed(t *testing.T) {
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

// A state SecureRequestState refuses is a JSON-RPC error, and the error
// mcp-go hands to the server's OnError hooks wraps the *Rejection, so a
// server can count refusals by code without parsing a message; the
// handler never runs.
func refusedStateReachesOnErrorHooksAsRejection(t *testing.T) {
	f := newFleet(t, 1, "s1", nil)
	states, err := NewStates(f.codec, &StateOptions{Logger: newTextLogger(f.log)})
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		codes []int
	)
	hooks := &server.Hooks{}
	hooks.AddOnError(func(_ context.Context, _ any, method mcp.MCPMethod, _ any, err error) {
		var r *Rejection
		if method == mcp.MethodToolsCall && errors.As(err, &r) {
			mu.Lock()
			codes = append(codes, r.Code)
			mu.Unlock()
		}
	})
	var ran atomic.Int32
	s := server.NewMCPServer("hooks", "v0", SecureRequestState(states), server.WithHooks(hooks), server.WithToolCapabilities(false))
	s.AddTool(mcp.NewTool("echo"), func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		ran.Add(1)
		return mcp.NewToolResultText("ran"), nil
	})
	for _, tc := range []struct {
		name, state string
	}{
		{"not sealed", "plaintext"},
		{"forged", "v1e.AAAA"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			msg := handleRaw(s, "alice", "echo", tc.state)
			want := `"error":{"code":-32603,"message":"invalid requestState (ctokenCode 1023)"}`
			if !strings.Contains(msg, want) || strings.Contains(msg, `"result"`) {
				t.Errorf("response %s; want %s", msg, want)
			}
		})
	}
	mu.Lock()
	defer mu.Unlock()
	if len(codes) != 2 || codes[0] != StateInvalid || codes[1] != StateInvalid {
		t.Errorf("OnError saw codes %v; want [%d %d]", codes, StateInvalid, StateInvalid)
	}
	if ran.Load() != 0 {
		t.Errorf("the handler ran %d time(s) on a refused state", ran.Load())
	}
}

// A two-round tool with an effect in its second round, for the retry of a
// continuation (StateOptions.AnswerRetries).

// deployOut's members are not in alphabetical order: a result decoded into
// a map and encoded again would not be the same bytes.
type deployOut struct {
	Zone   string `json:"zone"`
	App    string `json:"app"`
	Deploy int32  `json:"deploy"`
}

// holdRound holds the second round of deployServer's tool: it closes
// entered, then waits for release.
type holdRound struct{ entered, release chan struct{} }

var errDeployFailed = errors.New("deploy failed")

// deployServer returns an mcp-go server with the tool "deploy", whose first
// round asks for confirmation and whose second deploys (counted in
// effects; held by hold first when hold is not nil), and "deploy_fails",
// whose second round fails with an error. Secured with f's codec and
// AnswerRetries.
func deployServer(t testing.TB, f *fleet, effects *atomic.Int32, hold *holdRound) *server.MCPServer {
	t.Helper()
	states, err := NewStates(f.codec, &StateOptions{Caller: ContextCaller, AnswerRetries: true, Logger: newTextLogger(f.log)})
	if err != nil {
		t.Fatal(err)
	}
	deploy := func(fail bool) server.ToolHandlerFunc {
		return func(_ context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			target := req.GetString("target", "")
			switch req.Params.RequestState {
			case "":
				return server.NewInputRequestBuilder("confirm:"+target).Elicit("ok", mcp.ElicitationParams{Message: "deploy " + target + "?", RequestedSchema: confirmSchema}).ToolResult(), nil
			case "confirm:" + target:
				if hold != nil {
					close(hold.entered)
					<-hold.release
				}
				if fail {
					return nil, errDeployFailed
				}
				n := effects.Add(1)
				return mcp.NewToolResultStructured(deployOut{Zone: "eu", App: target, Deploy: n}, fmt.Sprintf("deployed %s (%d)", target, n)), nil
			}
			return mcp.NewToolResultError("handler saw an unexpected state"), nil
		}
	}
	s := server.NewMCPServer("deploy", "v0", SecureRequestState(states), server.WithToolCapabilities(false), server.WithElicitation())
	s.AddTool(mcp.NewTool("deploy"), deploy(false))
	s.AddTool(mcp.NewTool("deploy_fails"), deploy(true))
	return s
}

// lossyTransport is a client transport that, while armed, loses the
// response of the next tools/call carrying a requestState after the
// server answered it: it keeps the request and the result's JSON, and
// the client gets an error.
type lossyTransport struct {
	transport.Interface
	armed atomic.Bool

	mu   sync.Mutex
	req  transport.JSONRPCRequest
	lost []byte
}

func (l *lossyTransport) SetRequestHandler(h transport.RequestHandler) {
	if b, ok := l.Interface.(transport.BidirectionalInterface); ok {
		b.SetRequestHandler(h)
	}
}

func (l *lossyTransport) SendRequest(ctx context.Context, req transport.JSONRPCRequest) (*transport.JSONRPCResponse, error) {
	resp, err := l.Interface.SendRequest(ctx, req)
	if err != nil || req.Method != "tools/call" || resp == nil || len(resp.Result) == 0 {
		return resp, err
	}
	b, _ := json.Marshal(req.Params)
	if !strings.Contains(string(b), `"requestState":"v1`) || !l.armed.CompareAndSwap(true, false) {
		return resp, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.req, l.lost = req, append([]byte(nil), resp.Result...)
	return nil, errors.New("test: response lost")
}

// resend sends the lost request again, unchanged, over the client's own
// transport: the retry of the same call with the same state. It returns
// the lost result's JSON and the retry's.
func (l *lossyTransport) resend(t *testing.T, ctx context.Context) (lost, again []byte) {
	t.Helper()
	l.mu.Lock()
	req, lost := l.req, l.lost
	l.mu.Unlock()
	if lost == nil {
		t.Fatal("no response was lost")
	}
	resp, err := l.Interface.SendRequest(ctx, req)
	if err != nil || resp.Error != nil {
		t.Fatalf("retry: %v, %+v", err, resp)
	}
	return lost, resp.Result
}

// TestAnswerRetries pins AnswerRetries: the retry of a round whose answer was lost gets its recorded result, and nothing else does.
func TestAnswerRetries(t *testing.T) {
	for _, tc := range []struct {
		name string
		test func(*testing.T)
	}{
		{"a retry of a lost round gets its result with one effect", securedRetryOfALostRoundGetsItsResultWithOneEffect},
		{"anyone else and any change are refused", securedRetryRefusesAnyoneElseAndAnyChange},
		{"a concurrent retry is busy", securedConcurrentRetryIsBusy},
		{"a record that does not open is used", securedRetryOfARecordThatDoesNotOpenIsUsed},
		{"a recorder is needed", newStatesAnswerRetriesRefusesACodecWithoutRecorder},
	} {
		t.Run(tc.name, tc.test)
	}
}

// The case, driven by mcp-go's client: the second round deploys,
// its response is lost, and the retry of the same call with the same state
// gets the first result, the same bytes, with one deploy.
func securedRetryOfALostRoundGetsItsResultWithOneEffect(t *testing.T) {
	f := newFleet(t, 1, "s1", replay.NewMemoryStore(0))
	var effects atomic.Int32
	s := deployServer(t, f, &effects, nil)
	lt := &lossyTransport{Interface: transport.NewInProcessTransport(s)}
	p := start(t, lt, WithCaller(context.Background(), "alice"), &elicitor{answer: true})
	lt.armed.Store(true)
	if _, err := p.call("deploy", map[string]any{"target": "shop"}); err == nil {
		t.Fatal("the call whose response was lost returned")
	}
	for i := range 2 {
		lost, again := lt.resend(t, p.ctx)
		if string(again) != string(lost) {
			t.Fatalf("retry %d:\n%s\nthe lost result:\n%s", i, again, lost)
		}
		if !strings.Contains(string(lost), `"structuredContent":{"zone":"eu","app":"shop","deploy":1}`) {
			t.Fatalf("lost result %s", lost)
		}
	}
	if n := effects.Load(); n != 1 {
		t.Fatalf("%d deploys", n)
	}
}

// Anyone else with the state, or the same caller with anything changed, is
// refused as without AnswerRetries (1023 invalid, 1022 expired) after the
// round ran, and runs nothing; a state whose round failed is "already
// used" (1026).
func securedRetryRefusesAnyoneElseAndAnyChange(t *testing.T) {
	f := newFleet(t, 1, "s1", replay.NewMemoryStore(0))
	var effects atomic.Int32
	s := deployServer(t, f, &effects, nil)
	alice := inProcess(t, s, "alice", &elicitor{answer: true})
	if res, err := alice.call("deploy", map[string]any{"target": "shop"}); err != nil || res.IsError {
		t.Fatalf("%v, %+v", err, res)
	}
	results, _ := alice.wire.states()
	st := results[0] // the state the deploy ran with
	for _, tc := range []struct {
		name   string
		who    string
		tool   string
		target string
		state  string
		later  time.Duration
		code   int
	}{
		{"another caller", "bob", "deploy", "shop", st, 0, StateInvalid},
		{"changed argument", "alice", "deploy", "bank", st, 0, StateInvalid},
		{"tampered state", "alice", "deploy", "shop", st[:len(st)-2] + flip(st[len(st)-2]) + st[len(st)-1:], 0, StateInvalid},
		{"expired state", "alice", "deploy", "shop", st, time.Hour, StateExpired},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f.clock.advance(tc.later)
			defer f.clock.advance(-tc.later)
			p := inProcess(t, s, tc.who, &elicitor{answer: true})
			p.wire.setSwap(func(string) string { return tc.state })
			res, err := p.call(tc.tool, map[string]any{"target": tc.target})
			refused(t, p, res, err, tc.code)
		})
	}
	if n := effects.Load(); n != 1 {
		t.Fatalf("%d deploys", n)
	}
	t.Run("round failed", func(t *testing.T) {
		p := inProcess(t, s, "alice", &elicitor{answer: true})
		if _, err := p.call("deploy_fails", map[string]any{"target": "shop"}); err == nil {
			t.Fatal("the failing round succeeded")
		}
		results, _ := p.wire.states()
		p.wire.setSwap(func(string) string { return results[0] })
		res, err := p.call("deploy_fails", map[string]any{"target": "shop"})
		refused(t, p, res, err, StateUsed)
		var r *Rejection
		if !errors.As(stateUsed, &r) || r.Expired() || r.Busy() {
			t.Fatalf("used: %+v", r)
		}
	})
}

// A retry that overtakes the first attempt while its round runs is told
// busy (1027) and runs nothing; the retry after the round gets its result.
func securedConcurrentRetryIsBusy(t *testing.T) {
	f := newFleet(t, 1, "s1", replay.NewMemoryStore(0))
	var effects atomic.Int32
	hold := &holdRound{entered: make(chan struct{}), release: make(chan struct{})}
	s := deployServer(t, f, &effects, hold)
	first := inProcess(t, s, "alice", &elicitor{answer: true})
	done := make(chan *mcp.CallToolResult, 1)
	go func() {
		res, _ := first.call("deploy", map[string]any{"target": "shop"})
		done <- res
	}()
	<-hold.entered
	results, _ := first.wire.states()
	retry := inProcess(t, s, "alice", &elicitor{answer: true})
	retry.wire.setSwap(func(string) string { return results[0] })
	res, err := retry.call("deploy", map[string]any{"target": "shop"})
	refused(t, retry, res, err, StateBusy)
	if busy := rejection(mcptoken.RefuseState(mcptoken.ErrStateBusy)); !busy.Busy() || busy.Expired() {
		t.Fatal("a busy rejection does not say so")
	}
	close(hold.release)
	got := <-done
	if got == nil || got.IsError {
		t.Fatalf("first attempt: %+v", got)
	}
	res, err = retry.call("deploy", map[string]any{"target": "shop"})
	if err != nil || res.IsError || text(res) != text(got) || effects.Load() != 1 {
		t.Fatalf("retry after the round: %v, %q, %d deploys", err, text(res), effects.Load())
	}
}

// AnswerRetries needs a single-use codec whose store records results.
func newStatesAnswerRetriesRefusesACodecWithoutRecorder(t *testing.T) {
	for _, tc := range []struct {
		name  string
		store replay.Store
	}{
		{"not single-use", nil},
		{"store without records", failingStore{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFleet(t, 1, "s1", tc.store)
			st, err := NewStates(f.codec, &StateOptions{AnswerRetries: true})
			if st != nil || !errors.Is(err, mcptoken.ErrNoRecorder) || !errors.Is(err, ctoken.ErrConfig) {
				t.Fatalf("%v, %v; want ErrNoRecorder", st, err)
			}
		})
	}
}

// FuzzToolResultOf: the decoder of a recorded round's result never panics,
// and what it decodes encodes to a fixed point: decoded and encoded again,
// it is the same bytes, so every retry is answered alike.
func FuzzToolResultOf(f *testing.F) {
	f.Add([]byte(`{"content":[{"type":"text","text":"deployed"}],"structuredContent":{"zone":"eu","app":"shop","deploy":1}}`))
	f.Add([]byte(`{"content":[],"inputRequests":{"q":{"method":"elicitation/create","params":{"message":"?","requestedSchema":{"type":"object"}}}},"requestState":"v1e.x","resultType":"input_required"}`))
	f.Add([]byte(`{"_meta":{"a":1},"content":[{"type":"text","text":"x"}],"isError":true}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, b []byte) {
		res, err := toolResultOf(b)
		if err != nil {
			return
		}
		once, err := json.Marshal(res)
		if err != nil {
			return
		}
		again, err := toolResultOf(once)
		if err != nil {
			t.Fatalf("%s decoded, encoded to %s, which does not decode: %v", b, once, err)
		}
		twice, err := json.Marshal(again)
		if err != nil || string(twice) != string(once) {
			t.Fatalf("not a fixed point: %s, then %s (%v)", once, twice, err)
		}
	})
}

// editingStore is a memory store whose records are edited in the store:
// edit, when set, changes every recorded result on its way out. It keeps
// what was recorded, as the store holds it.
type editingStore struct {
	*replay.MemoryStore
	edit     func(record []byte) []byte
	mu       sync.Mutex
	recorded [][]byte
}

func (e *editingStore) ConfirmRecord(ctx context.Context, id, token string, until time.Time, fp, result []byte) error {
	e.mu.Lock()
	e.recorded = append(e.recorded, append([]byte(nil), result...))
	e.mu.Unlock()
	return e.MemoryStore.ConfirmRecord(ctx, id, token, until, fp, result)
}

func (e *editingStore) AcquireRecord(ctx context.Context, id string, lease time.Duration, fp []byte) (replay.Record, error) {
	rec, err := e.MemoryStore.AcquireRecord(ctx, id, lease, fp)
	e.mu.Lock()
	edit := e.edit
	e.mu.Unlock()
	if err == nil && rec.State == replay.LeaseDone && len(rec.Result) > 0 && edit != nil {
		rec.Result = edit(rec.Result)
	}
	return rec, err
}

// The store holds a round's result sealed, never in clear, and a record
// that does not open (a byte edited, cut short, or a result in clear, as
// a version that did not seal recorded it, or as forged in the store) is
// never answered: the retry is refused as already used (1026), logged at
// Error, and the round does not run again.
func securedRetryOfARecordThatDoesNotOpenIsUsed(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func([]byte) []byte
	}{
		{"byte edited", func(b []byte) []byte { b[len(b)-1] ^= 1; return b }},
		{"cut short", func(b []byte) []byte { return b[:len(b)-1] }},
		{"in clear", func([]byte) []byte {
			return []byte(`{"content":[{"type":"text","text":"forged"}],"structuredContent":{"zone":"eu","app":"shop","deploy":7}}`)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store := &editingStore{MemoryStore: replay.NewMemoryStore(0)}
			f := newFleet(t, 1, "s1", store)
			var effects atomic.Int32
			s := deployServer(t, f, &effects, nil)
			p := inProcess(t, s, "alice", &elicitor{answer: true})
			first, err := p.call("deploy", map[string]any{"target": "shop"})
			if err != nil || first.IsError {
				t.Fatalf("%v, %+v", err, first)
			}
			store.mu.Lock()
			recorded := store.recorded
			store.edit = tc.edit
			store.mu.Unlock()
			if len(recorded) != 1 || bytes.Contains(recorded[0], []byte(`"app":"shop"`)) || bytes.Contains(recorded[0], []byte(text(first))) {
				t.Fatalf("the store holds %q; want one sealed record", recorded)
			}
			results, _ := p.wire.states()
			retry := inProcess(t, s, "alice", &elicitor{answer: true})
			retry.wire.setSwap(func(string) string { return results[0] })
			res, err := retry.call("deploy", map[string]any{"target": "shop"})
			refused(t, retry, res, err, StateUsed)
			if effects.Load() != 1 || !strings.Contains(f.log.String(), "level=ERROR") || !strings.Contains(f.log.String(), "does not open") || strings.Contains(f.log.String(), results[0]) {
				t.Fatalf("%d deploys, log %q", effects.Load(), f.log.String())
			}
		})
	}
}
