package ctokenmcpgo

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ctoken/ctoken"
	"github.com/ctoken/ctoken/mcptoken"
	"github.com/ctoken/ctoken/replay"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
)

// idemKeys seal the recorded results of the tests' idempotent tools.
var idemKeys = func() *ctoken.Keyring {
	kr, err := ctoken.NewKeyring([]byte("0123456789abcdef0123456789abcdef"))
	if err != nil {
		panic(err)
	}
	return kr
}()

// payTool is a tool with an effect: each run of it moves money once.
type payTool struct {
	effects atomic.Int32
	gate    chan struct{} // when set, a run waits for it to close
	started chan struct{} // when set, closed when the first run starts
}

func (p *payTool) handler(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	if req.GetFloat("amount", 0) == -1 {
		return nil, fmt.Errorf("%w: amount -1 is reserved", mcp.ErrInvalidParams) // before any effect
	}
	n := p.effects.Add(1)
	if p.started != nil && n == 1 {
		close(p.started)
	}
	if p.gate != nil {
		<-p.gate
	}
	amount := req.GetFloat("amount", 0)
	if amount < 0 {
		return mcp.NewToolResultError("negative amount"), nil
	}
	if amount == 0 {
		return nil, errors.New("zero amount")
	}
	return mcp.NewToolResultStructured(map[string]any{"payment": n, "amount": amount, "at": time.Now().UnixNano()}, fmt.Sprintf("paid %v (payment %d)", amount, n)), nil
}

// payServer returns a server whose tool "pay" is p wrapped by an
// Idempotency on store, changed by edit.
func payServer(t testing.TB, p *payTool, store replay.Recorder, edit func(*IdempotencyOptions)) *server.MCPServer {
	t.Helper()
	opts := IdempotencyOptions{IdempotencyConfig: mcptoken.IdempotencyConfig{Keys: idemKeys, Store: store, KeyArgument: "key", KeyFromMeta: true, Lease: 5 * time.Second}}
	if edit != nil {
		edit(&opts)
	}
	idem, err := NewIdempotency(opts)
	if err != nil {
		t.Fatal(err)
	}
	s := server.NewMCPServer("pay", "v0")
	s.AddTool(mcp.NewTool("pay",
		mcp.WithString("key", mcp.Required(), mcp.Description("idempotency key: a fresh UUID per payment, the same on every retry")),
		mcp.WithNumber("amount", mcp.Required())), idem.Wrap(p.handler))
	return s
}

// dropFirst is a client transport that loses the response of the first
// tools/call after the server answered it.
type dropFirst struct {
	transport.Interface
	dropped atomic.Bool
}

func (d *dropFirst) SetRequestHandler(h transport.RequestHandler) {
	if b, ok := d.Interface.(transport.BidirectionalInterface); ok {
		b.SetRequestHandler(h)
	}
}

func (d *dropFirst) SendRequest(ctx context.Context, req transport.JSONRPCRequest) (*transport.JSONRPCResponse, error) {
	resp, err := d.Interface.SendRequest(ctx, req)
	if err == nil && req.Method == "tools/call" && d.dropped.CompareAndSwap(false, true) {
		return nil, errors.New("connection reset after the request was served")
	}
	return resp, err
}

func payCall(p *peer, args map[string]any, meta map[string]any) (*mcp.CallToolResult, error) {
	req := mcp.CallToolRequest{}
	req.Params.Name = "pay"
	req.Params.Arguments = args
	if meta != nil {
		req.Params.Meta = mcp.NewMetaFromMap(meta)
	}
	return p.c.CallTool(p.ctx, req)
}

// TestIdempotentTools pins tools wrapped by an Idempotency: a retry gets the first result, a changed or concurrent call is refused or waits, and the options it needs.
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
		{"a tool with no effect frees its key", idempotencyNoEffectFreesTheKey},
		{"a store outage records nothing and is ridden out", idempotencyStoreOutageRecordsNothing},
		{"a round's lost hold cancels the idempotent tool it runs", idempotencyRoundLostHoldCancelsTheTool},
		{"ErrNoEffect in round two frees the round for its resend", idempotencyNoEffectInRoundTwoFreesTheRound},
	} {
		t.Run(tc.name, tc.test)
	}
}

