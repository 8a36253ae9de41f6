package drivertest

// Idempotent tools (ctokenmcp.Idempotency.Wrap, ctokenmcpgo.Idempotency.Wrap)
// served over streamable HTTP on 127.0.0.1 and driven by go-sdk's and
// mcp-go's own clients, on the memory store, Redis, PostgreSQL and SQLite
// (and PostgreSQL and SQLite in the transactional mode, where the tool's
// write goes through the store's TxFrom). The client's HTTP transport
// loses the first tools/call response after the server sent it; the
// client's retry gets the first result, and the tool's effect happened
// once.

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ctoken/ctoken"
	ctokenmcp "github.com/ctoken/ctoken/mcp"
	ctokenmcpgo "github.com/ctoken/ctoken/mcpgo"
	"github.com/ctoken/ctoken/mcptoken"
	"github.com/ctoken/ctoken/pgstore"
	"github.com/ctoken/ctoken/replay"
	"github.com/ctoken/ctoken/sqlitestore"
	mcpgoclient "github.com/mark3labs/mcp-go/client"
	mcpgotransport "github.com/mark3labs/mcp-go/client/transport"
	mcpgo "github.com/mark3labs/mcp-go/mcp"
	mcpgoserver "github.com/mark3labs/mcp-go/server"
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

// backend is one store under test and the tool's effect on it.
type backend struct {
	store         replay.Recorder
	transactional bool
	// effect makes the tool's effect once, in ctx (the store's
	// transaction in the transactional mode).
	effect func(ctx context.Context) error
	// effects counts the effects kept.
	effects func() int
}

// backends are the stores: memory, Redis, PostgreSQL and SQLite, and
// PostgreSQL and SQLite with the tool's write in the store's transaction.
var backends = []struct {
	name string
	make func(t testing.TB) backend
}{
	{"memory", func(t testing.TB) backend { return counting(replay.NewMemoryStore(1 << 16)) }},
	{"redis", func(t testing.TB) backend { return counting(redisStore(t)) }},
	{"postgres", func(t testing.TB) backend { return counting(pgStore(t, pgPool(t))) }},
	{"sqlite", func(t testing.TB) backend { return counting(sqliteStore(t, sqliteDB(t))) }},
	{"postgres transactional", func(t testing.TB) backend {
		pool := pgPool(t)
		b := make([]byte, 6)
		rand.Read(b)
		table := "mcp_payments_" + hex.EncodeToString(b)
		if _, err := pool.Exec(context.Background(), "create table "+table+" (amount int not null)"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { pool.Exec(context.Background(), "drop table "+table) })
		return backend{
			store: pgStore(t, pool), transactional: true,
			effect: func(ctx context.Context) error {
				tx, err := pgstore.TxFrom(ctx)
				if err == nil {
					_, err = tx.Exec(ctx, "insert into "+table+" values (5)")
				}
				return err
			},
			effects: func() int {
				var n int
				if err := pool.QueryRow(context.Background(), "select count(*) from "+table).Scan(&n); err != nil {
					t.Fatal(err)
				}
				return n
			},
		}
	}},
	{"sqlite transactional", func(t testing.TB) backend {
		db := sqliteDB(t)
		if _, err := db.Exec("CREATE TABLE payments (amount INTEGER NOT NULL)"); err != nil {
			t.Fatal(err)
		}
		return backend{
			store: sqliteStore(t, db), transactional: true,
			effect: func(ctx context.Context) error {
				tx, err := sqlitestore.TxFrom(ctx)
				if err == nil {
					_, err = tx.ExecContext(ctx, "INSERT INTO payments (amount) VALUES (5)")
				}
				return err
			},
			effects: func() int {
				var n int
				if err := db.QueryRow("SELECT count(*) FROM payments").Scan(&n); err != nil {
					t.Fatal(err)
				}
				return n
			},
		}
	}},
}

// counting is a backend whose effect is a counter.
func counting(store replay.Recorder) backend {
	var n atomic.Int32
	return backend{store: store, effect: func(context.Context) error { n.Add(1); return nil }, effects: func() int { return int(n.Load()) }}
}

// loseFirstToolsCall is an http.RoundTripper that lets the first
// tools/call POST reach the server, reads its whole response, and reports
// a broken connection instead.
type loseFirstToolsCall struct{ lost atomic.Bool }

