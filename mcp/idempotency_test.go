package ctokenmcp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ctoken/ctoken"
	"github.com/ctoken/ctoken/mcptoken"
	"github.com/ctoken/ctoken/replay"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// idemKeys seal the recorded results of the tests' idempotent tools.
var idemKeys = func() *ctoken.Keyring {
	kr, err := ctoken.NewKeyring([]byte("0123456789abcdef0123456789abcdef"))
	if err != nil {
		panic(err)
	}
	return kr
}()

// metaCaller is the test's CallerFunc: the caller named in the call's
// _meta "test/caller" (a stand-in for an authenticated identity).
func metaCaller(_ context.Context, req mcp.Request) (string, error) {
	if r, ok := req.(*mcp.CallToolRequest); ok && r.Params != nil && r.Params.Meta != nil {
		if s, ok := r.Params.Meta["test/caller"].(string); ok && s != "" {
			return s, nil
		}
	}
	return "", ErrNoCaller
}

// payTool is a tool with an effect: each run of it moves money once.
type payTool struct {
	effects atomic.Int32
	gate    chan struct{} // when set, a run waits for it to close
	started chan struct{} // when set, closed when the first run starts
}

var payInput = json.RawMessage(`{"type":"object","properties":{"key":{"type":"string","description":"idempotency key: a fresh UUID per payment, the same on every retry"},"amount":{"type":"integer"}},"required":["key","amount"]}`)

func (p *payTool) handler(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	n := p.effects.Add(1)
	if p.started != nil && n == 1 {
		close(p.started)
	}
	if p.gate != nil {
		<-p.gate
	}
	var in struct {
		Amount int `json:"amount"`
	}
	if err := json.Unmarshal(req.Params.Arguments, &in); err != nil {
		return nil, err
	}
	if in.Amount < 0 {
		return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "negative amount"}}}, nil
	}
	if in.Amount == 0 {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "zero amount"}
	}
	return &mcp.CallToolResult{
		Content:           []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf("paid %d (payment %d)", in.Amount, n)}},
		StructuredContent: map[string]any{"payment": n, "amount": in.Amount, "at": time.Now().UnixNano()},
	}, nil
}

// idemServer returns a server whose tool "pay" is p wrapped by an
// Idempotency on store, changed by edit.
func idemServer(t testing.TB, p *payTool, store replay.Recorder, edit func(*IdempotencyOptions)) *mcp.Server {
	t.Helper()
	opts := IdempotencyOptions{IdempotencyConfig: mcptoken.IdempotencyConfig{Keys: idemKeys, Store: store, KeyArgument: "key", KeyFromMeta: true, Lease: 5 * time.Second}, Caller: metaCaller}
	if edit != nil {
		edit(&opts)
	}
	idem, err := NewIdempotency(opts)
	if err != nil {
		t.Fatal(err)
	}
	s := mcp.NewServer(&mcp.Implementation{Name: "pay", Version: "v0"}, nil)
	s.AddTool(&mcp.Tool{Name: "pay", InputSchema: payInput}, idem.Wrap(p.handler))
	return s
}

// dropFirstCall is receiving middleware that loses the response of the
// first tools/call after the handler ran (the client gets an error, as
// when a connection drops), keeping the result it dropped.
type dropFirstCall struct {
	dropped atomic.Bool
	result  []byte
}

func (d *dropFirstCall) middleware(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		res, err := next(ctx, method, req)
		if method == "tools/call" && err == nil && d.dropped.CompareAndSwap(false, true) {
			d.result, _ = json.Marshal(res)
			return nil, errors.New("response lost")
		}
		return res, err
	}
}

func callPay(cs *mcp.ClientSession, caller string, args map[string]any, meta mcp.Meta) (*mcp.CallToolResult, error) {
	m := mcp.Meta{"test/caller": caller}
	for k, v := range meta {
		m[k] = v
	}
	return cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "pay", Arguments: args, Meta: m})
}

// TestIdempotentTools pins tools wrapped by an Idempotency: a retry gets the first result, a changed or concurrent call is refused or waits, and the options and schemas it needs.
func TestIdempotentTools(t *testing.T) {
	for _, tc := range []struct {
		name string
		test func(*testing.T)
	}{
		{"a retry after a lost response gets the first result", idempotencyLostResponseRetryGetsTheFirstResult},
		{"a lost response over streamable HTTP", idempotencyLostResponseOverStreamableHTTP},
		{"what each call under a used key is answered", idempotencyAnswers},
		{"a concurrent duplicate", idempotencyConcurrentDuplicate},
		{"the final round is recorded", idempotencyRecordsTheFinalRound},
		{"NewIdempotency refuses bad options", newIdempotencyRefusesBadOptions},
		{"RetryAfter reads only retryable refusals", retryAfterReadsOnlyRetryableRefusals},
		{"an inferred schema requires the key field unless omitempty", inferredSchemaRequiresTheKeyFieldUnlessOmitempty},
		{"WrapFor replays a typed tool's result and output", wrapForTypedToolReplaysResultAndOutput},
		{"a failure recorded before its data was kept as bytes replays its data", failureOfTheOlderLayoutReplaysItsData},
		{"a tool with no effect frees its key", idempotencyNoEffectFreesTheKey},
		{"a store outage records nothing and is ridden out", idempotencyStoreOutageRecordsNothing},
		{"a round's lost hold cancels the idempotent tool it runs", idempotencyRoundLostHoldCancelsTheTool},
		{"a recorded failure is sent as recorded, the first time too", idempotencyRecordedFailureIsSentAsRecorded},
		{"ErrNoEffect in round two frees the round for its resend", idempotencyNoEffectInRoundTwoFreesTheRound},
	} {
		t.Run(tc.name, tc.test)
	}
}