func idempotencyLostResponseRetryGetsTheFirstResult(t *testing.T) {
	cases := []struct {
		name string
		args map[string]any
		meta map[string]any
	}{
		{"key argument", map[string]any{"key": "pay-1", "amount": 5}, nil},
		{"key in _meta", map[string]any{"amount": 5}, map[string]any{mcptoken.MetaIdempotencyKey: "pay-1"}},
		{"tool error result", map[string]any{"key": "pay-1", "amount": -5}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := &payTool{}
			s := payServer(t, p, replay.NewMemoryStore(100), nil)
			cl := start(t, &dropFirst{Interface: transport.NewInProcessTransport(s)}, WithCaller(context.Background(), "alice"), nil)
			if _, err := payCall(cl, c.args, c.meta); err == nil {
				t.Fatal("the first response was not lost")
			}
			r1, err := payCall(cl, c.args, c.meta)
			if err != nil {
				t.Fatal(err)
			}
			r2, err := payCall(cl, c.args, c.meta)
			if err != nil {
				t.Fatal(err)
			}
			b1, _ := json.Marshal(r1)
			b2, _ := json.Marshal(r2)
			if p.effects.Load() != 1 || !bytes.Equal(b1, b2) || !bytes.Contains(b1, []byte("payment 1")) && !r1.IsError {
				t.Fatalf("%d effects; %s then %s", p.effects.Load(), b1, b2)
			}
		})
	}
}

// dropFirstToolsCall is an http.RoundTripper that lets the first
// tools/call POST reach the server, reads its whole response, and reports
// a broken connection instead.
type dropFirstToolsCall struct{ dropped atomic.Bool }

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
	endpoint := serveHTTP(t, payServer(t, p, replay.NewMemoryStore(100), nil))
	tr, err := transport.NewStreamableHTTP(endpoint,
		transport.WithHTTPHeaders(map[string]string{"Authorization": "Bearer alice"}),
		transport.WithHTTPBasicClient(&http.Client{Transport: &dropFirstToolsCall{}}))
	if err != nil {
		t.Fatal(err)
	}
	cl := start(t, tr, context.Background(), nil)
	args := map[string]any{"key": "pay-http", "amount": 7}
	if _, err := payCall(cl, args, nil); err == nil {
		t.Fatal("the first response was not lost")
	}
	r1, err := payCall(cl, args, nil)
	if err != nil {
		t.Fatal(err)
	}
	r2, err := payCall(cl, args, nil)
	if err != nil {
		t.Fatal(err)
	}
	b1, _ := json.Marshal(r1)
	b2, _ := json.Marshal(r2)
	if p.effects.Load() != 1 || !bytes.Equal(b1, b2) || !bytes.Contains(b1, []byte("payment 1")) {
		t.Fatalf("%d effects; %s then %s", p.effects.Load(), b1, b2)
	}
}

func idempotencyAnswers(t *testing.T) {
	p := &payTool{}
	s := payServer(t, p, replay.NewMemoryStore(100), nil)
	alice, bob, nobody := inProcess(t, s, "alice", nil), inProcess(t, s, "bob", nil), inProcess(t, s, "", nil)
	if _, err := payCall(alice, map[string]any{"key": "k", "amount": 5}, nil); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name        string
		peer        *peer
		args        map[string]any
		meta        map[string]any
		isError     bool
		code        int
		rpcError    bool
		wantEffects int32
	}{
		{"changed argument under the same key", alice, map[string]any{"key": "k", "amount": 6}, nil, true, KeyReused, false, 1},
		{"another caller's same key runs", bob, map[string]any{"key": "k", "amount": 5}, nil, false, 0, false, 2},
		{"missing key", alice, map[string]any{"amount": 5}, nil, true, 0, false, 2},
		{"malformed key", alice, map[string]any{"key": "a b", "amount": 5}, nil, true, 0, false, 2},
		{"two different keys", alice, map[string]any{"key": "k", "amount": 5}, map[string]any{mcptoken.MetaIdempotencyKey: "other"}, true, 0, false, 2},
		{"no caller", nobody, map[string]any{"key": "k", "amount": 5}, nil, false, 0, true, 2},
		{"a handler error is recorded", alice, map[string]any{"key": "z", "amount": 0}, nil, false, 0, true, 3},
		{"its retry gets the recorded error without a run", alice, map[string]any{"key": "z", "amount": 0}, nil, false, 0, true, 3},
		{"a validation failure releases the key", alice, map[string]any{"key": "v", "amount": -1}, nil, false, 0, true, 3},
		{"the released key runs with other arguments", alice, map[string]any{"key": "v", "amount": 7}, nil, false, 0, false, 4},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			res, err := payCall(c.peer, c.args, c.meta)
			switch {
			case c.rpcError:
				if err == nil {
					t.Fatalf("no JSON-RPC error: %+v", res)
				}
			case err != nil:
				t.Fatal(err)
			case res.IsError != c.isError || TokenCode(res) != c.code:
				t.Fatalf("isError %v, code %d: %s", res.IsError, TokenCode(res), text(res))
			}
			if got := p.effects.Load(); got != c.wantEffects {
				t.Fatalf("%d effects, want %d", got, c.wantEffects)
			}
		})
	}
}

