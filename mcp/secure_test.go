package ctokenmcp

import (
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ctoken/ctoken"
	"github.com/ctoken/ctoken/mcptoken"
	"github.com/ctoken/ctoken/replay"
	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Plaintext handlers: written as if requestState were safe to trust, which
// the middleware makes true.

type stepIn struct {
	Target string `json:"target"`
}

type stepOut struct {
	Target  string   `json:"target"`
	Answers []string `json:"answers"`
	Seen    []string `json:"seen"` // the requestState each round saw
}

// twoRounds is what every secured test server records: the plaintext
// states its handlers saw.
type seenStates struct {
	mu   sync.Mutex
	seen []string
}

func (s *seenStates) add(st string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seen = append(s.seen, st)
}

func (s *seenStates) all() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.seen...)
}

func question(id string) mcp.InputRequestMap {
	return mcp.InputRequestMap{id: &mcp.ElicitParams{
		Message:         "answer " + id,
		RequestedSchema: map[string]any{"type": "object", "properties": map[string]any{"a": map[string]any{"type": "string"}}},
	}}
}

func answerOf(resp mcp.InputResponseMap, id string) string {
	r, _ := resp[id].(*mcp.ElicitResult)
	if r == nil {
		return ""
	}
	a, _ := r.Content["a"].(string)
	return a
}

// securedServer returns a server with a tool "steps" (and its twin
// "steps2"), a prompt "interview" and a resource "res://doc" that each need
// input, all written against plaintext requestState, secured with codec.
func securedServer(t testing.TB, codec *ctoken.RequestStateCodec, who CallerFunc, opts *StateOptions, log io.Writer) (*mcp.Server, *seenStates) {
	t.Helper()
	seen := &seenStates{}
	tool := func(ctx context.Context, req *mcp.CallToolRequest, in stepIn) (*mcp.CallToolResult, stepOut, error) {
		st := req.Params.RequestState
		seen.add(st)
		switch {
		case st == "":
			return &mcp.CallToolResult{InputRequests: question("q1"), RequestState: "step1|" + in.Target}, stepOut{}, nil
		case st == "step1|"+in.Target:
			return &mcp.CallToolResult{InputRequests: question("q2"),
				RequestState: "step2|" + in.Target + "|" + answerOf(req.Params.InputResponses, "q1")}, stepOut{}, nil
		case strings.HasPrefix(st, "step2|"+in.Target+"|"):
			prev := strings.TrimPrefix(st, "step2|"+in.Target+"|")
			return nil, stepOut{Target: in.Target, Answers: []string{prev, answerOf(req.Params.InputResponses, "q2")}}, nil
		}
		return nil, stepOut{}, errors.New("unexpected state")
	}
	prompt := func(ctx context.Context, req *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
		st := req.Params.RequestState
		seen.add(st)
		topic := req.Params.Arguments["topic"]
		switch {
		case st == "":
			return &mcp.GetPromptResult{InputRequests: question("p1"), RequestState: "p1|" + topic}, nil
		case st == "p1|"+topic:
			return &mcp.GetPromptResult{InputRequests: question("p2"),
				RequestState: "p2|" + topic + "|" + answerOf(req.Params.InputResponses, "p1")}, nil
		case strings.HasPrefix(st, "p2|"+topic+"|"):
			text := strings.TrimPrefix(st, "p2|"+topic+"|") + "+" + answerOf(req.Params.InputResponses, "p2")
			return &mcp.GetPromptResult{Messages: []*mcp.PromptMessage{{Role: "user", Content: &mcp.TextContent{Text: text}}}}, nil
		}
		return nil, errors.New("unexpected state")
	}
	resource := func(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
		st := req.Params.RequestState
		seen.add(st)
		if st == "" {
			return &mcp.ReadResourceResult{InputRequests: question("r1"), RequestState: "r1|" + req.Params.URI}, nil
		}
		if st != "r1|"+req.Params.URI {
			return nil, errors.New("unexpected state")
		}
		return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: req.Params.URI, Text: answerOf(req.Params.InputResponses, "r1")}}}, nil
	}
	s := mcp.NewServer(&mcp.Implementation{Name: "secured", Version: "v0"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "steps"}, tool)
	mcp.AddTool(s, &mcp.Tool{Name: "steps2"}, tool)
	s.AddPrompt(&mcp.Prompt{Name: "interview", Arguments: []*mcp.PromptArgument{{Name: "topic"}}}, prompt)
	s.AddPrompt(&mcp.Prompt{Name: "interview2", Arguments: []*mcp.PromptArgument{{Name: "topic"}}}, prompt)
	s.AddResource(&mcp.Resource{URI: "res://doc", Name: "doc"}, resource)
	if opts == nil {
		opts = &StateOptions{}
	}
	o := *opts
	o.Caller = who
	if log != nil {
		o.Logger = slog.New(slog.NewTextHandler(log, nil))
	}
	if err := SecureRequestState(s, codec, &o); err != nil {
		t.Fatal(err)
	}
	return s, seen
}

// answering is client options whose elicitation handler answers every
// question id with "A-"+id, letting the SDK drive the rounds.
func answering() *mcp.ClientOptions {
	return &mcp.ClientOptions{ElicitationHandler: func(_ context.Context, r *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
		id := strings.TrimPrefix(r.Params.Message, "answer ")
		return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"a": "A-" + id}}, nil
	}}
}

func answers(ids ...string) mcp.InputResponseMap {
	m := mcp.InputResponseMap{}
	for _, id := range ids {
		m[id] = &mcp.ElicitResult{Action: "accept", Content: map[string]any{"a": "A-" + id}}
	}
	return m
}

func stepResult(t testing.TB, res *mcp.CallToolResult) stepOut {
	t.Helper()
	if res.IsError || res.NeedsInput() {
		t.Fatalf("not a final result: isError %v %v, needsInput %v", res.IsError, res.Content, res.NeedsInput())
	}
	var out stepOut
	b, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

func wantSealed(t testing.TB, state string, plain ...string) {
	t.Helper()
	if !strings.HasPrefix(state, "v1e.") {
		t.Fatalf("requestState %q is not sealed (v1e.)", state)
	}
	for _, p := range plain {
		if strings.Contains(state, p) {
			t.Fatalf("requestState shows its plaintext %q", p)
		}
	}
}

// bearerTransport adds a bearer token to every request and records every
// response body, so a test can read what went over the wire.
type bearerTransport struct {
	token string
	mu    sync.Mutex
	wire  strings.Builder
}

func (b *bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	resp, err := http.DefaultTransport.RoundTrip(r)
	if err != nil {
		return nil, err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	b.mu.Lock()
	b.wire.Write(body)
	b.mu.Unlock()
	resp.Body = io.NopCloser(strings.NewReader(string(body)))
	return resp, err
}

func (b *bearerTransport) seen() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.wire.String()
}

var testUsers = map[string]string{"alice-token": "alice", "bob-token": "bob"}

// httpEndpoint serves s over stateless streamable HTTP on 127.0.0.1 behind
// bearer authentication.
func httpEndpoint(t testing.TB, s *mcp.Server) string {
	t.Helper()
	verify := func(_ context.Context, token string, _ *http.Request) (*auth.TokenInfo, error) {
		user, ok := testUsers[token]
		if !ok {
			return nil, auth.ErrInvalidToken
		}
		return &auth.TokenInfo{UserID: user, Expiration: time.Now().Add(time.Hour)}, nil
	}
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, &mcp.StreamableHTTPOptions{Stateless: true})
	srv := httptest.NewServer(auth.RequireBearerToken(verify, nil)(h))
	t.Cleanup(srv.Close)
	return srv.URL
}

// connectHTTP joins a client to endpoint as the user of token.
func connectHTTP(t testing.TB, endpoint, token string, opts *mcp.ClientOptions, sopts *mcp.ClientSessionOptions) (*mcp.ClientSession, *bearerTransport) {
	t.Helper()
	bt := &bearerTransport{token: token}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "http-client", Version: "v0"}, opts).Connect(context.Background(),
		&mcp.StreamableClientTransport{Endpoint: endpoint, HTTPClient: &http.Client{Transport: bt}, MaxRetries: -1}, sopts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs, bt
}