func idempotencyLostResponseRetryGetsTheFirstResult(t *testing.T) {
	cases := []struct {
		name string
		args map[string]any
		meta mcp.Meta
	}{
		{"key argument", map[string]any{"key": "pay-1", "amount": 5}, nil},
		{"key in _meta", map[string]any{"amount": 5}, mcp.Meta{mcptoken.MetaIdempotencyKey: "pay-1"}},
		{"tool error result", map[string]any{"key": "pay-1", "amount": -5}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := &payTool{}
			s := idemServer(t, p, replay.NewMemoryStore(100), nil)
			drop := &dropFirstCall{}
			s.AddReceivingMiddleware(drop.middleware)
			cs := connect(t, s, nil)
			if _, err := callPay(cs, "alice", c.args, c.meta); err == nil {
				t.Fatal("the first response was not lost")
			}
			res, err := callPay(cs, "alice", c.args, c.meta)
			if err != nil {
				t.Fatal(err)
			}
			res.Meta = nil // the SDK's own _meta (serverInfo), added after every middleware
			got, _ := json.Marshal(res)
			if p.effects.Load() != 1 || !bytes.Equal(got, drop.result) {
				t.Fatalf("%d effects; retry got %s, the lost response was %s", p.effects.Load(), got, drop.result)
			}
		})
	}
}

// dropFirstToolsCall is an http.RoundTripper that lets the first
// tools/call POST reach the server, reads its whole response, and
// reports a broken connection instead.
type dropFirstToolsCall struct {
	dropped atomic.Bool
}

func (d *dropFirstToolsCall) RoundTrip(r *http.Request) (*http.Response, error) {
	var body []byte
	if r.Body != nil {
		body, _ = io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
	}
	resp, err := http.DefaultTransport.RoundTrip(r)
	if err == nil && bytes.Contains(body, []byte(`"tools/call"`)) && d.dropped.CompareAndSwap(false, true) {
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return nil, errors.New("connection reset after the request was served")
	}
	return resp, err
}

func idempotencyLostResponseOverStreamableHTTP(t *testing.T) {
	p := &payTool{}
	s := idemServer(t, p, replay.NewMemoryStore(100), nil)
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, &mcp.StreamableHTTPOptions{Stateless: true})
	srv := httptest.NewServer(h)
	defer srv.Close()
	rt := &dropFirstToolsCall{}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "c", Version: "v0"}, nil).Connect(context.Background(),
		&mcp.StreamableClientTransport{Endpoint: srv.URL, HTTPClient: &http.Client{Transport: rt}, MaxRetries: -1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	args := map[string]any{"key": "pay-http", "amount": 7}
	if _, err := callPay(cs, "alice", args, nil); err == nil {
		t.Fatal("the first response was not lost")
	}
	if p.effects.Load() != 1 {
		t.Fatalf("the first call ran %d times", p.effects.Load())
	}
	res, err := callPay(cs, "alice", args, nil)
	if err != nil {
		t.Fatal(err)
	}
	again, err := callPay(cs, "alice", args, nil)
	if err != nil {
		t.Fatal(err)
	}
	b1, _ := json.Marshal(res)
	b2, _ := json.Marshal(again)
	if p.effects.Load() != 1 || !bytes.Equal(b1, b2) || !bytes.Contains(b1, []byte("payment 1")) {
		t.Fatalf("%d effects; %s then %s", p.effects.Load(), b1, b2)
	}
}

func idempotencyAnswers(t *testing.T) {
	p := &payTool{}
	cs := connect(t, idemServer(t, p, replay.NewMemoryStore(100), nil), nil)
	if _, err := callPay(cs, "alice", map[string]any{"key": "k", "amount": 5}, nil); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name        string
		caller      string
		args        map[string]any
		meta        mcp.Meta
		code        int64
		tokenCode   int
		wantEffects int32
	}{
		{"changed argument under the same key", "alice", map[string]any{"key": "k", "amount": 6}, nil, jsonrpc.CodeInvalidParams, KeyReused, 1},
		{"another caller's same key runs", "bob", map[string]any{"key": "k", "amount": 5}, nil, 0, 0, 2},
		{"missing key", "alice", map[string]any{"amount": 5}, nil, jsonrpc.CodeInvalidParams, 0, 2},
		{"malformed key", "alice", map[string]any{"key": "a b", "amount": 5}, nil, jsonrpc.CodeInvalidParams, 0, 2},
		{"two different keys", "alice", map[string]any{"key": "k", "amount": 5}, mcp.Meta{mcptoken.MetaIdempotencyKey: "other"}, jsonrpc.CodeInvalidParams, 0, 2},
		{"no caller", "", map[string]any{"key": "k", "amount": 5}, nil, jsonrpc.CodeInternalError, 0, 2},
		{"handler error releases the key", "alice", map[string]any{"key": "z", "amount": 0}, nil, jsonrpc.CodeInvalidParams, 0, 3},
		{"the released key runs again", "alice", map[string]any{"key": "z", "amount": 0}, nil, jsonrpc.CodeInvalidParams, 0, 4},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := callPay(cs, c.caller, c.args, c.meta)
			if c.code == 0 {
				if err != nil {
					t.Fatal(err)
				}
			} else {
				wantRPCError(t, err, c.code, c.tokenCode)
			}
			if got := p.effects.Load(); got != c.wantEffects {
				t.Fatalf("%d effects, want %d", got, c.wantEffects)
			}
		})
	}
}