func (l *loseFirstToolsCall) RoundTrip(r *http.Request) (*http.Response, error) {
	var body []byte
	if r.Body != nil {
		body, _ = io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
	}
	resp, err := http.DefaultTransport.RoundTrip(r)
	if err == nil && bytes.Contains(body, []byte(`"tools/call"`)) && l.lost.CompareAndSwap(false, true) {
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return nil, errors.New("connection reset after the request was served")
	}
	return resp, err
}

// userHeader names the caller in the tests (a stand-in for a bearer
// token's user).
const userHeader = "X-Test-User"

// options are the Idempotency options of a backend.
func options(b backend, wait time.Duration) mcptoken.IdempotencyConfig {
	return mcptoken.IdempotencyConfig{Keys: idemKeys, Store: b.store, KeyArgument: "key", KeyFromMeta: true, Transactional: b.transactional, Lease: 10 * time.Second, Wait: wait}
}

// gate holds the tool while a test makes a concurrent duplicate.
type gate struct {
	once    sync.Once
	started chan struct{}
	release chan struct{}
}

func newGate() *gate { return &gate{started: make(chan struct{}), release: make(chan struct{})} }

// hold is called by the tool: with a gate, the first call waits.
func (g *gate) hold() {
	if g == nil {
		return
	}
	first := false
	g.once.Do(func() { first = true; close(g.started) })
	if first {
		<-g.release
	}
}

// goSDKServer serves the pay tool of b, wrapped by ctokenmcp's
// Idempotency, over streamable HTTP, and returns its URL.
func goSDKServer(t testing.TB, b backend, wait time.Duration, g *gate) string {
	t.Helper()
	idem, err := ctokenmcp.NewIdempotency(ctokenmcp.IdempotencyOptions{
		IdempotencyConfig: options(b, wait),
		Caller: func(_ context.Context, req mcp.Request) (string, error) {
			if e := req.GetExtra(); e != nil && e.Header.Get(userHeader) != "" {
				return e.Header.Get(userHeader), nil
			}
			return "", ctokenmcp.ErrNoCaller
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int32
	s := mcp.NewServer(&mcp.Implementation{Name: "payer", Version: "v0"}, nil)
	s.AddTool(&mcp.Tool{Name: "pay", InputSchema: json.RawMessage(`{"type":"object","properties":{"key":{"type":"string"},"amount":{"type":"integer"}},"required":["key","amount"]}`)},
		idem.Wrap(func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			g.hold()
			if err := b.effect(ctx); err != nil {
				return nil, err
			}
			if bytes.Contains(req.Params.Arguments, []byte(`"amount":0`)) {
				return nil, errors.New("the tool failed after its effect")
			}
			n := runs.Add(1)
			return &mcp.CallToolResult{
				Content:           []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf("payment %d", n)}},
				StructuredContent: map[string]any{"payment": n, "at": time.Now().UnixNano()},
			}, nil
		}))
	srv := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, &mcp.StreamableHTTPOptions{Stateless: true}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// goSDKClient connects go-sdk's client to url as user, through rt.
func goSDKClient(t testing.TB, url, user string, rt http.RoundTripper) *mcp.ClientSession {
	t.Helper()
	hc := &http.Client{Transport: headerTransport{user: user, next: rt}}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "v0"}, nil).Connect(context.Background(),
		&mcp.StreamableClientTransport{Endpoint: url, HTTPClient: hc, MaxRetries: -1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// headerTransport names the user of every request.
type headerTransport struct {
	user string
	next http.RoundTripper
}

func (h headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set(userHeader, h.user)
	if h.next == nil {
		return http.DefaultTransport.RoundTrip(r)
	}
	return h.next.RoundTrip(r)
}

func goSDKPay(cs *mcp.ClientSession, key string, amount int) (*mcp.CallToolResult, error) {
	return cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "pay", Arguments: map[string]any{"key": key, "amount": amount}})
}