var requestStateOnWire = regexp.MustCompile(`"requestState":"([^"]*)"`)

// TestSecuredRounds pins the rounds of a call through SecureRequestState: sealed on the wire, plaintext to the handlers, and calls without state untouched.
func TestSecuredRounds(t *testing.T) {
	for _, tc := range []struct {
		name string
		test func(*testing.T)
	}{
		{"a tool and a prompt take two rounds over HTTP", securedToolAndPromptTakeTwoRoundsOverHTTP},
		{"a tool takes two rounds in memory", securedToolTakesTwoRoundsInMemory},
		{"calls without state pass through", securedCallsWithoutStatePassThrough},
		{"the reference dispatch's states open and seal", interopDispatchOpensAndSealsReferenceStates},
	} {
		t.Run(tc.name, tc.test)
	}
}

// securedToolAndPromptTakeTwoRoundsOverHTTP drives a tool and a prompt
// that each ask twice, with the SDK client answering, over streamable HTTP;
// every requestState on the wire is sealed, and the handlers saw plaintext.
func securedToolAndPromptTakeTwoRoundsOverHTTP(t *testing.T) {
	f := newFleet(t, 1, "s1")
	s, seen := securedServer(t, f.codec, TokenUserID, nil, nil)
	cs, bt := connectHTTP(t, httpEndpoint(t, s), "alice-token", answering(), nil)
	ctx := context.Background()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "steps", Arguments: stepIn{Target: "prod"}})
	if err != nil {
		t.Fatal(err)
	}
	if out := stepResult(t, res); out.Target != "prod" || strings.Join(out.Answers, ",") != "A-q1,A-q2" {
		t.Errorf("tool result %+v", out)
	}
	pr, err := cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: "interview", Arguments: map[string]string{"topic": "go"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(pr.Messages) != 1 || pr.Messages[0].Content.(*mcp.TextContent).Text != "A-p1+A-p2" {
		t.Errorf("prompt result %+v", pr.Messages)
	}
	rr, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: "res://doc"})
	if err != nil {
		t.Fatal(err)
	}
	if len(rr.Contents) != 1 || rr.Contents[0].Text != "A-r1" {
		t.Errorf("resource result %+v", rr.Contents)
	}
	want := []string{"", "step1|prod", "step2|prod|A-q1", "", "p1|go", "p2|go|A-p1", "", "r1|res://doc"}
	if got := seen.all(); strings.Join(got, ";") != strings.Join(want, ";") {
		t.Errorf("handlers saw %q, want %q", got, want)
	}
	// Server to client: five input-required results, each sealed; client to
	// server is the same five echoed, never plaintext.
	states := requestStateOnWire.FindAllStringSubmatch(bt.seen(), -1)
	if len(states) != 5 {
		t.Fatalf("%d requestStates on the wire, want 5:\n%s", len(states), bt.seen())
	}
	for _, m := range states {
		wantSealed(t, m[1], "step", "prod", "p1|", "p2|", "r1|")
	}
}

// securedToolTakesTwoRoundsInMemory steps the rounds by hand and checks
// each state the client holds.
func securedToolTakesTwoRoundsInMemory(t *testing.T) {
	f := newFleet(t, 1, "s1")
	s, _ := securedServer(t, f.codec, FixedCaller("alice"), nil, nil)
	cs := connect(t, s, manual)
	ctx := context.Background()
	p := &mcp.CallToolParams{Name: "steps", Arguments: stepIn{Target: "prod"}}
	r1, err := cs.CallTool(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if !r1.NeedsInput() {
		t.Fatal("round one is not input-required")
	}
	wantSealed(t, r1.RequestState, "step1", "prod")
	r2, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "steps", Arguments: stepIn{Target: "prod"}, RequestState: r1.RequestState, InputResponses: answers("q1")})
	if err != nil {
		t.Fatal(err)
	}
	wantSealed(t, r2.RequestState, "step2", "prod", "A-q1")
	r3, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "steps", Arguments: stepIn{Target: "prod"}, RequestState: r2.RequestState, InputResponses: answers("q2")})
	if err != nil {
		t.Fatal(err)
	}
	if out := stepResult(t, r3); strings.Join(out.Answers, ",") != "A-q1,A-q2" {
		t.Errorf("result %+v", out)
	}
	// The same with a prompt.
	pp := &mcp.GetPromptParams{Name: "interview", Arguments: map[string]string{"topic": "go"}}
	g1, err := cs.GetPrompt(ctx, pp)
	if err != nil {
		t.Fatal(err)
	}
	wantSealed(t, g1.RequestState, "p1|")
	g2, err := cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: "interview", Arguments: pp.Arguments, RequestState: g1.RequestState, InputResponses: answers("p1")})
	if err != nil {
		t.Fatal(err)
	}
	wantSealed(t, g2.RequestState, "p2|")
	g3, err := cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: "interview", Arguments: pp.Arguments, RequestState: g2.RequestState, InputResponses: answers("p2")})
	if err != nil {
		t.Fatal(err)
	}
	if len(g3.Messages) != 1 || g3.Messages[0].Content.(*mcp.TextContent).Text != "A-p1+A-p2" {
		t.Errorf("prompt result %+v", g3.Messages)
	}
}

// failingStore is a replay store that cannot answer.
type failingStore struct{}

func (failingStore) Claim(context.Context, string, time.Time) (bool, error) {
	return false, errors.New("store unreachable")
}

// TestSecuredRefusals pins what SecureRequestState refuses and what the client is told: a state that does not open, a missing caller, a store failure, a handler that seals itself.
func TestSecuredRefusals(t *testing.T) {
	for _, tc := range []struct {
		name string
		test func(*testing.T)
	}{
		{"states that must not open are refused", securedStateRejections},
		{"an expired state tells the client to start over", securedExpiredStateTellsClientToStartOver},
		{"a single-use state is refused the second time", securedSingleUseStateIsRefusedTheSecondTime},
		{"a store failure is an internal error", securedStoreFailureIsInternalError},
		{"a request without caller is refused", securedRequestWithoutCallerIsRefused},
		{"a handler that seals itself is refused", securedRefusesToSealTwice},
	} {
		t.Run(tc.name, tc.test)
	}
}

// securedStateRejections sends states that must not open, over each
// method, and checks what the client is told and that the handler never
// ran with them.
func securedStateRejections(t *testing.T) {
	for _, transport := range []string{"in memory", "streamable HTTP"} {
		t.Run(transport, func(t *testing.T) { testSecuredStateRejections(t, transport == "in memory") })
	}
}