func idempotencyConcurrentDuplicate(t *testing.T) {
	for _, wait := range []time.Duration{0, 2 * time.Second} {
		t.Run(fmt.Sprintf("wait %v", wait), func(t *testing.T) {
			p := &payTool{gate: make(chan struct{}), started: make(chan struct{})}
			cs := connect(t, idemServer(t, p, replay.NewMemoryStore(100), func(o *IdempotencyOptions) { o.Wait = wait }), nil)
			args := map[string]any{"key": "dup", "amount": 5}
			var wg sync.WaitGroup
			var first *mcp.CallToolResult
			var firstErr error
			wg.Add(1)
			go func() {
				defer wg.Done()
				first, firstErr = callPay(cs, "alice", args, nil)
			}()
			<-p.started
			if wait == 0 {
				_, err := callPay(cs, "alice", args, nil)
				wantRPCError(t, err, jsonrpc.CodeInternalError, InProgress)
				if d, ok := RetryAfter(err); !ok || d <= 0 || d > time.Second {
					t.Fatalf("retry after %v, %v", d, ok)
				}
				close(p.gate)
				wg.Wait()
			} else {
				time.AfterFunc(50*time.Millisecond, func() { close(p.gate) })
				second, err := callPay(cs, "alice", args, nil)
				wg.Wait()
				b1, _ := json.Marshal(first)
				b2, _ := json.Marshal(second)
				if err != nil || !bytes.Equal(b1, b2) {
					t.Fatalf("waiting duplicate: %s, %v; first %s", b2, err, b1)
				}
			}
			if firstErr != nil || p.effects.Load() != 1 {
				t.Fatalf("first: %v; %d effects", firstErr, p.effects.Load())
			}
		})
	}
}

func newIdempotencyRefusesBadOptions(t *testing.T) {
	cases := map[string]IdempotencyOptions{
		"no store":                   {IdempotencyConfig: mcptoken.IdempotencyConfig{Keys: idemKeys, KeyArgument: "key"}},
		"no key source":              {IdempotencyConfig: mcptoken.IdempotencyConfig{Keys: idemKeys, Store: replay.NewMemoryStore(1)}},
		"transactional memory store": {IdempotencyConfig: mcptoken.IdempotencyConfig{Keys: idemKeys, Store: replay.NewMemoryStore(1), KeyArgument: "key", Transactional: true}},
	}
	for name, o := range cases {
		t.Run(name, func(t *testing.T) {
			if _, err := NewIdempotency(o); !errors.Is(err, ctoken.ErrConfig) {
				t.Fatalf("err = %v", err)
			}
		})
	}
	t.Run("zero Idempotency refuses", func(t *testing.T) {
		p := &payTool{}
		_, err := new(Idempotency).Wrap(p.handler)(context.Background(), &mcp.CallToolRequest{Params: &mcp.CallToolParamsRaw{Name: "pay"}})
		var we *jsonrpc.Error
		if !errors.As(err, &we) || we.Code != jsonrpc.CodeInternalError || p.effects.Load() != 0 {
			t.Fatalf("err = %v", err)
		}
	})
}

func retryAfterReadsOnlyRetryableRefusals(t *testing.T) {
	cases := map[string]error{
		"nil":        nil,
		"plain":      errors.New("x"),
		"key reused": invalidParams("m", KeyReused),
		"bad data":   &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Data: json.RawMessage(`{`)},
		"no hint":    &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Data: json.RawMessage(`{"ctokenCode":1025}`)},
	}
	for name, err := range cases {
		t.Run(name, func(t *testing.T) {
			if d, ok := RetryAfter(err); ok {
				t.Fatalf("RetryAfter = %v", d)
			}
		})
	}
	t.Run("in progress", func(t *testing.T) {
		err := &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Data: json.RawMessage(`{"ctokenCode":1025,"retryAfterMs":250}`)}
		if d, ok := RetryAfter(err); !ok || d != 250*time.Millisecond {
			t.Fatalf("RetryAfter = %v, %v", d, ok)
		}
	})
	t.Run("outcome unknown", func(t *testing.T) {
		err := idempotencyError(fmt.Errorf("%w: commit", mcptoken.ErrOutcomeUnknown))
		var we *jsonrpc.Error
		if !errors.As(err, &we) || we.Code != jsonrpc.CodeInternalError || !strings.Contains(string(we.Data), `"ctokenCode":1028`) {
			t.Fatalf("sent %v", err)
		}
		if d, ok := RetryAfter(err); !ok || d != time.Millisecond {
			t.Fatalf("RetryAfter = %v, %v; want the 1 ms floor of a hint the engine did not give", d, ok)
		}
	})
}

