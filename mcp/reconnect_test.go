package ctokenmcp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ctoken/ctoken/mcptoken"
	"github.com/ctoken/ctoken/replay"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// restartable is go-sdk's default (stateful) streamable HTTP server of an
// idempotent deploy tool on a fixed 127.0.0.1 port, which a test stops and
// starts again: each start is a new mcp.Server and Idempotency, as a
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

func newRestartable(t *testing.T, d *deployTool, keyArg string) *restartable {
	r := &restartable{t: t, d: d, store: replay.NewMemoryStore(100), done: make(chan struct{})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r.addr = ln.Addr().String()
	r.serve(ln, keyArg)
	return r
}

func (r *restartable) url() string { return "http://" + r.addr }

func (r *restartable) serve(ln net.Listener, keyArg string) {
	s := mcp.NewServer(&mcp.Implementation{Name: "deployer", Version: "v0"}, nil)
	idem, err := NewIdempotency(IdempotencyOptions{
		IdempotencyConfig: mcptoken.IdempotencyConfig{Keys: idemKeys, Store: r.store, KeyFromMeta: true, KeyArgument: keyArg, Lease: 5 * time.Second},
		Caller:            FixedCaller("alice"),
	})
	if err != nil {
		r.t.Fatal(err)
	}
	wrapped := idem.Wrap(r.d.handler)
	s.AddTool(&mcp.Tool{Name: "deploy", InputSchema: deployInput}, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		defer r.once.Do(func() { close(r.done) })
		return wrapped(ctx, req)
	})
	r.srv = &http.Server{Handler: mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil)}
	go r.srv.Serve(ln)
	srv := r.srv
	r.t.Cleanup(func() { srv.Close() })
}

// stop closes the listener and every connection, as a process that exits.
func (r *restartable) stop() { r.srv.Close() }

// start serves again on the same port.
func (r *restartable) start(keyArg string) {
	ln, err := net.Listen("tcp", r.addr)
	if err != nil {
		r.t.Fatal(err)
	}
	r.serve(ln, keyArg)
}

// reconnecting returns a session on url and a Reconnect that replaces it
// with a new one on the same transport, as an application would write it.
func reconnecting(t *testing.T, url string) (*mcp.ClientSession, func(context.Context) (*mcp.ClientSession, error), *int) {
	t.Helper()
	return reconnectingVia(t, url, nil)
}

// reconnectingVia is reconnecting with hc as the transport's HTTP client
// (nil: the default).
func reconnectingVia(t *testing.T, url string, hc *http.Client) (*mcp.ClientSession, func(context.Context) (*mcp.ClientSession, error), *int) {
	t.Helper()
	c := mcp.NewClient(&mcp.Implementation{Name: "client", Version: "v0"}, nil)
	tr := &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: hc}
	cs, err := c.Connect(context.Background(), tr, nil)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	sessions := []*mcp.ClientSession{cs}
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		for _, s := range sessions {
			s.Close()
		}
	})
	n := new(int)
	return cs, func(ctx context.Context) (*mcp.ClientSession, error) {
		s, err := c.Connect(ctx, tr, nil)
		if err == nil {
			mu.Lock()
			sessions = append(sessions, s)
			*n++
			mu.Unlock()
		}
		return s, err
	}, n
}

func TestCallToolReconnectsToARestartedServer(t *testing.T) {
	d := &deployTool{started: make(chan struct{}), gate: make(chan struct{})}
	r := newRestartable(t, d, "")
	cs, reconnect, reconnects := reconnecting(t, r.url())
	if cs.ID() == "" {
		t.Fatal("the session has no ID: the server is not stateful")
	}

	type answer struct {
		res *mcp.CallToolResult
		err error
	}
	got := make(chan answer, 1)
	go func() {
		res, err := CallTool(context.Background(), cs, deployParams("api"), CallOptions{Reconnect: reconnect})
		got <- answer{res, err}
	}()
	// The tool acts; the server stops before it answers (the client's
	// attempts are refused meanwhile); the run completes and is recorded;
	// a new server on the same port, which knows no session, starts.
	waitFor(t, d.started, "the first run")
	r.stop()
	close(d.gate)
	waitFor(t, r.done, "the first run's record")
	r.start("")

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
	r := newRestartable(t, d, "")
	cs, _, _ := reconnecting(t, r.url())
	r.stop()
	r.start("")
	// An attempt meets the 404, or the connection its standalone stream's
	// 404 failed: the call ends (outcome unknown when an earlier attempt
	// met the old server's closed connection).
	_, err := CallTool(context.Background(), cs, deployParams("api"), CallOptions{})
	if !errors.Is(err, mcp.ErrSessionMissing) && !errors.Is(err, mcp.ErrConnectionClosed) || d.deploys.Load() != 0 {
		t.Fatalf("error %v; %d deploys", err, d.deploys.Load())
	}
}