func testSecuredStateRejections(t *testing.T, inMemory bool) {
	f := newFleet(t, 1, "s1")
	log := &syncBuffer{}
	var (
		alice, bob         *mcp.ClientSession
		aliceSeen, bobSeen *seenStates
	)
	if inMemory {
		var aliceSrv, bobSrv *mcp.Server
		aliceSrv, aliceSeen = securedServer(t, f.codec, FixedCaller("alice"), nil, log)
		bobSrv, bobSeen = securedServer(t, f.codec, FixedCaller("bob"), nil, log)
		alice, bob = connect(t, aliceSrv, manual), connect(t, bobSrv, manual)
	} else {
		var srv *mcp.Server
		srv, aliceSeen = securedServer(t, f.codec, TokenUserID, nil, log)
		bobSeen = &seenStates{}
		endpoint := httpEndpoint(t, srv)
		alice, _ = connectHTTP(t, endpoint, "alice-token", manual, nil)
		bob, _ = connectHTTP(t, endpoint, "bob-token", manual, nil)
	}
	ctx := context.Background()
	first, err := alice.CallTool(ctx, &mcp.CallToolParams{Name: "steps", Arguments: stepIn{Target: "prod"}})
	if err != nil {
		t.Fatal(err)
	}
	st := first.RequestState
	prompt, err := alice.GetPrompt(ctx, &mcp.GetPromptParams{Name: "interview", Arguments: map[string]string{"topic": "go"}})
	if err != nil {
		t.Fatal(err)
	}
	pst := prompt.RequestState
	// Edit one base64url character into another, as a client editing the
	// state would, so that the ciphertext (not the framing) is what fails.
	flipped := []byte(st)
	if flipped[len(st)/2] == 'A' {
		flipped[len(st)/2] = 'B'
	} else {
		flipped[len(st)/2] = 'A'
	}
	beforeA, beforeB := len(aliceSeen.all()), len(bobSeen.all())
	type call func() error
	tool := func(cs *mcp.ClientSession, name, target, state string) call {
		return func() error {
			_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: stepIn{Target: target}, RequestState: state, InputResponses: answers("q1")})
			return err
		}
	}
	getPrompt := func(cs *mcp.ClientSession, name, topic, state string) call {
		return func() error {
			_, err := cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: name, Arguments: map[string]string{"topic": topic}, RequestState: state, InputResponses: answers("p1")})
			return err
		}
	}
	read := func(cs *mcp.ClientSession, state string) call {
		return func() error {
			_, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: "res://doc", RequestState: state, InputResponses: answers("r1")})
			return err
		}
	}
	for _, tc := range []struct {
		name   string
		call   call
		reason string
	}{
		{"tampered", tool(alice, "steps", "prod", string(flipped)), "decryption failed"},
		{"truncated", tool(alice, "steps", "prod", st[:len(st)-3]), ""},
		{"plaintext sent by the client", tool(alice, "steps", "prod", "step1|prod"), ""},
		{"other caller", tool(bob, "steps", "prod", st), "decryption failed"},
		{"other tool", tool(alice, "steps2", "prod", st), "decryption failed"},
		{"other arguments", tool(alice, "steps", "staging", st), "arguments differ from the sealed call"},
		{"tool state on a prompt", getPrompt(alice, "interview", "go", st), "decryption failed"},
		{"prompt state on another prompt", getPrompt(alice, "interview2", "go", pst), "decryption failed"},
		{"prompt state with other arguments", getPrompt(alice, "interview", "rust", pst), "arguments differ from the sealed call"},
		{"prompt state on a resource", read(alice, pst), "decryption failed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			wantRPCError(t, err, jsonrpc.CodeInvalidParams, StateInvalid)
			if strings.Contains(err.Error(), "decrypt") || strings.Contains(err.Error(), "arguments differ") {
				t.Errorf("the client learns the reason: %v", err)
			}
			if tc.reason != "" && !strings.Contains(log.String(), tc.reason) {
				t.Errorf("log lacks %q: %s", tc.reason, log.String())
			}
		})
	}
	if a, b := len(aliceSeen.all()), len(bobSeen.all()); a != beforeA || b != beforeB {
		t.Errorf("a handler ran with a refused state: %q %q", aliceSeen.all()[beforeA:], bobSeen.all()[beforeB:])
	}
	if strings.Contains(log.String(), st[4:20]) {
		t.Error("a state reached the log")
	}
}

func securedExpiredStateTellsClientToStartOver(t *testing.T) {
	f := newFleet(t, 1, "s1")
	s, _ := securedServer(t, f.codec, FixedCaller("alice"), nil, nil)
	cs := connect(t, s, manual)
	ctx := context.Background()
	first, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "steps", Arguments: stepIn{Target: "prod"}})
	if err != nil {
		t.Fatal(err)
	}
	f.clock.advance(time.Hour)
	_, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "steps", Arguments: stepIn{Target: "prod"}, RequestState: first.RequestState, InputResponses: answers("q1")})
	wantRPCError(t, err, jsonrpc.CodeInvalidParams, StateExpired)
}

// Without AnswerRetries an authentic state presented again is refused as
// already used (1026), which a client tells from a forged one (1023).
func securedSingleUseStateIsRefusedTheSecondTime(t *testing.T) {
	codec, err := ctoken.NewRequestStateCodec(ctoken.RequestStateSecurity{
		Keys: keyring(t, 1), Mode: ctoken.Encrypted, Binding: ctoken.BindSubjectAndTool, Replay: replay.NewMemoryStore(0),
	})
	if err != nil {
		t.Fatal(err)
	}
	s, _ := securedServer(t, codec, TokenUserID, nil, nil)
	cs, _ := connectHTTP(t, httpEndpoint(t, s), "alice-token", manual, nil)
	ctx := context.Background()
	first, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "steps", Arguments: stepIn{Target: "prod"}})
	if err != nil {
		t.Fatal(err)
	}
	retry := &mcp.CallToolParams{Name: "steps", Arguments: stepIn{Target: "prod"}, RequestState: first.RequestState, InputResponses: answers("q1")}
	second, err := cs.CallTool(ctx, retry)
	if err != nil || !second.NeedsInput() {
		t.Fatalf("first use: %v, %+v", err, second)
	}
	_, err = cs.CallTool(ctx, retry)
	wantRPCError(t, err, jsonrpc.CodeInvalidParams, StateUsed)
}

func securedStoreFailureIsInternalError(t *testing.T) {
	codec, err := ctoken.NewRequestStateCodec(ctoken.RequestStateSecurity{
		Keys: keyring(t, 1), Mode: ctoken.Encrypted, Binding: ctoken.BindSubjectAndTool, Replay: failingStore{},
	})
	if err != nil {
		t.Fatal(err)
	}
	log := &syncBuffer{}
	s, _ := securedServer(t, codec, FixedCaller("alice"), nil, log)
	cs := connect(t, s, manual)
	ctx := context.Background()
	first, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "steps", Arguments: stepIn{Target: "prod"}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "steps", Arguments: stepIn{Target: "prod"}, RequestState: first.RequestState, InputResponses: answers("q1")})
	wantRPCError(t, err, jsonrpc.CodeInternalError, 0)
	if strings.Contains(err.Error(), "unreachable") || !strings.Contains(log.String(), "store unreachable") {
		t.Errorf("client sees %q; log %q", err, log.String())
	}
}

func securedRequestWithoutCallerIsRefused(t *testing.T) {
	f := newFleet(t, 1, "s1")
	s, seen := securedServer(t, f.codec, TokenUserID, nil, nil)
	cs := connect(t, s, manual) // in memory: no bearer token, no caller
	ctx := context.Background()
	// Sealing a state for nobody: refused after the handler asked.
	_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "steps", Arguments: stepIn{Target: "prod"}})
	wantRPCError(t, err, jsonrpc.CodeInternalError, 0)
	// Opening one: refused before the handler runs.
	n := len(seen.all())
	_, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "steps", Arguments: stepIn{Target: "prod"}, RequestState: "v1e.AAAA"})
	wantRPCError(t, err, jsonrpc.CodeInternalError, 0)
	if len(seen.all()) != n {
		t.Error("the handler ran for an anonymous state")
	}
}

// securedRefusesToSealTwice: a handler that seals with the per-handler
// API on a secured server is a configuration error, reported to the
// operator and sent as -32603, not sealed twice.
func securedRefusesToSealTwice(t *testing.T) {
	f := newFleet(t, 1, "s1")
	states, err := NewStates(f.codec, &StateOptions{Caller: FixedCaller("alice")})
	if err != nil {
		t.Fatal(err)
	}
	s := mcp.NewServer(&mcp.Implementation{Name: "double", Version: "v0"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "sealer"}, func(ctx context.Context, req *mcp.CallToolRequest, in stepIn) (*mcp.CallToolResult, stepOut, error) {
		st, err := states.Seal(ctx, req, "plain")
		if err != nil {
			return nil, stepOut{}, err
		}
		return &mcp.CallToolResult{InputRequests: question("q"), RequestState: st}, stepOut{}, nil
	})
	log := &syncBuffer{}
	if err := SecureRequestState(s, f.codec, &StateOptions{Caller: FixedCaller("alice"), Logger: slog.New(slog.NewTextHandler(log, nil))}); err != nil {
		t.Fatal(err)
	}
	cs := connect(t, s, manual)
	_, err = cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "sealer", Arguments: stepIn{}})
	wantRPCError(t, err, jsonrpc.CodeInternalError, 0)
	if !strings.Contains(log.String(), "already sealed") {
		t.Errorf("log %q", log.String())
	}
}