func BenchmarkIdempotentToolCall(b *testing.B) {
	for _, mode := range []string{"plain", "idempotent"} {
		b.Run(mode, func(b *testing.B) {
			p := &payTool{}
			s := mcp.NewServer(&mcp.Implementation{Name: "pay", Version: "v0"}, nil)
			if mode == "plain" {
				s.AddTool(&mcp.Tool{Name: "pay", InputSchema: payInput}, p.handler)
			} else {
				s = idemServer(b, p, replay.NewMemoryStore(1<<20), nil)
			}
			cs := connect(b, s, nil)
			i := 0
			for b.Loop() {
				i++
				if _, err := callPay(cs, "alice", map[string]any{"key": fmt.Sprint("k", i), "amount": 5}, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

type transferIn struct {
	Key   string `json:"key"`
	Cents int    `json:"cents"`
}

type transferOut struct {
	Transfer int   `json:"transfer"`
	At       int64 `json:"at"`
}

// go-sdk infers a typed tool's input schema from its input struct: a key
// field is required unless its tag says omitempty, so a client (a model
// too) must send it; with omitempty a call without it reaches the
// Idempotency, which refuses it unless NonIdempotentWithoutKey.
func inferredSchemaRequiresTheKeyFieldUnlessOmitempty(t *testing.T) {
	type required struct {
		Key   string `json:"key"`
		Cents int    `json:"cents"`
	}
	type optional struct {
		Key   string `json:"key,omitempty"`
		Cents int    `json:"cents"`
	}
	s := mcp.NewServer(&mcp.Implementation{Name: "bank", Version: "v0"}, nil)
	noop := func(context.Context, *mcp.CallToolRequest, required) (*mcp.CallToolResult, any, error) {
		return nil, nil, nil
	}
	noop2 := func(context.Context, *mcp.CallToolRequest, optional) (*mcp.CallToolResult, any, error) {
		return nil, nil, nil
	}
	mcp.AddTool(s, &mcp.Tool{Name: "required"}, noop)
	mcp.AddTool(s, &mcp.Tool{Name: "optional"}, noop2)
	cs := connect(t, s, nil)
	res, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{"required": true, "optional": false}
	for _, tool := range res.Tools {
		var schema struct{ Required []string }
		b, _ := json.Marshal(tool.InputSchema)
		if err := json.Unmarshal(b, &schema); err != nil {
			t.Fatal(err)
		}
		if got := slices.Contains(schema.Required, "key"); got != want[tool.Name] {
			t.Errorf("%s: key required %v, want %v (schema %s)", tool.Name, got, want[tool.Name], b)
		}
	}
}

func wrapForTypedToolReplaysResultAndOutput(t *testing.T) {
	idem, err := NewIdempotency(IdempotencyOptions{IdempotencyConfig: mcptoken.IdempotencyConfig{Keys: idemKeys, Store: replay.NewMemoryStore(100), KeyArgument: "key"}, Caller: metaCaller})
	if err != nil {
		t.Fatal(err)
	}
	var effects atomic.Int32
	s := mcp.NewServer(&mcp.Implementation{Name: "bank", Version: "v0"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "pay"}, WrapFor(idem, func(ctx context.Context, req *mcp.CallToolRequest, in transferIn) (*mcp.CallToolResult, transferOut, error) {
		n := effects.Add(1)
		if in.Cents == 0 {
			return nil, transferOut{}, errors.New("zero transfer")
		}
		return nil, transferOut{Transfer: int(n), At: time.Now().UnixNano()}, nil
	}))
	drop := &dropFirstCall{}
	s.AddReceivingMiddleware(drop.middleware)
	cs := connect(t, s, nil)
	args := map[string]any{"key": "t-1", "cents": 500}
	if _, err := callPay(cs, "alice", args, nil); err == nil {
		t.Fatal("the first response was not lost")
	}
	t.Run("the retry gets the first result", func(t *testing.T) {
		res, err := callPay(cs, "alice", args, nil)
		if err != nil {
			t.Fatal(err)
		}
		res.Meta = nil
		got, _ := json.Marshal(res)
		if effects.Load() != 1 || !bytes.Equal(got, drop.result) {
			t.Fatalf("%d effects; retry %s, lost %s", effects.Load(), got, drop.result)
		}
	})
	t.Run("changed arguments are refused", func(t *testing.T) {
		_, err := callPay(cs, "alice", map[string]any{"key": "t-1", "cents": 600}, nil)
		wantRPCError(t, err, jsonrpc.CodeInvalidParams, KeyReused)
	})
	t.Run("a handler error is a tool error result, recorded and replayed", func(t *testing.T) {
		var first string
		for range 2 {
			res, err := callPay(cs, "alice", map[string]any{"key": "t-0", "cents": 0}, nil)
			if err != nil || !res.IsError || effects.Load() != 2 {
				t.Fatalf("%v, %+v; %d effects", err, res, effects.Load())
			}
			text := res.Content[0].(*mcp.TextContent).Text
			if first == "" {
				first = text
			}
			if text != first {
				t.Fatalf("the retry's error %q; the first's %q", text, first)
			}
		}
	})
}

func idempotencyRecordsTheFinalRound(t *testing.T) {
	idem, err := NewIdempotency(IdempotencyOptions{IdempotencyConfig: mcptoken.IdempotencyConfig{Keys: idemKeys, Store: replay.NewMemoryStore(100), KeyArgument: "key"}, Caller: metaCaller})
	if err != nil {
		t.Fatal(err)
	}
	var asked, effects atomic.Int32
	s := mcp.NewServer(&mcp.Implementation{Name: "deployer", Version: "v0"}, nil)
	s.AddTool(&mcp.Tool{Name: "pay", InputSchema: payInput}, idem.Wrap(func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		if req.Params.RequestState == "" {
			asked.Add(1)
			return &mcp.CallToolResult{
				InputRequests: mcp.InputRequestMap{"ok": &mcp.ElicitParams{Message: "Pay?", RequestedSchema: map[string]any{"type": "object", "properties": map[string]any{"ok": map[string]any{"type": "boolean"}}}}},
				RequestState:  "confirm",
			}, nil
		}
		n := effects.Add(1)
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf("paid (payment %d)", n)}}}, nil
	}))
	cs := connect(t, s, manual)
	args := map[string]any{"key": "k", "amount": 5}
	meta := mcp.Meta{"test/caller": "alice"}
	round1, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "pay", Arguments: args, Meta: meta})
	if err != nil || !round1.NeedsInput() {
		t.Fatalf("round one: %v, %+v", err, round1)
	}
	round2 := &mcp.CallToolParams{Name: "pay", Arguments: args, Meta: meta, RequestState: round1.RequestState,
		InputResponses: mcp.InputResponseMap{"ok": &mcp.ElicitResult{Action: "accept", Content: map[string]any{"ok": true}}}}
	first, err := cs.CallTool(context.Background(), round2)
	if err != nil || first.NeedsInput() {
		t.Fatalf("round two: %v, %+v", err, first)
	}
	again, err := cs.CallTool(context.Background(), round2) // the retry of a lost round two
	b1, _ := json.Marshal(first)
	b2, _ := json.Marshal(again)
	if err != nil || !bytes.Equal(b1, b2) || effects.Load() != 1 || asked.Load() != 1 {
		t.Fatalf("%v; %s then %s; %d effects, asked %d times", err, b1, b2, effects.Load(), asked.Load())
	}
}