// chargeTool says ErrNoEffect for a database that refused the
// connection, before any effect: the first call's, here (a tool that
// answers its other failures with mcp.NewToolResultError returns this
// one as an error). A charge of 0 fails after its effect, with a plain
// error.
type chargeTool struct{ runs, effects atomic.Int32 }

func (c *chargeTool) handler(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	if c.runs.Add(1) == 1 {
		return nil, fmt.Errorf("%w: dial tcp 10.0.0.7:5432: connection refused", mcptoken.ErrNoEffect)
	}
	n := c.effects.Add(1)
	if req.GetFloat("amount", 0) == 0 {
		return nil, errors.New("charged, then the receipt could not be written")
	}
	return mcp.NewToolResultText(fmt.Sprintf("charge %d", n)), nil
}

func chargeServer(t *testing.T, c *chargeTool) *server.MCPServer {
	t.Helper()
	return chargeServerOn(t, c, replay.NewMemoryStore(100), nil)
}

// chargeServerOn is chargeServer over store, logging to logger (nil:
// slog.Default).
func chargeServerOn(t *testing.T, c *chargeTool, store replay.Recorder, logger *slog.Logger) *server.MCPServer {
	t.Helper()
	idem, err := NewIdempotency(IdempotencyOptions{IdempotencyConfig: mcptoken.IdempotencyConfig{Keys: idemKeys, Store: store, KeyArgument: "key", KeyFromMeta: true}, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	s := server.NewMCPServer("bank", "v0")
	s.AddTool(mcp.NewTool("charge", mcp.WithString("key", mcp.Required()), mcp.WithNumber("amount", mcp.Required())), idem.Wrap(c.handler))
	return s
}

// idempotencyNoEffectFreesTheKey: a tool whose database refused the
// connection before any effect is answered 1025 with a hint; the same key
// then runs it, once: one effect, whether the application retries or
// CallTool does. A tool that fails after its effect is still replayed.
func idempotencyNoEffectFreesTheKey(t *testing.T) {
	charge := func(key string, amount int) mcp.CallToolRequest {
		req := mcp.CallToolRequest{}
		req.Params.Name = "charge"
		req.Params.Arguments = map[string]any{"key": key, "amount": amount}
		return req
	}
	t.Run("the application retries with the same key", func(t *testing.T) {
		c := &chargeTool{}
		p := inProcess(t, chargeServer(t, c), "alice", nil)
		res, err := p.c.CallTool(p.ctx, charge("c-1", 5))
		if err != nil || !res.IsError || TokenCode(res) != InProgress {
			t.Fatalf("%v, %+v; want a 1025 tool error result", err, res)
		}
		if d, ok := RetryAfter(res); !ok || d != time.Second {
			t.Fatalf("RetryAfter = %v, %v; want 1s", d, ok)
		}
		first, err := p.c.CallTool(p.ctx, charge("c-1", 5))
		if err != nil {
			t.Fatal(err)
		}
		again, err := p.c.CallTool(p.ctx, charge("c-1", 5))
		b1, _ := json.Marshal(first)
		b2, _ := json.Marshal(again)
		if err != nil || first.IsError || !bytes.Equal(b1, b2) || c.runs.Load() != 2 || c.effects.Load() != 1 {
			t.Fatalf("%v; %s then %s; %d runs, %d effects", err, b1, b2, c.runs.Load(), c.effects.Load())
		}
	})
	t.Run("CallTool retries it", func(t *testing.T) {
		c := &chargeTool{}
		p := inProcess(t, chargeServer(t, c), "alice", nil)
		res, err := CallTool(p.ctx, p.c, charge("c-2", 5), CallOptions{Key: "c-2"})
		if err != nil || res.IsError || c.runs.Load() != 2 || c.effects.Load() != 1 {
			t.Fatalf("%v, %+v; %d runs, %d effects", err, res, c.runs.Load(), c.effects.Load())
		}
	})
	t.Run("a failure after the effect is replayed", func(t *testing.T) {
		c := &chargeTool{}
		c.runs.Store(1) // the database is up
		p := inProcess(t, chargeServer(t, c), "alice", nil)
		_, first := p.c.CallTool(p.ctx, charge("c-3", 0))
		_, again := p.c.CallTool(p.ctx, charge("c-3", 0))
		if first == nil || again == nil || first.Error() != again.Error() || c.effects.Load() != 1 {
			t.Fatalf("%v then %v; %d effects", first, again, c.effects.Load())
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
// and records nothing, and the tool does not run; the client gets -32603
// ErrIdempotencyStore, which CallTool retries, and the same key runs the
// tool once the store is back: one effect, whether the application
// retries or CallTool does.
func idempotencyStoreOutageRecordsNothing(t *testing.T) {
	charge := mcp.CallToolRequest{}
	charge.Params.Name = "charge"
	charge.Params.Arguments = map[string]any{"key": "c-s", "amount": 5}
	t.Run("the application retries with the same key", func(t *testing.T) {
		c := &chargeTool{}
		c.runs.Store(1) // the tool's own database is up
		store := &storeOutage{MemoryStore: replay.NewMemoryStore(100)}
		store.down.Store(1)
		var log bytes.Buffer
		p := inProcess(t, chargeServerOn(t, c, store, slog.New(slog.NewTextHandler(&log, nil))), "alice", nil)
		_, err := p.c.CallTool(p.ctx, charge)
		if err == nil || sdkInternalMessage(err) != ErrIdempotencyStore.Error() || !classify(err).Retry || c.effects.Load() != 0 {
			t.Fatalf("%v; %d effects; want a retryable -32603 %q and no run", err, c.effects.Load(), ErrIdempotencyStore)
		}
		first, err := p.c.CallTool(p.ctx, charge)
		if err != nil {
			t.Fatal(err)
		}
		again, err := p.c.CallTool(p.ctx, charge)
		b1, _ := json.Marshal(first)
		b2, _ := json.Marshal(again)
		if err != nil || first.IsError || !bytes.Equal(b1, b2) || c.effects.Load() != 1 {
			t.Fatalf("%v; %s then %s; %d effects", err, b1, b2, c.effects.Load())
		}
		if got := log.String(); strings.Count(got, "idempotency store failed") != 1 || strings.Contains(got, "recorded") || strings.Contains(got, "c-s") {
			t.Fatalf("want the outage logged once, nothing recorded, no key: %s", got)
		}
	})
	t.Run("CallTool rides it out", func(t *testing.T) {
		c := &chargeTool{}
		c.runs.Store(1)
		store := &storeOutage{MemoryStore: replay.NewMemoryStore(100)}
		store.down.Store(3)
		p := inProcess(t, chargeServerOn(t, c, store, slog.New(slog.DiscardHandler)), "alice", nil)
		res, err := CallTool(p.ctx, p.c, charge, CallOptions{KeyArgument: "key"})
		if err != nil || res.IsError || c.effects.Load() != 1 || store.refused.Load() != 3 {
			t.Fatalf("%v, %+v; %d effects after %d refusals; want 1 after 3", err, res, c.effects.Load(), store.refused.Load())
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

// idempotencyRoundLostHoldCancelsTheTool: through mcp-go, with
// SecureRequestState's real hold, a round whose hold is lost cancels the
// context of the tool it runs although the tool is wrapped in
// Idempotency: the tool gives up before it acts and says so
// (ErrNoEffect, a 1025 tool error result), and the same key then reaches
// exactly one deploy.
func idempotencyRoundLostHoldCancelsTheTool(t *testing.T) {
	f := newFleet(t, 1, "s1", lostHolds{replay.NewMemoryStore(0)})
	quiet := slog.New(slog.DiscardHandler)
	states, err := NewStates(f.codec, &StateOptions{Caller: ContextCaller, AnswerRetries: true, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	idem, err := NewIdempotency(IdempotencyOptions{IdempotencyConfig: mcptoken.IdempotencyConfig{Keys: idemKeys, Store: replay.NewMemoryStore(100), KeyFromMeta: true}, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	var rounds2, deploys atomic.Int32
	cause := make(chan error, 1)
	deploy := func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		if req.Params.RequestState == "" {
			return server.NewInputRequestBuilder("confirm").Elicit("ok", mcp.ElicitationParams{Message: "deploy?", RequestedSchema: confirmSchema}).ToolResult(), nil
		}
		if rounds2.Add(1) == 1 {
			select { // a slow deploy that checks its context before it acts
			case <-ctx.Done():
			case <-time.After(failsafe):
			}
			cause <- context.Cause(ctx)
			if ctx.Err() != nil {
				return nil, fmt.Errorf("%w: %w", mcptoken.ErrNoEffect, ctx.Err())
			}
		}
		return mcp.NewToolResultText(fmt.Sprintf("deploy %d", deploys.Add(1))), nil
	}
	s := server.NewMCPServer("deploy", "v0", SecureRequestState(states), server.WithToolCapabilities(false), server.WithElicitation())
	s.AddTool(mcp.NewTool("deploy"), idem.Wrap(deploy))
	p := inProcess(t, s, "alice", &elicitor{answer: true})
	req := mcp.CallToolRequest{}
	req.Params.Name = "deploy"
	req.Params.Arguments = map[string]any{}
	req.Params.Meta = mcp.NewMetaFromMap(map[string]any{mcptoken.MetaIdempotencyKey: "dep-1"})
	res, err := p.c.CallTool(p.ctx, req)
	var got error
	select {
	case got = <-cause:
	default:
		t.Fatalf("the call answered %v, %+v before its tool's context ended", err, res)
	}
	if !errors.Is(got, mcptoken.ErrRoundInterrupted) || deploys.Load() != 0 {
		t.Fatalf("the tool's context ended with %v, %d deploys; want ErrRoundInterrupted and none", got, deploys.Load())
	}
	if err != nil || TokenCode(res) != InProgress {
		t.Fatalf("%v, %+v; want the tool's own 1025", err, res)
	}
	res, err = p.c.CallTool(p.ctx, req)
	if err != nil || res.IsError || text(res) != "deploy 1" || deploys.Load() != 1 {
		t.Fatalf("the same key afterwards: %v, %+v; %d deploys; want deploy 1", err, res, deploys.Load())
	}
}

func idempotencyConcurrentDuplicate(t *testing.T) {
	for _, wait := range []time.Duration{0, 2 * time.Second} {
		t.Run(fmt.Sprintf("wait %v", wait), func(t *testing.T) {
			p := &payTool{gate: make(chan struct{}), started: make(chan struct{})}
			s := payServer(t, p, replay.NewMemoryStore(100), func(o *IdempotencyOptions) { o.Wait = wait })
			c1, c2 := inProcess(t, s, "alice", nil), inProcess(t, s, "alice", nil)
			args := map[string]any{"key": "dup", "amount": 5}
			var wg sync.WaitGroup
			var first *mcp.CallToolResult
			var firstErr error
			wg.Add(1)
			go func() {
				defer wg.Done()
				first, firstErr = payCall(c1, args, nil)
			}()
			<-p.started
			if wait == 0 {
				res, err := payCall(c2, args, nil)
				if err != nil || TokenCode(res) != InProgress {
					t.Fatalf("%v, %+v", err, res)
				}
				if d, ok := RetryAfter(res); !ok || d <= 0 || d > time.Second {
					t.Fatalf("retry after %v, %v", d, ok)
				}
				close(p.gate)
				wg.Wait()
			} else {
				time.AfterFunc(50*time.Millisecond, func() { close(p.gate) })
				second, err := payCall(c2, args, nil)
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
		if _, err := new(Idempotency).Wrap(p.handler)(context.Background(), mcp.CallToolRequest{}); !errors.Is(err, ErrIdempotencyStore) || p.effects.Load() != 0 {
			t.Fatalf("err = %v", err)
		}
	})
}

func retryAfterReadsOnlyRetryableRefusals(t *testing.T) {
	inProgress := func(ms any) *mcp.CallToolResult {
		res := mcp.NewToolResultError("busy")
		res.Meta = mcp.NewMetaFromMap(map[string]any{MetaTokenCode: float64(InProgress), MetaRetryAfterMs: ms})
		return res
	}
	cases := map[string]*mcp.CallToolResult{
		"nil":          nil,
		"plain result": mcp.NewToolResultText("ok"),
		"no hint":      inProgress(nil),
		"zero hint":    inProgress(0.0),
		"huge hint":    inProgress(1e12),
	}
	for name, res := range cases {
		t.Run(name, func(t *testing.T) {
			if d, ok := RetryAfter(res); ok {
				t.Fatalf("RetryAfter = %v", d)
			}
		})
	}
	if d, ok := RetryAfter(inProgress(250.0)); !ok || d != 250*time.Millisecond {
		t.Fatalf("RetryAfter = %v, %v", d, ok)
	}
	t.Run("outcome unknown", func(t *testing.T) {
		res, err := idempotencyResult(fmt.Errorf("%w: commit", mcptoken.ErrOutcomeUnknown))
		if err != nil || res == nil || !res.IsError || TokenCode(res) != OutcomeUnknown {
			t.Fatalf("sent %+v, %v; want a tool error result with ctokenCode 1028", res, err)
		}
		if d, ok := RetryAfter(res); !ok || d != time.Millisecond {
			t.Fatalf("RetryAfter = %v, %v; want the 1 ms floor of a hint the engine did not give", d, ok)
		}
	})
}

func BenchmarkIdempotentToolCall(b *testing.B) {
	for _, mode := range []string{"plain", "idempotent"} {
		b.Run(mode, func(b *testing.B) {
			p := &payTool{}
			s := payServer(b, p, replay.NewMemoryStore(1<<20), nil)
			if mode == "plain" {
				s = server.NewMCPServer("pay", "v0")
				s.AddTool(mcp.NewTool("pay", mcp.WithString("key"), mcp.WithNumber("amount")), p.handler)
			}
			cl := inProcess(b, s, "alice", nil)
			i := 0
			for b.Loop() {
				i++
				if _, err := payCall(cl, map[string]any{"key": fmt.Sprint("k", i), "amount": 5}, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func idempotencyRecordsTheFinalRound(t *testing.T) {
	idem, err := NewIdempotency(IdempotencyOptions{IdempotencyConfig: mcptoken.IdempotencyConfig{Keys: idemKeys, Store: replay.NewMemoryStore(100), KeyArgument: "key"}})
	if err != nil {
		t.Fatal(err)
	}
	var effects atomic.Int32
	s := server.NewMCPServer("deployer", "v0")
	s.AddTool(mcp.NewTool("pay", mcp.WithString("key", mcp.Required())), idem.Wrap(func(_ context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		if req.Params.RequestState == "" {
			return server.NewInputRequestBuilder("confirm").Elicit("ok", mcp.ElicitationParams{Message: "pay?", RequestedSchema: confirmSchema}).ToolResult(), nil
		}
		if !accepted(server.ElicitationResponse(req.Params.InputResponses, "ok")) {
			return mcp.NewToolResultText("cancelled"), nil
		}
		return mcp.NewToolResultText(fmt.Sprintf("paid (payment %d)", effects.Add(1))), nil
	}))
	e := &elicitor{answer: true}
	cl := inProcess(t, s, "alice", e)
	first, err := payCall(cl, map[string]any{"key": "k"}, nil) // the client answers the input request and retries
	if err != nil || text(first) != "paid (payment 1)" {
		t.Fatalf("%v, %q", err, text(first))
	}
	again, err := payCall(cl, map[string]any{"key": "k"}, nil) // a retry of the whole call
	b1, _ := json.Marshal(first)
	b2, _ := json.Marshal(again)
	if err != nil || !bytes.Equal(b1, b2) || effects.Load() != 1 || e.asked.Load() != 1 {
		t.Fatalf("%v; %s then %s; %d effects, asked %d times", err, b1, b2, effects.Load(), e.asked.Load())
	}
}

// idempotencyNoEffectInRoundTwoFreesTheRound: a tool with no effect in
// round two (1025) is not recorded as the round's result: the resend of
// round two, with the same state and answers, runs it again, without
// asking the user again, and acts once.
func idempotencyNoEffectInRoundTwoFreesTheRound(t *testing.T) {
	f := newFleet(t, 1, "s1", replay.NewMemoryStore(0))
	quiet := slog.New(slog.DiscardHandler)
	states, err := NewStates(f.codec, &StateOptions{Caller: ContextCaller, AnswerRetries: true, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	idem, err := NewIdempotency(IdempotencyOptions{IdempotencyConfig: mcptoken.IdempotencyConfig{Keys: idemKeys, Store: replay.NewMemoryStore(100), KeyFromMeta: true}, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	var asked, rounds2, deploys atomic.Int32
	deploy := func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		if req.Params.RequestState == "" {
			asked.Add(1)
			return server.NewInputRequestBuilder("confirm").Elicit("ok", mcp.ElicitationParams{Message: "deploy?", RequestedSchema: confirmSchema}).ToolResult(), nil
		}
		if rounds2.Add(1) == 1 {
			return nil, fmt.Errorf("%w: connection refused", mcptoken.ErrNoEffect)
		}
		return mcp.NewToolResultText(fmt.Sprintf("deploy %d", deploys.Add(1))), nil
	}
	s := server.NewMCPServer("deploy", "v0", SecureRequestState(states), server.WithToolCapabilities(false), server.WithElicitation())
	s.AddTool(mcp.NewTool("deploy"), idem.Wrap(deploy))
	call := func(params map[string]any) map[string]any {
		params["name"], params["arguments"] = "deploy", map[string]any{}
		params["_meta"] = map[string]any{mcptoken.MetaIdempotencyKey: "dep-1", mcp.MetaKeyProtocolVersion: "2026-07-28",
			mcp.MetaKeyClientInfo: map[string]any{"name": "c", "version": "v0"}, mcp.MetaKeyClientCapabilities: map[string]any{"elicitation": map[string]any{}}}
		req, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params})
		out, _ := json.Marshal(s.HandleMessage(WithCaller(context.Background(), "alice"), req))
		var resp struct {
			Result map[string]any `json:"result"`
		}
		if err := json.Unmarshal(out, &resp); err != nil || resp.Result == nil {
			t.Fatalf("response %s", out)
		}
		return resp.Result
	}
	round1 := call(map[string]any{})
	state, _ := round1["requestState"].(string)
	if state == "" {
		t.Fatalf("round one: %v", round1)
	}
	round2 := func() map[string]any {
		return call(map[string]any{"requestState": state, "inputResponses": map[string]any{"ok": map[string]any{"action": "accept", "content": map[string]any{"ok": true}}}})
	}
	first := round2()
	if meta, _ := first["_meta"].(map[string]any); meta == nil || meta[MetaTokenCode] != float64(InProgress) {
		t.Fatalf("round two: %v; want the tool's 1025", first)
	}
	for i := range 2 {
		res := round2()
		if b, _ := json.Marshal(res["content"]); !strings.Contains(string(b), "deploy 1") || deploys.Load() != 1 || asked.Load() != 1 {
			t.Fatalf("round two resent (%d): %v; %d deploys, asked %d times; want deploy 1, asked once", i, res, deploys.Load(), asked.Load())
		}
	}
}