// TestSecureRequestStateConfiguration pins the configurations SecureRequestState refuses.
func TestSecureRequestStateConfiguration(t *testing.T) {
	for _, tc := range []struct {
		name string
		test func(*testing.T)
	}{
		{"misconfiguration is refused", secureRequestStateRefusesMisconfiguration},
		{"an unbound single-use codec is refused", secureRequestStateRefusesAnUnboundSingleUseCodec},
	} {
		t.Run(tc.name, tc.test)
	}
}

func secureRequestStateRefusesMisconfiguration(t *testing.T) {
	newCodec := func(b ctoken.RequestStateBinding) *ctoken.RequestStateCodec {
		c, err := ctoken.NewRequestStateCodec(ctoken.RequestStateSecurity{Keys: keyring(t, 1), Binding: b})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	s := mcp.NewServer(&mcp.Implementation{Name: "x", Version: "v0"}, nil)
	for _, tc := range []struct {
		name   string
		server *mcp.Server
		codec  *ctoken.RequestStateCodec
	}{
		{"nil server", nil, newCodec(ctoken.BindSubjectAndTool)},
		{"nil codec", s, nil},
		{"codec bound to the subject only", s, newCodec(ctoken.BindSubject)},
		{"codec bound to nothing", s, newCodec(ctoken.BindNone)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := SecureRequestState(tc.server, tc.codec, nil); err == nil {
				t.Error("accepted")
			}
		})
	}
	if err := SecureRequestState(s, newCodec(ctoken.BindSubjectAndTool), nil); err != nil {
		t.Errorf("BindSubjectAndTool refused: %v", err)
	}
}

// secureRequestStateRefusesAnUnboundSingleUseCodec: the binding probe
// passes only when the probe state is refused as invalid for another tool.
// It took any error as a pass, so a single-use codec bound to the subject
// only got through when its replay store failed, or when it was probed a
// second time within a second (a signed probe is the same state again).
func secureRequestStateRefusesAnUnboundSingleUseCodec(t *testing.T) {
	newCodec := func(b ctoken.RequestStateBinding, store replay.Store) *ctoken.RequestStateCodec {
		c, err := ctoken.NewRequestStateCodec(ctoken.RequestStateSecurity{Keys: keyring(t, 1), Binding: b, Replay: store})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	s := mcp.NewServer(&mcp.Implementation{Name: "x", Version: "v0"}, nil)
	if err := SecureRequestState(s, newCodec(ctoken.BindSubject, failingStore{}), nil); !errors.Is(err, mcptoken.ErrTargetUnbound) {
		t.Errorf("BindSubject, store down: %v, want ErrTargetUnbound", err)
	}
	once := newCodec(ctoken.BindSubject, replay.NewMemoryStore(0))
	for i := range 2 {
		if err := SecureRequestState(s, once, nil); !errors.Is(err, mcptoken.ErrTargetUnbound) {
			t.Errorf("BindSubject, single-use, call %d: %v, want ErrTargetUnbound", i, err)
		}
	}
	if err := SecureRequestState(s, newCodec(ctoken.BindSubjectAndTool, failingStore{}), nil); err != nil {
		t.Errorf("BindSubjectAndTool, store down: %v", err)
	}
}

// securedCallsWithoutStatePassThrough: a secured server's tools that
// never ask for input, and methods that carry no state, are untouched.
func securedCallsWithoutStatePassThrough(t *testing.T) {
	f := newFleet(t, 1, "s1")
	s, _ := securedServer(t, f.codec, TokenUserID, nil, nil) // no caller in memory
	mcp.AddTool(s, &mcp.Tool{Name: "plain"}, func(context.Context, *mcp.CallToolRequest, stepIn) (*mcp.CallToolResult, stepOut, error) {
		return nil, stepOut{Target: "ok"}, nil
	})
	cs := connect(t, s, manual)
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "plain", Arguments: stepIn{}})
	if err != nil {
		t.Fatal(err)
	}
	if out := stepResult(t, res); out.Target != "ok" {
		t.Errorf("result %+v", out)
	}
	if _, err := cs.ListTools(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
}

// Older clients (before protocol 2026-07-28).

// TestSecuredOlderClients pins what a 2025-11-25 client, which cannot carry a state, gets from a secured server.
func TestSecuredOlderClients(t *testing.T) {
	for _, tc := range []struct {
		name string
		test func(*testing.T)
	}{
		{"over stateless HTTP it gets a clear error", securedOlderClientGetsClearErrorOverStatelessHTTP},
		{"without elicitation it gets a clear error", securedOlderClientWithoutElicitationGetsClearError},
		{"with elicitation it is asked in process", securedOlderClientWithElicitationIsAskedInProcess},
		{"when its answer fails it gets an internal error", securedOlderClientWhoseAnswerFailsGetsInternalError},
	} {
		t.Run(tc.name, tc.test)
	}
}

// securedOlderClientGetsClearErrorOverStatelessHTTP: a 2025-11-25
// client over stateless HTTP cannot be asked for input; it gets -32021
// saying so, not code 0.
func securedOlderClientGetsClearErrorOverStatelessHTTP(t *testing.T) {
	f := newFleet(t, 1, "s1")
	log := &syncBuffer{}
	s, _ := securedServer(t, f.codec, TokenUserID, nil, log)
	cs, _ := connectHTTP(t, httpEndpoint(t, s), "alice-token", answering(), &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if v := cs.InitializeResult().ProtocolVersion; v != "2025-11-25" {
		t.Fatalf("negotiated %q", v)
	}
	ctx := context.Background()
	_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "steps", Arguments: stepIn{Target: "prod"}})
	wantClientLacksInput(t, err, "2025-11-25")
	// The server saw no declaration, so it does not say the client made none.
	if !strings.Contains(err.Error(), "over stateless HTTP the server cannot see a declaration") || strings.Contains(err.Error(), "declared no") {
		t.Errorf("message does not say what the server saw: %v", err)
	}
	_, err = cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: "interview", Arguments: map[string]string{"topic": "go"}})
	wantClientLacksInput(t, err, "2025-11-25")
	if !strings.Contains(log.String(), "client cannot provide input") {
		t.Errorf("log %q", log.String())
	}
}

// securedOlderClientWithoutElicitationGetsClearError: in memory, a
// 2025-11-25 client that declared no elicitation capability.
func securedOlderClientWithoutElicitationGetsClearError(t *testing.T) {
	f := newFleet(t, 1, "s1")
	s, _ := securedServer(t, f.codec, FixedCaller("alice"), nil, nil)
	st, ct := mcp.NewInMemoryTransports()
	ss, err := s.Connect(context.Background(), st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ss.Close() })
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "old", Version: "v0"}, nil).Connect(context.Background(), ct, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	_, err = cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "steps", Arguments: stepIn{Target: "prod"}})
	wantClientLacksInput(t, err, "2025-11-25")
	if !strings.Contains(err.Error(), "no elicitation capability") {
		t.Errorf("message does not name the capability: %v", err)
	}
}

func wantClientLacksInput(t testing.TB, err error, version string) {
	t.Helper()
	var we *jsonrpc.Error
	if !errors.As(err, &we) {
		t.Fatalf("error %v (%T) is not a JSON-RPC error", err, err)
	}
	if we.Code != mcp.CodeMissingRequiredClientCapabilities {
		t.Errorf("code %d (%q), want %d", we.Code, we.Message, mcp.CodeMissingRequiredClientCapabilities)
	}
	if !strings.HasPrefix(we.Message, mcptoken.ErrClientCannotAnswer.Error()) || !strings.Contains(we.Message, "MCP "+version) || !strings.Contains(we.Message, "2026-07-28") {
		t.Errorf("message %q", we.Message)
	}
	var data mcp.MissingRequiredClientCapabilityData
	if json.Unmarshal(we.Data, &data) != nil || data.RequiredCapabilities == nil || data.RequiredCapabilities.Elicitation == nil {
		t.Errorf("data %s", we.Data)
	}
	// Only what is required: go-sdk's own type would also write "roots".
	if string(we.Data) != `{"requiredCapabilities":{"elicitation":{}}}` {
		t.Errorf("data %s lists more than the required capability", we.Data)
	}
}