// flakyDB is a tool's database that refuses the first connection: the
// tool says so with ErrNoEffect, before any effect, and acts on the next
// call.
type flakyDB struct{ runs, effects atomic.Int32 }

func (db *flakyDB) pay() (int32, error) {
	if db.runs.Add(1) == 1 {
		return 0, fmt.Errorf("%w: dial tcp 10.0.0.7:5432: connection refused", mcptoken.ErrNoEffect)
	}
	return db.effects.Add(1), nil
}

// flakyServer returns a server whose tool "untyped" (Wrap) and "typed"
// (WrapFor) pay through db.
func flakyServer(t *testing.T, db *flakyDB) *mcp.Server {
	t.Helper()
	idem, err := NewIdempotency(IdempotencyOptions{IdempotencyConfig: mcptoken.IdempotencyConfig{Keys: idemKeys, Store: replay.NewMemoryStore(100), KeyArgument: "key", KeyFromMeta: true}, Caller: metaCaller})
	if err != nil {
		t.Fatal(err)
	}
	s := mcp.NewServer(&mcp.Implementation{Name: "bank", Version: "v0"}, nil)
	s.AddTool(&mcp.Tool{Name: "untyped", InputSchema: payInput}, idem.Wrap(func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		n, err := db.pay()
		if err != nil {
			return nil, err
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf("payment %d", n)}}}, nil
	}))
	mcp.AddTool(s, &mcp.Tool{Name: "typed"}, WrapFor(idem, func(context.Context, *mcp.CallToolRequest, transferIn) (*mcp.CallToolResult, transferOut, error) {
		n, err := db.pay()
		if err != nil {
			return nil, transferOut{}, err
		}
		return nil, transferOut{Transfer: int(n)}, nil
	}))
	return s
}

// idempotencyNoEffectFreesTheKey: a tool whose database refused the
// connection before any effect, through Wrap and WrapFor, is answered
// 1025 with a hint; the same key then runs it, once: one effect, whether
// the application retries or CallTool does. A tool that fails after its
// effect is still replayed.
func idempotencyNoEffectFreesTheKey(t *testing.T) {
	params := func(tool, key string) *mcp.CallToolParams {
		args := map[string]any{"key": key, "amount": 5}
		if tool == "typed" {
			args = map[string]any{"key": key, "cents": 5}
		}
		return &mcp.CallToolParams{Name: tool, Arguments: args, Meta: mcp.Meta{"test/caller": "alice"}}
	}
	for _, tool := range []string{"untyped", "typed"} {
		t.Run(tool+": the application retries with the same key", func(t *testing.T) {
			db := &flakyDB{}
			cs := connect(t, flakyServer(t, db), nil)
			p := params(tool, "pay-1")
			_, err := cs.CallTool(context.Background(), p)
			wantRPCError(t, err, jsonrpc.CodeInternalError, InProgress)
			if d, ok := RetryAfter(err); !ok || d != time.Second {
				t.Fatalf("RetryAfter = %v, %v; want 1s", d, ok)
			}
			first, err := cs.CallTool(context.Background(), p)
			if err != nil {
				t.Fatal(err)
			}
			again, err := cs.CallTool(context.Background(), p)
			b1, _ := json.Marshal(first)
			b2, _ := json.Marshal(again)
			if err != nil || !bytes.Equal(b1, b2) || db.runs.Load() != 2 || db.effects.Load() != 1 {
				t.Fatalf("%v; %s then %s; %d runs, %d effects", err, b1, b2, db.runs.Load(), db.effects.Load())
			}
		})
		t.Run(tool+": CallTool retries it", func(t *testing.T) {
			db := &flakyDB{}
			cs := connect(t, flakyServer(t, db), nil)
			res, err := CallTool(context.Background(), cs, params(tool, "pay-2"), CallOptions{Key: "pay-2"})
			if err != nil || res.IsError || db.runs.Load() != 2 || db.effects.Load() != 1 {
				t.Fatalf("%v, %+v; %d runs, %d effects", err, res, db.runs.Load(), db.effects.Load())
			}
		})
	}
	t.Run("a failure after the effect is replayed", func(t *testing.T) {
		idem, err := NewIdempotency(IdempotencyOptions{IdempotencyConfig: mcptoken.IdempotencyConfig{Keys: idemKeys, Store: replay.NewMemoryStore(100), KeyArgument: "key"}, Caller: metaCaller})
		if err != nil {
			t.Fatal(err)
		}
		var effects atomic.Int32
		s := mcp.NewServer(&mcp.Implementation{Name: "bank", Version: "v0"}, nil)
		s.AddTool(&mcp.Tool{Name: "untyped", InputSchema: payInput}, idem.Wrap(func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			effects.Add(1)
			return nil, errors.New("charged, then the receipt could not be written")
		}))
		cs := connect(t, s, nil)
		_, first := cs.CallTool(context.Background(), params("untyped", "pay-3"))
		_, again := cs.CallTool(context.Background(), params("untyped", "pay-3"))
		if first == nil || again == nil || first.Error() != again.Error() || effects.Load() != 1 || TokenErrorCode(again) != 0 {
			t.Fatalf("%v then %v; %d effects", first, again, effects.Load())
		}
	})
}

