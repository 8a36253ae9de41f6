package ctokenmcpgo

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ctoken/ctoken/mcptoken"
	"github.com/ctoken/ctoken/replay"
	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
)

// restartable is mcp-go's streamable HTTP server, stateful (as go-sdk's
// is by default; mcp-go's default takes any well-formed session ID), of an
// idempotent deploy tool on a fixed 127.0.0.1 port, which a test stops and
// starts again: each start is a new MCPServer and Idempotency, as a
// restarted process would build, over the same store.
type restartable struct {
	t     *testing.T
	addr  string
	d     *deployTool
	store *replay.MemoryStore
	srv   *http.Server
	done  chan struct{} // closed as the first run's Wrap returns: its result is recorded
	once  sync.Once
}

func newRestartable(t *testing.T, d *deployTool) *restartable {
	r := &restartable{t: t, d: d, store: replay.NewMemoryStore(100), done: make(chan struct{})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r.addr = ln.Addr().String()
	r.serve(ln)
	return r
}

func (r *restartable) url() string { return "http://" + r.addr + "/mcp" }

func (r *restartable) serve(ln net.Listener) {
	idem, err := NewIdempotency(IdempotencyOptions{
		IdempotencyConfig: mcptoken.IdempotencyConfig{Keys: idemKeys, Store: r.store, KeyFromMeta: true, Lease: 5 * time.Second},
		Caller:            FixedCaller("alice"),
	})
	if err != nil {
		r.t.Fatal(err)
	}
	wrapped := idem.Wrap(r.d.handler)
	s := server.NewMCPServer("deployer", "v0", server.WithToolCapabilities(false))
	s.AddTool(mcp.NewTool("deploy", mcp.WithString("service")), func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		defer r.once.Do(func() { close(r.done) })
		return wrapped(ctx, req)
	})
	r.srv = &http.Server{Handler: server.NewStreamableHTTPServer(s, server.WithStateful(true))}
	go r.srv.Serve(ln)
	srv := r.srv
	r.t.Cleanup(func() { srv.Close() })
}

// stop closes the listener and every connection, as a process that exits.
func (r *restartable) stop() { r.srv.Close() }

// start serves again on the same port.
func (r *restartable) start() {
	ln, err := net.Listen("tcp", r.addr)
	if err != nil {
		r.t.Fatal(err)
	}
	r.serve(ln)
}

// sessionClient returns a client initialized on a session (protocol
// 2025-11-25) at url, and a Reconnect that initializes it again, as an
// application would write it.
func sessionClient(t *testing.T, url string) (*client.Client, func(context.Context) (*client.Client, error), *int) {
	t.Helper()
	tr, err := transport.NewStreamableHTTP(url, transport.WithHTTPLogger(slog.New(slog.DiscardHandler))) // its close meets a stopped server
	if err != nil {
		t.Fatal(err)
	}
	c := client.NewClient(tr)
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	init := mcp.InitializeRequest{}
	init.Params.ClientInfo = mcp.Implementation{Name: "client", Version: "v0"}
	init.Params.ProtocolVersion = legacyVersion
	if _, err := c.Initialize(context.Background(), init); err != nil {
		t.Fatal(err)
	}
	n := new(int)
	return c, func(ctx context.Context) (*client.Client, error) {
		if _, err := c.Initialize(ctx, init); err != nil {
			return nil, err
		}
		*n++
		return c, nil
	}, n
}