// securedOlderClientWithElicitationIsAskedInProcess: a 2025-11-25
// client that can elicit over its connection is asked by the SDK; the
// plaintext state stays in the server.
func securedOlderClientWithElicitationIsAskedInProcess(t *testing.T) {
	f := newFleet(t, 1, "s1")
	s, seen := securedServer(t, f.codec, FixedCaller("alice"), nil, nil)
	st, ct := mcp.NewInMemoryTransports()
	ss, err := s.Connect(context.Background(), st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ss.Close() })
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "old", Version: "v0"}, answering()).Connect(context.Background(), ct, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	ctx := context.Background()
	// The SDK asks the first question in process and calls the handler
	// again with the plaintext state; the second input-required result
	// reaches the client with its state sealed, and the client's own
	// multi round-trip handling answers it and echoes the sealed state.
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "steps", Arguments: stepIn{Target: "prod"}})
	if err != nil {
		t.Fatal(err)
	}
	if out := stepResult(t, res); strings.Join(out.Answers, ",") != "A-q1,A-q2" {
		t.Errorf("result %+v", out)
	}
	if got := seen.all(); strings.Join(got, ";") != ";step1|prod;step2|prod|A-q1" {
		t.Errorf("handlers saw %q", got)
	}
}

// Interop with the reference D dispatch.

type dispatchVectors struct {
	Now     int64    `json:"now"`
	Exp     int64    `json:"exp"`
	Keys    []string `json:"keys"`
	Vectors []struct {
		Key     int    `json:"key"`
		Mode    string `json:"mode"`
		Subject string `json:"subject"`
		Tool    string `json:"tool"`
		State   string `json:"state"`
		Wire    string `json:"wire"`
	} `json:"vectors"`
}

// interopDispatchOpensAndSealsReferenceStates sends each D-made state to
// a server secured in interop mode (UnboundArgs, BindSubjectAndTool) as the
// vector's subject, to the vector's method and name: the handler must see
// the vector's state, and a signed state sealed again must be the D wire
// byte for byte.
func interopDispatchOpensAndSealsReferenceStates(t *testing.T) {
	raw, err := os.ReadFile("testdata/mcpd-dispatch-vectors.json")
	if err != nil {
		t.Fatal(err)
	}
	var d dispatchVectors
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatal(err)
	}
	if len(d.Vectors) == 0 {
		t.Fatal("no vectors")
	}
	now := func() time.Time { return time.Unix(d.Now, 0) }
	resealed := 0
	for i, v := range d.Vectors {
		key, err := hex.DecodeString(d.Keys[v.Key])
		if err != nil {
			t.Fatal(err)
		}
		kr, err := ctoken.NewKeyring(key)
		if err != nil {
			t.Fatal(err)
		}
		mode := ctoken.Signed
		if v.Mode == "encrypted" {
			mode = ctoken.Encrypted
		}
		codec, err := ctoken.NewRequestStateCodec(ctoken.RequestStateSecurity{
			Keys: kr, Mode: mode, Binding: ctoken.BindSubjectAndTool, TTL: time.Duration(d.Exp-d.Now) * time.Second, Now: now,
		})
		if err != nil {
			t.Fatal(err)
		}
		method, name, _ := strings.Cut(v.Tool, "\x00")
		var got, sealed string
		s := mcp.NewServer(&mcp.Implementation{Name: "interop", Version: "v0"}, nil)
		switch method {
		case "tools/call":
			mcp.AddTool(s, &mcp.Tool{Name: name}, func(_ context.Context, req *mcp.CallToolRequest, _ map[string]any) (*mcp.CallToolResult, any, error) {
				got = req.Params.RequestState
				// Ask again with the same plaintext, for the middleware to seal.
				return &mcp.CallToolResult{InputRequests: question("again"), RequestState: v.State}, nil, nil
			})
		case "prompts/get":
			s.AddPrompt(&mcp.Prompt{Name: name}, func(_ context.Context, req *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
				got = req.Params.RequestState
				return &mcp.GetPromptResult{InputRequests: question("again"), RequestState: v.State}, nil
			})
		default:
			t.Fatalf("vector %d: method %q", i, method)
		}
		if err := SecureRequestState(s, codec, &StateOptions{Caller: FixedCaller(v.Subject), UnboundArgs: true}); err != nil {
			t.Fatal(err)
		}
		cs := connect(t, s, manual)
		if method == "tools/call" {
			res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: name, Arguments: map[string]any{}, RequestState: v.Wire, InputResponses: answers("q")})
			if err != nil {
				t.Fatalf("vector %d: %v", i, err)
			}
			sealed = res.RequestState
		} else {
			res, err := cs.GetPrompt(context.Background(), &mcp.GetPromptParams{Name: name, RequestState: v.Wire, InputResponses: answers("q")})
			if err != nil {
				t.Fatalf("vector %d: %v", i, err)
			}
			sealed = res.RequestState
		}
		cs.Close()
		if got != v.State {
			t.Errorf("vector %d: handler saw %q, want %q", i, got, v.State)
		}
		if v.State == "" {
			continue // nothing to seal: an empty state is no state
		}
		if mode == ctoken.Signed {
			// The payload is the reference's, field for field: the same
			// state, expiry and bind tag (so the same key derivation and
			// bind material subject "\x00" method "\x00" name). The bytes
			// differ only in member order and escaping, which both sides
			// accept.
			ours, theirs := signedPayload(t, sealed), signedPayload(t, v.Wire)
			if ours != theirs {
				t.Errorf("vector %d: sealed payload %+v, D sealed %+v", i, ours, theirs)
			}
			resealed++
		} else if back, err := codec.Decode(sealed, v.Subject, v.Tool); err != nil || back != v.State {
			t.Errorf("vector %d: sealed state opens as %q, %v", i, back, err)
		}
	}
	if resealed == 0 {
		t.Error("no signed vector was sealed again")
	}
}

type statePayload struct {
	S   string `json:"s"`
	Exp int64  `json:"exp"`
	B   string `json:"b"`
}

// signedPayload decodes the payload of a signed (v1.) state without
// checking it.
func signedPayload(t testing.TB, wire string) statePayload {
	t.Helper()
	parts := strings.Split(wire, ".")
	if len(parts) != 3 || parts[0] != "v1" {
		t.Fatalf("not a signed state: %.20q", wire)
	}
	raw, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		t.Fatal(err)
	}
	var p statePayload
	if err := json.Unmarshal(raw, &p); err != nil {
		t.Fatal(err)
	}
	return p
}