// storeOutage is a memory store whose next down AcquireRecord calls fail,
// as a database that refuses connections does, counting them.
type storeOutage struct {
	*replay.MemoryStore
	down, refused atomic.Int32
}

func (s *storeOutage) AcquireRecord(ctx context.Context, id string, lease time.Duration, fp []byte) (replay.Record, error) {
	if s.down.Add(-1) >= 0 {
		s.refused.Add(1)
		return replay.Record{}, errors.New("dial tcp 10.0.0.9:6379: connect: connection refused")
	}
	return s.MemoryStore.AcquireRecord(ctx, id, lease, fp)
}

// idempotencyStoreOutageRecordsNothing: a store that cannot answer takes
// and records nothing, and the tool does not run; the client is told to
// retry (-32603 "idempotency store unavailable", which CallTool retries),
// and the same key runs the tool once the store is back: one effect,
// whether the application retries or CallTool does.
func idempotencyStoreOutageRecordsNothing(t *testing.T) {
	args := map[string]any{"key": "pay-s", "amount": 5}
	t.Run("the application retries with the same key", func(t *testing.T) {
		p := &payTool{}
		store := &storeOutage{MemoryStore: replay.NewMemoryStore(100)}
		store.down.Store(1)
		var log bytes.Buffer
		cs := connect(t, idemServer(t, p, store, func(o *IdempotencyOptions) { o.Logger = slog.New(slog.NewTextHandler(&log, nil)) }), nil)
		_, err := callPay(cs, "alice", args, nil)
		var we *jsonrpc.Error
		if !errors.As(err, &we) || we.Code != jsonrpc.CodeInternalError || we.Message != msgStoreUnavailable || !classify(err).Retry || p.effects.Load() != 0 {
			t.Fatalf("%v; %d effects; want a retryable -32603 %q and no run", err, p.effects.Load(), msgStoreUnavailable)
		}
		first, err := callPay(cs, "alice", args, nil)
		if err != nil {
			t.Fatal(err)
		}
		again, err := callPay(cs, "alice", args, nil)
		b1, _ := json.Marshal(first)
		b2, _ := json.Marshal(again)
		if err != nil || first.IsError || !bytes.Equal(b1, b2) || p.effects.Load() != 1 {
			t.Fatalf("%v; %s then %s; %d effects", err, b1, b2, p.effects.Load())
		}
		if got := log.String(); strings.Count(got, "idempotency store failed") != 1 || strings.Contains(got, "recorded") || strings.Contains(got, "pay-s") {
			t.Fatalf("want the outage logged once, nothing recorded, no key: %s", got)
		}
	})
	t.Run("CallTool rides it out", func(t *testing.T) {
		p := &payTool{}
		store := &storeOutage{MemoryStore: replay.NewMemoryStore(100)}
		store.down.Store(3)
		cs := connect(t, idemServer(t, p, store, func(o *IdempotencyOptions) { o.Logger = slog.New(slog.DiscardHandler) }), nil)
		params := &mcp.CallToolParams{Name: "pay", Arguments: args, Meta: mcp.Meta{"test/caller": "alice"}}
		res, err := CallTool(context.Background(), cs, params, CallOptions{KeyArgument: "key"})
		if err != nil || res.IsError || p.effects.Load() != 1 || store.refused.Load() != 3 {
			t.Fatalf("%v, %+v; %d effects after %d refusals; want 1 after 3", err, res, p.effects.Load(), store.refused.Load())
		}
	})
}

// lostHolds is a memory store that refuses every lease renewal as lost:
// a round's hold is lost at its first renewal, a third of the hold (5 s)
// after it began.
type lostHolds struct{ *replay.MemoryStore }