func TestCallToolReconnectsToARestartedServer(t *testing.T) {
	d := &deployTool{started: make(chan struct{}), gate: make(chan struct{})}
	r := newRestartable(t, d)
	c, reconnect, reconnects := sessionClient(t, r.url())
	if c.GetSessionId() == "" {
		t.Fatal("the client has no session: the server is not stateful")
	}

	type answer struct {
		res *mcp.CallToolResult
		err error
	}
	got := make(chan answer, 1)
	go func() {
		res, err := CallTool(context.Background(), c, deployRequest("api"), CallOptions{Reconnect: reconnect})
		got <- answer{res, err}
	}()
	// The tool acts; the server stops before it answers (the client's
	// attempts are refused meanwhile); the run completes and is recorded;
	// a new server on the same port, which knows no session, starts.
	waitFor(t, d.started, "the first run")
	r.stop()
	close(d.gate)
	waitFor(t, r.done, "the first run's record")
	r.start()

	var a answer
	select {
	case a = <-got:
	case <-time.After(failsafe):
		t.Fatal("CallTool did not return")
	}
	if a.err != nil {
		t.Fatalf("CallTool: %v", a.err)
	}
	if got := resultText(t, a.res); got != "deployed api (deploy 1)" || d.deploys.Load() != 1 || *reconnects < 1 {
		t.Fatalf("%q; %d deploys, %d reconnects", got, d.deploys.Load(), *reconnects)
	}
}

func TestCallToolWithoutReconnectEndsOnALostSession(t *testing.T) {
	d := &deployTool{}
	r := newRestartable(t, d)
	c, _, _ := sessionClient(t, r.url())
	r.stop()
	r.start()
	_, err := CallTool(context.Background(), c, deployRequest("api"), CallOptions{})
	if !errors.Is(err, transport.ErrSessionTerminated) || d.deploys.Load() != 0 {
		t.Fatalf("error %v; %d deploys", err, d.deploys.Load())
	}
}

func TestCallToolEndsOnAReconnectThatCannotSucceed(t *testing.T) {
	refusing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "no", http.StatusUnauthorized)
	}))
	t.Cleanup(refusing.Close)
	for name, c := range map[string]struct {
		reconnect func(context.Context) (*client.Client, error)
		want      string
	}{
		"no client and no error": {func(context.Context) (*client.Client, error) { return nil, nil }, "Reconnect returned no client"},
		"a 401": {func(ctx context.Context) (*client.Client, error) {
			rc, err := client.NewStreamableHttpClient(refusing.URL)
			if err != nil {
				return nil, err
			}
			init := mcp.InitializeRequest{}
			init.Params.ClientInfo = mcp.Implementation{Name: "client", Version: "v0"}
			init.Params.ProtocolVersion = legacyVersion
			if _, err := rc.Initialize(ctx, init); err != nil {
				return nil, err
			}
			return rc, nil
		}, "authorization required"},
	} {
		t.Run(name, func(t *testing.T) {
			d := &deployTool{}
			r := newRestartable(t, d)
			c0, _, _ := sessionClient(t, r.url())
			r.stop()
			r.start()
			calls := 0
			_, err := CallTool(context.Background(), c0, deployRequest("api"), CallOptions{Reconnect: func(ctx context.Context) (*client.Client, error) {
				calls++
				return c.reconnect(ctx)
			}})
			if err == nil || !strings.Contains(err.Error(), c.want) || calls != 1 || d.deploys.Load() != 0 {
				t.Fatalf("error %v; %d Reconnect calls, %d deploys", err, calls, d.deploys.Load())
			}
		})
	}
}

func TestCallToolRetriesAReconnectThatFails(t *testing.T) {
	d := &deployTool{}
	r := newRestartable(t, d)
	c, reconnect, _ := sessionClient(t, r.url())
	r.stop()
	r.start()
	calls := 0
	res, err := CallTool(context.Background(), c, deployRequest("api"), CallOptions{Reconnect: func(ctx context.Context) (*client.Client, error) {
		calls++
		if calls == 1 { // the server is not back yet
			return nil, transport.NewError(&net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")})
		}
		return reconnect(ctx)
	}})
	if err != nil {
		t.Fatal(err)
	}
	if got := resultText(t, res); got != "deployed api (deploy 1)" || calls != 2 || d.deploys.Load() != 1 {
		t.Fatalf("%q; %d Reconnect calls, %d deploys", got, calls, d.deploys.Load())
	}
}