func TestGoSDKIdempotentToolOnEveryStore(t *testing.T) {
	for _, bk := range backends {
		t.Run(bk.name, func(t *testing.T) {
			b := bk.make(t)
			url := goSDKServer(t, b, 0, nil)
			alice := goSDKClient(t, url, "alice", &loseFirstToolsCall{})
			if _, err := goSDKPay(alice, "pay-1", 5); err == nil {
				t.Fatal("the first response was not lost")
			}
			first, err := goSDKPay(alice, "pay-1", 5)
			if err != nil {
				t.Fatal(err)
			}
			t.Run("a lost response's retry gets the first result", func(t *testing.T) {
				again, err := goSDKPay(alice, "pay-1", 5)
				b1, _ := json.Marshal(first)
				b2, _ := json.Marshal(again)
				if err != nil || !bytes.Equal(b1, b2) || !strings.Contains(string(b1), "payment 1") || b.effects() != 1 {
					t.Fatalf("%v; %s then %s; %d effects", err, b1, b2, b.effects())
				}
			})
			t.Run("a changed argument under the same key is refused", func(t *testing.T) {
				_, err := goSDKPay(alice, "pay-1", 6)
				var we *jsonrpc.Error
				if !errors.As(err, &we) || we.Code != jsonrpc.CodeInvalidParams || ctokenmcp.TokenErrorCode(err) != ctokenmcp.KeyReused || b.effects() != 1 {
					t.Fatalf("%v; %d effects", err, b.effects())
				}
			})
			t.Run("another caller's same key is its own", func(t *testing.T) {
				bob := goSDKClient(t, url, "bob", nil)
				res, err := goSDKPay(bob, "pay-1", 5)
				if err != nil || res.IsError || b.effects() != 2 {
					t.Fatalf("%v, %+v; %d effects", err, res, b.effects())
				}
			})
			if !b.transactional {
				return
			}
			t.Run("a tool failing after its write keeps neither the write nor a record", func(t *testing.T) {
				if _, err := goSDKPay(alice, "pay-2", 0); err == nil || b.effects() != 2 {
					t.Fatalf("the failing call: %v; %d effects, want the failure and 2", err, b.effects())
				}
				// Other arguments under the key: a kept record would
				// refuse them (KeyReused).
				if res, err := goSDKPay(alice, "pay-2", 5); err != nil || res.IsError || b.effects() != 3 {
					t.Fatalf("the released key: %v, %+v; %d effects, want 3", err, res, b.effects())
				}
			})
		})
	}
}

func TestGoSDKConcurrentDuplicateOnEveryStore(t *testing.T) {
	for _, bk := range backends {
		for _, wait := range []time.Duration{0, 5 * time.Second} {
			t.Run(fmt.Sprintf("%s/wait %v", bk.name, wait), func(t *testing.T) {
				b := bk.make(t)
				g := newGate()
				url := goSDKServer(t, b, wait, g)
				c1, c2 := goSDKClient(t, url, "alice", nil), goSDKClient(t, url, "alice", nil)
				var wg sync.WaitGroup
				var first *mcp.CallToolResult
				var firstErr error
				wg.Add(1)
				go func() {
					defer wg.Done()
					first, firstErr = goSDKPay(c1, "dup", 5)
				}()
				<-g.started
				if wait == 0 {
					_, err := goSDKPay(c2, "dup", 5)
					if d, ok := ctokenmcp.RetryAfter(err); ctokenmcp.TokenErrorCode(err) != ctokenmcp.InProgress || !ok || d <= 0 {
						t.Fatalf("%v; retry after %v", err, d)
					}
					close(g.release)
					wg.Wait()
				} else {
					time.AfterFunc(100*time.Millisecond, func() { close(g.release) })
					second, err := goSDKPay(c2, "dup", 5)
					wg.Wait()
					b1, _ := json.Marshal(first)
					b2, _ := json.Marshal(second)
					if err != nil || !bytes.Equal(b1, b2) {
						t.Fatalf("the waiting duplicate: %v, %s; first %s", err, b2, b1)
					}
				}
				if firstErr != nil || b.effects() != 1 {
					t.Fatalf("first: %v; %d effects", firstErr, b.effects())
				}
			})
		}
	}
}