// BenchmarkSecuredRoundTrip measures one two-round tool call (input
// required, then the retry with the state) by an SDK client over in-memory
// transports, on a plain server (the SDK's own cost, the state sent as
// plaintext) and on one secured by SecureRequestState (encrypted, bound to
// caller, tool and arguments).
func BenchmarkSecuredRoundTrip(b *testing.B) {
	f := newFleet(b, 1, "s1")
	handler := func(_ context.Context, req *mcp.CallToolRequest, in stepIn) (*mcp.CallToolResult, stepOut, error) {
		if req.Params.RequestState == "" {
			return &mcp.CallToolResult{InputRequests: question("q1"), RequestState: "step1|" + in.Target}, stepOut{}, nil
		}
		return nil, stepOut{Target: in.Target}, nil
	}
	for _, secured := range []bool{false, true} {
		name := "sdk"
		if secured {
			name = "secured"
		}
		b.Run(name, func(b *testing.B) {
			s := mcp.NewServer(&mcp.Implementation{Name: "bench", Version: "v0"}, nil)
			mcp.AddTool(s, &mcp.Tool{Name: "steps"}, handler)
			if secured {
				if err := SecureRequestState(s, f.codec, &StateOptions{Caller: FixedCaller("alice")}); err != nil {
					b.Fatal(err)
				}
			}
			cs := connect(b, s, manual)
			ctx := context.Background()
			first := &mcp.CallToolParams{Name: "steps", Arguments: stepIn{Target: "prod"}}
			b.ReportAllocs()
			for b.Loop() {
				r1, err := cs.CallTool(ctx, first)
				if err != nil || r1.RequestState == "" {
					b.Fatal(err)
				}
				r2, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "steps", Arguments: first.Arguments, RequestState: r1.RequestState, InputResponses: answers("q1")})
				if err != nil || r2.NeedsInput() {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkSecureMiddleware measures the middleware alone around a stub
// handler: round one seals the handler's state, round two opens it.
func BenchmarkSecureMiddleware(b *testing.B) {
	f := newFleet(b, 1, "s1")
	states, err := NewStates(f.codec, &StateOptions{Caller: FixedCaller("alice")})
	if err != nil {
		b.Fatal(err)
	}
	next := func(_ context.Context, _ string, req mcp.Request) (mcp.Result, error) {
		if req.(*mcp.CallToolRequest).Params.RequestState == "" {
			return &mcp.CallToolResult{InputRequests: question("q1"), RequestState: "step1|prod"}, nil
		}
		return &mcp.CallToolResult{}, nil
	}
	h := states.middleware(next)
	ctx := context.Background()
	args := json.RawMessage(`{"target":"prod"}`)
	b.ReportAllocs()
	for b.Loop() {
		res, err := h(ctx, "tools/call", &mcp.CallToolRequest{Params: &mcp.CallToolParamsRaw{Name: "steps", Arguments: args}})
		if err != nil {
			b.Fatal(err)
		}
		st := res.(*mcp.CallToolResult).RequestState
		if _, err := h(ctx, "tools/call", &mcp.CallToolRequest{Params: &mcp.CallToolParamsRaw{Name: "steps", Arguments: args, RequestState: st}}); err != nil {
			b.Fatal(err)
		}
	}
}

// FuzzSecureMiddlewareOpen sends arbitrary requestState and arguments
// through the middleware: a state it did not seal for these arguments must
// never reach the handler, and nothing may panic.
func FuzzSecureMiddlewareOpen(f *testing.F) {
	fl := newFleet(f, 1, "s1")
	states, err := NewStates(fl.codec, &StateOptions{Caller: FixedCaller("alice")})
	if err != nil {
		f.Fatal(err)
	}
	reached := false
	next := func(_ context.Context, _ string, req mcp.Request) (mcp.Result, error) {
		if req.(*mcp.CallToolRequest).Params.RequestState != "" {
			reached = true
		}
		return &mcp.CallToolResult{}, nil
	}
	h := states.middleware(next)
	seed, err := states.core.Seal("alice", "tools/call", "steps", []byte(`{"target":"x"}`), "state")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(seed, `{"target":"y"}`)
	f.Add(seed, `{"target":"x"} `)
	f.Add("v1e.AAAA", `{}`)
	f.Add("v1.e30.AAAA", `null`)
	f.Fuzz(func(t *testing.T, wire, args string) {
		reached = false
		_, err := h(context.Background(), "tools/call", &mcp.CallToolRequest{Params: &mcp.CallToolParamsRaw{Name: "steps", Arguments: json.RawMessage(args), RequestState: wire}})
		// Only an authentic state for this caller and tool, carrying the
		// fingerprint of these arguments, may reach the handler. (The seed
		// differs in each fuzz worker: the state is encrypted afresh.)
		authentic := false
		if plain, derr := fl.codec.Decode(wire, "alice", ctoken.MCPTarget("tools/call", "steps")); derr == nil {
			_, uerr := mcptoken.UnwrapArgs([]byte(args), plain)
			authentic = uerr == nil
		}
		if wire != "" && !authentic && (err == nil || reached) {
			t.Fatalf("a state that should not open reached the handler: err %v", err)
		}
		if authentic && (err != nil || !reached) {
			t.Fatalf("an authentic state was refused: %v", err)
		}
	})
}

// securedOlderClientWhoseAnswerFailsGetsInternalError: a 2025-11-25
// client that declared elicitation but failed to answer lacks nothing; it
// gets -32603, not code 0 and not -32021.
func securedOlderClientWhoseAnswerFailsGetsInternalError(t *testing.T) {
	f := newFleet(t, 1, "s1")
	s, _ := securedServer(t, f.codec, FixedCaller("alice"), nil, nil)
	st, ct := mcp.NewInMemoryTransports()
	ss, err := s.Connect(context.Background(), st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ss.Close() })
	failing := &mcp.ClientOptions{ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
		return nil, errors.New("user interface crashed")
	}}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "old", Version: "v0"}, failing).Connect(context.Background(), ct, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	_, err = cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "steps", Arguments: stepIn{Target: "prod"}})
	wantRPCError(t, err, jsonrpc.CodeInternalError, 0)
}

// A two-round tool with an effect in its second round, for the retry of a
// continuation (StateOptions.AnswerRetries).

type deployIn struct {
	Target string `json:"target"`
}

// deployOut's members are not in alphabetical order: the untyped tool
// "deploy_raw" returns it as is, so its result decoded into a map and
// encoded again would not be the same bytes.
type deployOut struct {
	Zone   string `json:"zone"`
	App    string `json:"app"`
	Deploy int32  `json:"deploy"`
}

// errDeployRefused is what deploy_refused's second round returns: go-sdk
// makes it a tool error result carrying the error (GetError).
var errDeployRefused = errors.New("deploy refused by policy")

// holdRound holds the second round of deployServer's tool: it closes
// entered, then waits for release.
type holdRound struct{ entered, release chan struct{} }

// deployServer returns a server with the tool "deploy": its first round
// asks for confirmation, its second deploys (counted in effects; held by
// hold first when hold is not nil). Secured with codec for who.
func deployServer(t testing.TB, codec *ctoken.RequestStateCodec, who CallerFunc, effects *atomic.Int32, hold *holdRound, log io.Writer) *mcp.Server {
	t.Helper()
	tool := func(ctx context.Context, req *mcp.CallToolRequest, in deployIn) (*mcp.CallToolResult, deployOut, error) {
		switch req.Params.RequestState {
		case "":
			return &mcp.CallToolResult{InputRequests: question("confirm"), RequestState: "confirm|" + in.Target}, deployOut{}, nil
		case "confirm|" + in.Target:
			if hold != nil {
				close(hold.entered)
				<-hold.release
			}
			return nil, deployOut{Zone: "eu-" + answerOf(req.Params.InputResponses, "confirm"), App: in.Target, Deploy: effects.Add(1)}, nil
		}
		return nil, deployOut{}, errors.New("unexpected state")
	}
	raw := func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		var in deployIn
		if err := json.Unmarshal(req.Params.Arguments, &in); err != nil {
			return nil, err
		}
		res, out, err := tool(ctx, req, in)
		if res == nil && err == nil {
			res = &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "deployed"}}, StructuredContent: out}
		}
		return res, err
	}
	refuse := func(ctx context.Context, req *mcp.CallToolRequest, in deployIn) (*mcp.CallToolResult, deployOut, error) {
		if req.Params.RequestState == "" {
			return tool(ctx, req, in)
		}
		return nil, deployOut{}, errDeployRefused
	}
	s := mcp.NewServer(&mcp.Implementation{Name: "deploy", Version: "v0"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "deploy"}, tool)
	mcp.AddTool(s, &mcp.Tool{Name: "deploy_refused"}, refuse)
	s.AddTool(&mcp.Tool{Name: "deploy_raw", InputSchema: map[string]any{"type": "object"}}, raw)
	o := StateOptions{Caller: who, AnswerRetries: true}
	if log != nil {
		o.Logger = slog.New(slog.NewTextHandler(log, nil))
	}
	if err := SecureRequestState(s, codec, &o); err != nil {
		t.Fatal(err)
	}
	return s
}