func (lostHolds) RenewLease(context.Context, string, string, time.Duration) error {
	return replay.ErrLeaseLost
}

// idempotencyRoundLostHoldCancelsTheTool: through go-sdk, with
// SecureRequestState's real hold, a round whose hold is lost cancels the
// context of the tool it runs although the tool is wrapped in
// Idempotency (docs/mcp.md's configuration for a two-round tool that
// acts): the tool gives up before it acts, says so (ErrNoEffect, sent as
// 1025), and its key stays free: the same key starts the call over.
func idempotencyRoundLostHoldCancelsTheTool(t *testing.T) {
	f := newFleet(t, 1, "s1")
	idem, err := NewIdempotency(IdempotencyOptions{
		IdempotencyConfig: mcptoken.IdempotencyConfig{Keys: idemKeys, Store: replay.NewMemoryStore(100), KeyFromMeta: true},
		Caller:            FixedCaller("alice"), Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	var effects atomic.Int32
	cause := make(chan error, 1)
	deploy := func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		if req.Params.RequestState == "" {
			return &mcp.CallToolResult{InputRequests: question("confirm"), RequestState: "confirm"}, nil
		}
		select { // a slow deploy that checks its context before it acts
		case <-ctx.Done():
		case <-time.After(failsafe):
		}
		cause <- context.Cause(ctx)
		if ctx.Err() == nil {
			effects.Add(1)
		}
		return nil, fmt.Errorf("%w: %w", mcptoken.ErrNoEffect, ctx.Err())
	}
	s := mcp.NewServer(&mcp.Implementation{Name: "deploy", Version: "v0"}, nil)
	s.AddTool(&mcp.Tool{Name: "deploy", InputSchema: map[string]any{"type": "object"}}, idem.Wrap(deploy))
	o := StateOptions{Caller: FixedCaller("alice"), AnswerRetries: true, Logger: slog.New(slog.DiscardHandler)}
	if err := SecureRequestState(s, retryCodec(t, f, lostHolds{replay.NewMemoryStore(0)}), &o); err != nil {
		t.Fatal(err)
	}
	cs := connect(t, s, manual)
	ctx := context.Background()
	round1 := &mcp.CallToolParams{Name: "deploy", Arguments: map[string]any{}, Meta: mcp.Meta{mcptoken.MetaIdempotencyKey: "dep-1"}}
	first, err := cs.CallTool(ctx, round1)
	if err != nil || first.RequestState == "" {
		t.Fatalf("round one: %v, %+v", err, first)
	}
	round2 := *round1
	round2.RequestState, round2.InputResponses = first.RequestState, answers("confirm")
	_, err = cs.CallTool(ctx, &round2)
	var got error
	select {
	case got = <-cause:
	default:
		t.Fatalf("round two answered %v before its tool's context ended", err)
	}
	if !errors.Is(got, mcptoken.ErrRoundInterrupted) || effects.Load() != 0 {
		t.Fatalf("the tool's context ended with %v, %d deploys; want ErrRoundInterrupted and none", got, effects.Load())
	}
	// The round's answer is its tool's own: nothing happened (1025).
	wantRPCError(t, err, jsonrpc.CodeInternalError, InProgress)
	again, err := cs.CallTool(ctx, round1)
	if err != nil || again.RequestState == "" || again.IsError {
		t.Fatalf("the same key afterwards: %v, %+v; want round one again", err, again)
	}
}

// failureOfTheOlderLayoutReplaysItsData replays a record written with
// the data as a JSON member (before it was recorded as bytes), as a
// server keeps it for Window across an upgrade.
func failureOfTheOlderLayoutReplaysItsData(t *testing.T) {
	var we *jsonrpc.Error
	err := replayFailure([]byte(`{"c":-32000,"m":"deploy crashed","d":{"x":1}}`))
	if !errors.As(err, &we) || we.Code != -32000 || we.Message != "deploy crashed" || string(we.Data) != `{"x":1}` {
		t.Fatalf("replayed %#v", err)
	}
}

// FuzzReplayFailure decodes arbitrary records as a recorded failure, as
// a retry does: never a panic, never a nil error; and a failure recorded
// from a JSON-RPC error comes back with its code, message and data, the
// data byte for byte.
func FuzzReplayFailure(f *testing.F) {
	f.Add([]byte(`{"c":-32603,"m":"deploy crashed","d":{"x":1}}`), int64(-32000), "failed", []byte(`{"a":1}`))
	f.Add([]byte(`{"m":"plain"}`), int64(0), "", []byte(nil))
	f.Add([]byte(`not json`), int64(-32603), "x", []byte(`[1`))
	f.Fuzz(func(t *testing.T, rec []byte, code int64, msg string, data []byte) {
		if replayFailure(rec) == nil {
			t.Fatal("no error for a recorded failure")
		}
		if code == 0 || code == jsonrpc.CodeInvalidParams {
			return
		}
		orig := &jsonrpc.Error{Code: code, Message: msg, Data: data}
		var fl *mcptoken.Failure
		if !errors.As(failure(orig), &fl) || fl.Err != orig {
			t.Fatalf("failure(%v) = %v; want a Failure holding it", orig, fl)
		}
		// The message as JSON carries it (invalid UTF-8 replaced), as
		// the first answer's was sent.
		var sent string
		b, _ := json.Marshal(msg)
		json.Unmarshal(b, &sent)
		var we *jsonrpc.Error
		got := replayFailure(fl.Record)
		if !errors.As(got, &we) || we.Code != code || we.Message != sent {
			t.Fatalf("replayed %#v; want code %d, message %q", got, code, sent)
		}
		if !bytes.Equal(data, we.Data) {
			t.Fatalf("replayed data %q; want %q, byte for byte", we.Data, data)
		}
	})
}

// A tool's recorded failure reaches the first call in the very bytes its
// retries get, marked 1030; so does a result that cannot be replayed (a
// number outside float64), refused before it is sent, saying so.
func idempotencyRecordedFailureIsSentAsRecorded(t *testing.T) {
	idem, err := NewIdempotency(IdempotencyOptions{IdempotencyConfig: mcptoken.IdempotencyConfig{Keys: idemKeys, Store: replay.NewMemoryStore(100), KeyArgument: "key"}, Caller: metaCaller})
	if err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int32
	s := mcp.NewServer(&mcp.Implementation{Name: "pay", Version: "v0"}, nil)
	keyOnly := json.RawMessage(`{"type":"object","properties":{"key":{"type":"string"}},"required":["key"]}`)
	s.AddTool(&mcp.Tool{Name: "fail", InputSchema: keyOnly}, idem.Wrap(func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		runs.Add(1)
		return nil, errors.New("card \xff declined") // not UTF-8
	}))
	s.AddTool(&mcp.Tool{Name: "huge", InputSchema: keyOnly}, idem.Wrap(func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		runs.Add(1)
		return &mcp.CallToolResult{Content: []mcp.Content{}, StructuredContent: json.RawMessage(`{"n":1e400}`)}, nil
	}))
	srv := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, &mcp.StreamableHTTPOptions{Stateless: true, JSONResponse: true}))
	defer srv.Close()
	post := func(tool string) []byte {
		body := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"` + tool + `","arguments":{"key":"k1"},"_meta":{"test/caller":"alice"}}}`
		req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return b
	}
	for _, c := range []struct{ tool, says string }{
		{"fail", "card \ufffd declined"},
		{"huge", "its result cannot be sent"},
	} {
		t.Run(c.tool, func(t *testing.T) {
			runs.Store(0)
			first, again := post(c.tool), post(c.tool)
			if !bytes.Equal(first, again) || !bytes.Contains(first, []byte(`"ctokenCode":1030`)) || !bytes.Contains(first, []byte(c.says)) || runs.Load() != 1 {
				t.Fatalf("first %s\nretry %s\n%d runs; want the same recorded failure, one run", first, again, runs.Load())
			}
		})
	}
}

// A tool with no effect in round two (its database refused) frees that
// round: CallTool's resend of round two, with the same state and answers,
// runs it again, so the user is not asked twice and the call acts once.
func idempotencyNoEffectInRoundTwoFreesTheRound(t *testing.T) {
	f := newFleet(t, 1, "s1")
	idem, err := NewIdempotency(IdempotencyOptions{
		IdempotencyConfig: mcptoken.IdempotencyConfig{Keys: idemKeys, Store: replay.NewMemoryStore(100), KeyFromMeta: true},
		Caller:            FixedCaller("alice"), Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	var asked atomic.Int32
	db := &flakyDB{}
	deploy := func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		if req.Params.RequestState == "" {
			asked.Add(1)
			return &mcp.CallToolResult{InputRequests: question("confirm"), RequestState: "confirm"}, nil
		}
		n, err := db.pay()
		if err != nil {
			return nil, err
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf("deployed (deploy %d)", n)}}}, nil
	}
	s := mcp.NewServer(&mcp.Implementation{Name: "deploy", Version: "v0"}, nil)
	s.AddTool(&mcp.Tool{Name: "deploy", InputSchema: map[string]any{"type": "object"}}, idem.Wrap(deploy))
	o := StateOptions{Caller: FixedCaller("alice"), AnswerRetries: true, Logger: slog.New(slog.DiscardHandler)}
	if err := SecureRequestState(s, retryCodec(t, f, replay.NewMemoryStore(0)), &o); err != nil {
		t.Fatal(err)
	}
	cs := connect(t, s, manual)
	ctx := context.Background()
	round1 := &mcp.CallToolParams{Name: "deploy", Arguments: map[string]any{}, Meta: mcp.Meta{mcptoken.MetaIdempotencyKey: "dep-1"}}
	first, err := cs.CallTool(ctx, round1)
	if err != nil || first.RequestState == "" {
		t.Fatalf("round one: %v, %+v", err, first)
	}
	round2 := *round1
	round2.RequestState, round2.InputResponses = first.RequestState, answers("confirm")
	res, err := CallTool(ctx, cs, &round2, CallOptions{})
	if err != nil || resultText(t, res) != "deployed (deploy 1)" || db.runs.Load() != 2 || db.effects.Load() != 1 || asked.Load() != 1 {
		t.Fatalf("round two: %v, %+v; %d runs, %d effects, asked %d times; want the deploy, asked once", err, res, db.runs.Load(), db.effects.Load(), asked.Load())
	}
	// Its answer, lost, is the recorded round's.
	again, err := cs.CallTool(ctx, &round2)
	if err != nil || resultText(t, again) != "deployed (deploy 1)" || db.effects.Load() != 1 {
		t.Fatalf("round two again: %v, %+v; %d effects", err, again, db.effects.Load())
	}
}