func TestCallToolEndsOnAReconnectThatCannotSucceed(t *testing.T) {
	refusing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "no", http.StatusUnauthorized)
	}))
	t.Cleanup(refusing.Close)
	for name, c := range map[string]struct {
		reconnect func(context.Context) (*mcp.ClientSession, error)
		want      string
	}{
		"no session and no error": {func(context.Context) (*mcp.ClientSession, error) { return nil, nil }, "Reconnect returned no session"},
		"a 401": {func(ctx context.Context) (*mcp.ClientSession, error) {
			return mcp.NewClient(&mcp.Implementation{Name: "client", Version: "v0"}, nil).Connect(ctx, &mcp.StreamableClientTransport{Endpoint: refusing.URL}, nil)
		}, "Unauthorized"},
	} {
		t.Run(name, func(t *testing.T) {
			d := &deployTool{}
			r := newRestartable(t, d, "")
			cs, _, _ := reconnecting(t, r.url())
			r.stop()
			r.start("")
			calls := 0
			_, err := CallTool(context.Background(), cs, deployParams("api"), CallOptions{Reconnect: func(ctx context.Context) (*mcp.ClientSession, error) {
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
	r := newRestartable(t, d, "")
	cs, reconnect, _ := reconnecting(t, r.url())
	r.stop()
	r.start("")
	calls := 0
	res, err := CallTool(context.Background(), cs, deployParams("api"), CallOptions{Reconnect: func(ctx context.Context) (*mcp.ClientSession, error) {
		calls++
		if calls == 1 { // the server is not back yet
			return nil, fmt.Errorf("calling \"initialize\": %w: %w", &jsonrpc.Error{Code: codeRejected, Message: "rejected by transport"},
				&net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}) // as go-sdk v1.8.0 fails
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

// failedTrips is an http.RoundTripper that counts the round trips that
// failed (a refused connection among them) and signals each.
type failedTrips struct {
	failed chan struct{}
}

func (f *failedTrips) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := http.DefaultTransport.RoundTrip(r)
	if err != nil {
		select {
		case f.failed <- struct{}{}:
		default:
		}
	}
	return resp, err
}

// A stateful server that stops while the tool runs and stays down while
// the client's attempts fail (refused connections, a Reconnect that
// cannot connect) is ridden out within CallTool's default budget: the
// server restarted without the session is a reconnect, not an unknown
// outcome, and the call gets the first run's result.
func TestCallToolRidesOutAStatefulServerDownMidCall(t *testing.T) {
	d := &deployTool{started: make(chan struct{}), gate: make(chan struct{})}
	r := newRestartable(t, d, "")
	trips := &failedTrips{failed: make(chan struct{}, 1)}
	cs, reconnect, _ := reconnectingVia(t, r.url(), &http.Client{Transport: trips})

	type answer struct {
		res *mcp.CallToolResult
		err error
	}
	got := make(chan answer, 1)
	go func() {
		res, err := CallTool(context.Background(), cs, deployParams("api"), CallOptions{Reconnect: reconnect})
		got <- answer{res, err}
	}()
	waitFor(t, d.started, "the first run")
	r.stop()
	close(d.gate)
	waitFor(t, r.done, "the first run's record")
	// Down while three of the client's round trips fail.
	for i := range 3 {
		select {
		case <-trips.failed:
		case a := <-got:
			t.Fatalf("CallTool returned while the server was down (after %d failed trips): %v", i, a.err)
		case <-time.After(failsafe):
			t.Fatalf("no failed round trip %d while the server was down", i+1)
		}
	}
	r.start("")

	var a answer
	select {
	case a = <-got:
	case <-time.After(failsafe):
		t.Fatal("CallTool did not return")
	}
	if a.err != nil {
		t.Fatalf("CallTool: %v", a.err)
	}
	if got := resultText(t, a.res); got != "deployed api (deploy 1)" || d.deploys.Load() != 1 {
		t.Fatalf("%q; %d deploys", got, d.deploys.Load())
	}
}