// lossyTransport is a server transport that keeps the JSON of every result
// it sends and, while armed, loses the next one instead (closing lost):
// the response of a round that ran.
type lossyTransport struct {
	mcp.Transport
	armed atomic.Bool
	lost  chan []byte

	mu   sync.Mutex
	sent [][]byte
}

type lossyConn struct {
	mcp.Connection
	t *lossyTransport
}

func (l *lossyTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	c, err := l.Transport.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &lossyConn{c, l}, nil
}

func (c *lossyConn) Write(ctx context.Context, msg jsonrpc.Message) error {
	if r, ok := msg.(*jsonrpc.Response); ok && r.Result != nil {
		if c.t.armed.CompareAndSwap(true, false) {
			c.t.lost <- append([]byte(nil), r.Result...)
			return nil
		}
		c.t.mu.Lock()
		c.t.sent = append(c.t.sent, append([]byte(nil), r.Result...))
		c.t.mu.Unlock()
	}
	return c.Connection.Write(ctx, msg)
}

// last returns the JSON of the last result sent.
func (l *lossyTransport) last() []byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.sent[len(l.sent)-1]
}

// connectLossy joins go-sdk's client to s over in-memory transports whose
// server side is lossy.
func connectLossy(t testing.TB, s *mcp.Server) (*mcp.ClientSession, *lossyTransport) {
	t.Helper()
	st, ct := mcp.NewInMemoryTransports()
	lt := &lossyTransport{Transport: st, lost: make(chan []byte, 1)}
	ctx := context.Background()
	ss, err := s.Connect(ctx, lt, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ss.Close() })
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test-client", Version: "v0"}, manual).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs, lt
}

// retryCodec is a single-use codec over store with the fleet's clock.
func retryCodec(t testing.TB, f *fleet, store replay.Store) *ctoken.RequestStateCodec {
	t.Helper()
	codec, err := ctoken.NewRequestStateCodec(ctoken.RequestStateSecurity{
		Keys: keyring(t, 7), Mode: ctoken.Encrypted, Binding: ctoken.BindSubjectAndTool, Now: f.clock.now, Replay: store,
	})
	if err != nil {
		t.Fatal(err)
	}
	return codec
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
		{"the tool error is kept for outer middleware", securedRetryKeepsTheToolErrorForOuterMiddleware},
		{"a record that does not open is used", securedRetryOfARecordThatDoesNotOpenIsUsed},
		{"a recorder is needed", answerRetriesNeedsARecorder},
	} {
		t.Run(tc.name, tc.test)
	}
}

// The case, driven by go-sdk's client: the second round deploys,
// its response is lost, and the client's retry of the same call with the
// same state gets the first result, the same bytes on the wire, with one
// deploy.
func securedRetryOfALostRoundGetsItsResultWithOneEffect(t *testing.T) {
	for _, tc := range []struct{ tool, structured string }{
		{"deploy", `"structuredContent":{"app":"shop","deploy":1,"zone":"eu-A-confirm"}`},
		{"deploy_raw", `"structuredContent":{"zone":"eu-A-confirm","app":"shop","deploy":1}`},
	} {
		t.Run(tc.tool, func(t *testing.T) { testRetryOfALostRound(t, tc.tool, tc.structured) })
	}
}

func testRetryOfALostRound(t *testing.T, tool, structured string) {
	f := newFleet(t, 1, "s1")
	var effects atomic.Int32
	log := &syncBuffer{}
	cs, lt := connectLossy(t, deployServer(t, retryCodec(t, f, replay.NewMemoryStore(0)), FixedCaller("alice"), &effects, nil, log))
	ctx := context.Background()
	first, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: deployIn{Target: "shop"}})
	if err != nil || !first.NeedsInput() {
		t.Fatalf("round one: %v, %+v", err, first)
	}
	round2 := &mcp.CallToolParams{Name: tool, Arguments: deployIn{Target: "shop"}, RequestState: first.RequestState, InputResponses: answers("confirm")}
	lt.armed.Store(true)
	lostCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { _, err := cs.CallTool(lostCtx, round2); done <- err }()
	lost := <-lt.lost
	cancel()
	if err := <-done; err == nil {
		t.Fatal("the call whose response was lost returned")
	}
	retry, err := cs.CallTool(ctx, round2)
	if err != nil || retry.IsError {
		t.Fatalf("retry: %v, %+v", err, retry)
	}
	if got := lt.last(); string(got) != string(lost) {
		t.Fatalf("retry's result on the wire:\n%s\nthe lost one:\n%s", got, lost)
	}
	if n := effects.Load(); n != 1 {
		t.Fatalf("%d deploys", n)
	}
	if !strings.Contains(string(lost), structured) {
		t.Fatalf("lost result %s", lost)
	}
	if again, err := cs.CallTool(ctx, round2); err != nil || string(lt.last()) != string(lost) || effects.Load() != 1 {
		t.Fatalf("second retry: %v, %+v", err, again)
	}
	if strings.Contains(log.String(), first.RequestState) {
		t.Fatal("the log holds the state")
	}
}

// Anyone else with the state, or the same caller with anything changed, is
// refused as without AnswerRetries (1023 invalid, 1022 expired), before and
// after the round ran, and runs nothing; an authentic state whose round
// failed is "already used" (1026), which the client tells from "invalid".
func securedRetryRefusesAnyoneElseAndAnyChange(t *testing.T) {
	f := newFleet(t, 1, "s1")
	codec := retryCodec(t, f, replay.NewMemoryStore(0))
	var effects atomic.Int32
	alice := connect(t, deployServer(t, codec, FixedCaller("alice"), &effects, nil, nil), manual)
	bob := connect(t, deployServer(t, codec, FixedCaller("bob"), &effects, nil, nil), manual)
	ctx := context.Background()
	first, err := alice.CallTool(ctx, &mcp.CallToolParams{Name: "deploy", Arguments: deployIn{Target: "shop"}})
	if err != nil {
		t.Fatal(err)
	}
	st := first.RequestState
	tampered := st[:len(st)-2] + flip(st[len(st)-2]) + st[len(st)-1:]
	for _, ran := range []bool{false, true} {
		if ran {
			if _, err := alice.CallTool(ctx, &mcp.CallToolParams{Name: "deploy", Arguments: deployIn{Target: "shop"}, RequestState: st, InputResponses: answers("confirm")}); err != nil {
				t.Fatal(err)
			}
		}
		for _, tc := range []struct {
			name  string
			cs    *mcp.ClientSession
			args  deployIn
			state string
			later time.Duration
			code  int
		}{
			{"another caller", bob, deployIn{Target: "shop"}, st, 0, StateInvalid},
			{"changed argument", alice, deployIn{Target: "bank"}, st, 0, StateInvalid},
			{"tampered state", alice, deployIn{Target: "shop"}, tampered, 0, StateInvalid},
			{"expired state", alice, deployIn{Target: "shop"}, st, time.Hour, StateExpired},
		} {
			t.Run(fmt.Sprintf("%s, round ran %v", tc.name, ran), func(t *testing.T) {
				f.clock.advance(tc.later)
				defer f.clock.advance(-tc.later)
				_, err := tc.cs.CallTool(ctx, &mcp.CallToolParams{Name: "deploy", Arguments: tc.args, RequestState: tc.state, InputResponses: answers("confirm")})
				wantRPCError(t, err, jsonrpc.CodeInvalidParams, tc.code)
			})
		}
	}
	if n := effects.Load(); n != 1 {
		t.Fatalf("%d deploys", n)
	}
}