// mcpGoServer serves the pay tool of b, wrapped by ctokenmcpgo's
// Idempotency, over mcp-go's streamable HTTP, and returns its endpoint.
func mcpGoServer(t testing.TB, b backend) string {
	t.Helper()
	idem, err := ctokenmcpgo.NewIdempotency(ctokenmcpgo.IdempotencyOptions{IdempotencyConfig: options(b, 0)})
	if err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int32
	s := mcpgoserver.NewMCPServer("payer", "v0")
	s.AddTool(mcpgo.NewTool("pay", mcpgo.WithString("key", mcpgo.Required()), mcpgo.WithNumber("amount", mcpgo.Required())),
		idem.Wrap(func(ctx context.Context, req mcpgo.CallToolRequest) (*mcpgo.CallToolResult, error) {
			if err := b.effect(ctx); err != nil {
				return nil, err
			}
			n := runs.Add(1)
			return mcpgo.NewToolResultStructured(map[string]any{"payment": n, "at": time.Now().UnixNano()}, fmt.Sprintf("payment %d", n)), nil
		}))
	h := mcpgoserver.NewStreamableHTTPServer(s, mcpgoserver.WithHTTPContextFunc(func(ctx context.Context, r *http.Request) context.Context {
		if u := r.Header.Get(userHeader); u != "" {
			return ctokenmcpgo.WithCaller(ctx, u)
		}
		return ctx
	}))
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL + "/mcp"
}

// mcpGoClient connects mcp-go's client to endpoint as user, through rt.
func mcpGoClient(t testing.TB, endpoint, user string, rt http.RoundTripper) *mcpgoclient.Client {
	t.Helper()
	tr, err := mcpgotransport.NewStreamableHTTP(endpoint,
		mcpgotransport.WithHTTPHeaders(map[string]string{userHeader: user}),
		mcpgotransport.WithHTTPBasicClient(&http.Client{Transport: rt}))
	if err != nil {
		t.Fatal(err)
	}
	c := mcpgoclient.NewClient(tr)
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	init := mcpgo.InitializeRequest{}
	init.Params.ClientInfo = mcpgo.Implementation{Name: "agent", Version: "v0"}
	if _, err := c.Initialize(context.Background(), init); err != nil {
		t.Fatal(err)
	}
	return c
}

func mcpGoPay(c *mcpgoclient.Client, key string, amount int) (*mcpgo.CallToolResult, error) {
	req := mcpgo.CallToolRequest{}
	req.Params.Name = "pay"
	req.Params.Arguments = map[string]any{"key": key, "amount": amount}
	return c.CallTool(context.Background(), req)
}

func TestMCPGoIdempotentToolOnEveryStore(t *testing.T) {
	for _, bk := range backends {
		t.Run(bk.name, func(t *testing.T) {
			b := bk.make(t)
			endpoint := mcpGoServer(t, b)
			alice := mcpGoClient(t, endpoint, "alice", &loseFirstToolsCall{})
			if _, err := mcpGoPay(alice, "pay-1", 5); err == nil {
				t.Fatal("the first response was not lost")
			}
			first, err := mcpGoPay(alice, "pay-1", 5)
			if err != nil {
				t.Fatal(err)
			}
			t.Run("a lost response's retry gets the first result", func(t *testing.T) {
				again, err := mcpGoPay(alice, "pay-1", 5)
				b1, _ := json.Marshal(first)
				b2, _ := json.Marshal(again)
				if err != nil || !bytes.Equal(b1, b2) || !strings.Contains(string(b1), "payment 1") || b.effects() != 1 {
					t.Fatalf("%v; %s then %s; %d effects", err, b1, b2, b.effects())
				}
			})
			t.Run("a changed argument under the same key is refused", func(t *testing.T) {
				res, err := mcpGoPay(alice, "pay-1", 6)
				if err != nil || ctokenmcpgo.TokenCode(res) != ctokenmcpgo.KeyReused || b.effects() != 1 {
					t.Fatalf("%v, %+v; %d effects", err, res, b.effects())
				}
			})
			t.Run("another caller's same key is its own", func(t *testing.T) {
				bob := mcpGoClient(t, endpoint, "bob", http.DefaultTransport)
				res, err := mcpGoPay(bob, "pay-1", 5)
				if err != nil || res.IsError || b.effects() != 2 {
					t.Fatalf("%v, %+v; %d effects", err, res, b.effects())
				}
			})
		})
	}
}