// A retry that overtakes the first attempt while its round runs is told
// busy (1027) with a hint of when to retry (retryAfterMs, at most a
// second, in data as go-sdk's client hands it over). It runs nothing; the
// retry after the round gets its result.
func securedConcurrentRetryIsBusy(t *testing.T) {
	f := newFleet(t, 1, "s1")
	var effects atomic.Int32
	hold := &holdRound{entered: make(chan struct{}), release: make(chan struct{})}
	cs := connect(t, deployServer(t, retryCodec(t, f, replay.NewMemoryStore(0)), FixedCaller("alice"), &effects, hold, nil), manual)
	ctx := context.Background()
	first, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "deploy", Arguments: deployIn{Target: "shop"}})
	if err != nil {
		t.Fatal(err)
	}
	round2 := &mcp.CallToolParams{Name: "deploy", Arguments: deployIn{Target: "shop"}, RequestState: first.RequestState, InputResponses: answers("confirm")}
	type answer struct {
		res *mcp.CallToolResult
		err error
	}
	done := make(chan answer, 1)
	go func() { res, err := cs.CallTool(ctx, round2); done <- answer{res, err} }()
	<-hold.entered
	_, err = cs.CallTool(ctx, round2)
	wantRPCError(t, err, jsonrpc.CodeInvalidParams, StateBusy)
	var data struct {
		Code         int   `json:"ctokenCode"`
		RetryAfterMs int64 `json:"retryAfterMs"`
	}
	var we *jsonrpc.Error
	if !errors.As(err, &we) || json.Unmarshal(we.Data, &data) != nil || data.Code != StateBusy || data.RetryAfterMs <= 0 || data.RetryAfterMs > 1000 {
		t.Fatalf("busy: %v, data %s; want retryAfterMs in (0, 1000]", err, we.Data)
	}
	if d, ok := busyRetryAfter(err); !ok || d != time.Duration(data.RetryAfterMs)*time.Millisecond {
		t.Fatalf("busyRetryAfter = %v, %v; want %d ms", d, ok, data.RetryAfterMs)
	}
	close(hold.release)
	a := <-done
	if a.err != nil {
		t.Fatal(a.err)
	}
	again, err := cs.CallTool(ctx, round2)
	if err != nil || effects.Load() != 1 {
		t.Fatalf("retry after the round: %v, %d deploys", err, effects.Load())
	}
	want, _ := json.Marshal(a.res)
	got, _ := json.Marshal(again)
	if string(got) != string(want) {
		t.Fatalf("retry %s, first %s", got, want)
	}
}

// AnswerRetries needs a single-use codec whose store records results:
// anything else is refused when the server is secured.
func answerRetriesNeedsARecorder(t *testing.T) {
	f := newFleet(t, 1, "s1")
	for _, tc := range []struct {
		name  string
		codec *ctoken.RequestStateCodec
	}{
		{"not single-use", f.codec},
		{"store without records", retryCodec(t, f, failingStore{})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := mcp.NewServer(&mcp.Implementation{Name: "x", Version: "v0"}, nil)
			err := SecureRequestState(s, tc.codec, &StateOptions{AnswerRetries: true})
			if !errors.Is(err, mcptoken.ErrNoRecorder) || !errors.Is(err, ctoken.ErrConfig) {
				t.Fatalf("%v; want ErrNoRecorder", err)
			}
		})
	}
}

// flip returns a base64url letter other than c.
func flip(c byte) string {
	if c == 'A' {
		return "B"
	}
	return "A"
}

// FuzzToolResultOf: the decoder of a recorded round's result never panics,
// and what it decodes encodes to a fixed point: decoded and encoded again,
// it is the same bytes, so every retry is answered alike.
func FuzzToolResultOf(f *testing.F) {
	f.Add([]byte(`{"content":[{"type":"text","text":"deployed"}],"structuredContent":{"zone":"eu","app":"shop","deploy":1},"resultType":"complete"}`))
	f.Add([]byte(`{"content":[],"inputRequests":{"q":{"method":"elicitation/create","params":{"message":"?","requestedSchema":{"type":"object"}}}},"requestState":"v1e.x","resultType":"input_required"}`))
	f.Add([]byte(`{"_meta":{"a":1},"content":[{"type":"image","data":"AA==","mimeType":"image/png"}],"isError":true}`))
	f.Add([]byte(`null`))
	f.Add([]byte(`{"structuredContent":[1,2,{"b":1,"a":2}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		res, err := toolResultOf(b)
		if err != nil {
			return
		}
		once, err := json.Marshal(res)
		if err != nil {
			return // a result the SDK could not send either
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

// A tool error result keeps the error its handler returned (GetError) for
// middleware outside SecureRequestState on the first answer; its retry is
// answered with the same bytes, and the handler does not run again.
func securedRetryKeepsTheToolErrorForOuterMiddleware(t *testing.T) {
	f := newFleet(t, 1, "s1")
	var effects atomic.Int32
	s := deployServer(t, retryCodec(t, f, replay.NewMemoryStore(0)), FixedCaller("alice"), &effects, nil, nil)
	var mu sync.Mutex
	var seen []error
	s.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			res, err := next(ctx, method, req)
			if r, ok := res.(*mcp.CallToolResult); ok && r.IsError {
				mu.Lock()
				seen = append(seen, r.GetError())
				mu.Unlock()
			}
			return res, err
		}
	})
	cs, lt := connectLossy(t, s)
	ctx := context.Background()
	first, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "deploy_refused", Arguments: deployIn{Target: "shop"}})
	if err != nil {
		t.Fatal(err)
	}
	round2 := &mcp.CallToolParams{Name: "deploy_refused", Arguments: deployIn{Target: "shop"}, RequestState: first.RequestState, InputResponses: answers("confirm")}
	for range 2 {
		if res, err := cs.CallTool(ctx, round2); err != nil || !res.IsError {
			t.Fatalf("%v, %+v; want a tool error result", err, res)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 2 || !errors.Is(seen[0], errDeployRefused) || seen[1] != nil {
		t.Fatalf("outer middleware saw %v; want the handler's error, then none (a retry)", seen)
	}
	lt.mu.Lock()
	defer lt.mu.Unlock()
	// initialize, round one, round two, its retry
	if n := len(lt.sent); n != 4 || string(lt.sent[2]) != string(lt.sent[3]) {
		t.Fatalf("%d results; the retry's differs from the first", n)
	}
}

// editingStore is a memory store whose records are edited in the store:
// edit, when set, changes every recorded result on its way out. It keeps
// what was recorded, as the store holds it.
type editingStore struct {
	*replay.MemoryStore
	mu       sync.Mutex
	edit     func(record []byte) []byte
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
			return []byte(`{"content":[{"type":"text","text":"forged"}],"structuredContent":{"zone":"eu-yes","app":"shop","deploy":7}}`)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFleet(t, 1, "s1")
			var effects atomic.Int32
			log := &syncBuffer{}
			store := &editingStore{MemoryStore: replay.NewMemoryStore(0)}
			cs := connect(t, deployServer(t, retryCodec(t, f, store), FixedCaller("alice"), &effects, nil, log), manual)
			ctx := context.Background()
			first, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "deploy", Arguments: deployIn{Target: "shop"}})
			if err != nil {
				t.Fatal(err)
			}
			round2 := &mcp.CallToolParams{Name: "deploy", Arguments: deployIn{Target: "shop"}, RequestState: first.RequestState, InputResponses: answers("confirm")}
			if res, err := cs.CallTool(ctx, round2); err != nil || res.IsError {
				t.Fatalf("round two: %v, %+v", err, res)
			}
			store.mu.Lock()
			recorded := store.recorded
			store.edit = tc.edit
			store.mu.Unlock()
			if len(recorded) != 1 || strings.Contains(string(recorded[0]), `"app":"shop"`) || strings.Contains(string(recorded[0]), "deployed") {
				t.Fatalf("the store holds %q; want one sealed record", recorded)
			}
			_, err = cs.CallTool(ctx, round2)
			wantRPCError(t, err, jsonrpc.CodeInvalidParams, StateUsed)
			if effects.Load() != 1 || !strings.Contains(log.String(), "level=ERROR") || !strings.Contains(log.String(), "does not open") || strings.Contains(log.String(), first.RequestState) {
				t.Fatalf("%d deploys, log %q", effects.Load(), log.String())
			}
		})
	}
}
