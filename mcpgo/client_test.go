package ctokenmcpgo

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
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

// failsafe bounds every wait of these tests for an event that must come;
// none of them waits for time to pass.
const failsafe = 30 * time.Second

// legacyVersion is the protocol a client pinned before 2026-07-28 speaks:
// the initialize handshake and a session.
const legacyVersion = "2025-11-25"

// deployTool is a tool with an effect, counted: each run deploys once and
// says which deploy it was, so a replayed result names the run that made
// it. A call of service "" fails with an error (-32603), one of service
// "fail" is a tool error result. With notify, a run first sends a log
// message, so that mcp-go's server answers with an SSE stream. With
// rounds, a call without inputResponses asks the user first (a multi
// round-trip call whose second round deploys).
type deployTool struct {
	rounds  bool
	notify  bool
	deploys atomic.Int32
	asked   atomic.Int32
	started chan struct{} // when set, closed as the first deploy starts
	gate    chan struct{} // when set, every deploy waits for it to close
	mu      sync.Mutex
	keys    []any // the _meta key of every run, rounds included
}

func (d *deployTool) handler(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	var key any
	if req.Params.Meta != nil {
		key = req.Params.Meta.AdditionalFields[mcptoken.MetaIdempotencyKey]
	}
	d.mu.Lock()
	d.keys = append(d.keys, key)
	d.mu.Unlock()
	service := req.GetString("service", "")
	if service == "" {
		return nil, errors.New("no service")
	}
	if d.rounds && req.Params.RequestState == "" {
		d.asked.Add(1)
		return server.NewInputRequestBuilder("confirm").Elicit("ok", mcp.ElicitationParams{Message: "Deploy " + service + "?", RequestedSchema: confirmSchema}).ToolResult(), nil
	}
	if d.notify {
		if err := server.ServerFromContext(ctx).SendNotificationToClient(ctx, "notifications/message", map[string]any{"level": "info", "data": "deploying"}); err != nil {
			return nil, err
		}
	}
	n := d.deploys.Add(1)
	if d.started != nil && n == 1 {
		close(d.started)
	}
	if d.gate != nil {
		<-d.gate
	}
	if service == "fail" {
		return mcp.NewToolResultError("deploy failed"), nil
	}
	return mcp.NewToolResultText(fmt.Sprintf("deployed %s (deploy %d)", service, n)), nil
}

// seenKeys returns the _meta keys of the runs so far.
func (d *deployTool) seenKeys() []any {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]any(nil), d.keys...)
}

// idemDeployServer returns a server whose tool "deploy" is d, made idempotent
// (keys from _meta, caller alice) on a MemoryStore unless plain; wrap,
// when set, wraps the tool's handler outside the idempotency.
func idemDeployServer(t testing.TB, d *deployTool, plain bool, wrap func(server.ToolHandlerFunc) server.ToolHandlerFunc) *server.MCPServer {
	t.Helper()
	h := server.ToolHandlerFunc(d.handler)
	if !plain {
		idem, err := NewIdempotency(IdempotencyOptions{
			IdempotencyConfig: mcptoken.IdempotencyConfig{Keys: idemKeys, Store: replay.NewMemoryStore(100), KeyFromMeta: true, Lease: 5 * time.Second},
			Caller:            FixedCaller("alice"),
		})
		if err != nil {
			t.Fatal(err)
		}
		h = idem.Wrap(h)
	}
	if wrap != nil {
		h = wrap(h)
	}
	s := server.NewMCPServer("deployer", "v0", server.WithToolCapabilities(false), server.WithLogging())
	s.AddTool(mcp.NewTool("deploy", mcp.WithString("service")), h)
	return s
}

// dropMode is what a [dropper] does with one tools/call POST.
type dropMode int

const (
	passThrough  dropMode = iota
	dropBefore            // close the connection before the server sees the call
	dropAfter             // let the server answer, then close the connection without the response
	cutMidway             // let the server answer, send the headers and the response body up to its last event (SSE) or half of it (JSON), then close
	resetAfter            // let the server answer, then reset the connection (TCP RST) without the response
	cutThenReset          // as cutMidway, then reset the connection
	notFound              // answer 404 without the server seeing the call, as for a session it no longer has
)

// refusedWith is the dropMode of a proxy that answers status without
// passing the call on; ranThen, of one whose upstream ran the call and
// which then answers status (a 502 of an upstream that died).
func refusedWith(status int) dropMode { return dropMode(1000 + status) }
func ranThen(status int) dropMode     { return dropMode(2000 + status) }

// dropper is an http.Handler in front of a streamable HTTP server that
// loses the calls plan says to by hijacking and closing the connection,
// and keeps the responses it lost.
type dropper struct {
	next  http.Handler
	plan  func(n int) dropMode // n: the ordinal of the tools/call POST, from 1
	calls atomic.Int32
	mu    sync.Mutex
	lost  []string
}

func (d *dropper) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	mode := passThrough
	if r.Method == http.MethodPost && bytes.Contains(body, []byte(`"tools/call"`)) {
		n := int(d.calls.Add(1))
		if d.plan != nil {
			mode = d.plan(n)
		}
	}
	switch mode {
	case passThrough:
		d.next.ServeHTTP(w, r)
		return
	case notFound:
		http.Error(w, "session not found", http.StatusNotFound)
		return
	}
	switch {
	case mode >= 1000 && mode < 2000:
		http.Error(w, "refused by the proxy", int(mode)-1000)
		return
	case mode >= 2000:
		rec := httptest.NewRecorder()
		d.next.ServeHTTP(rec, r)
		d.mu.Lock()
		d.lost = append(d.lost, rec.Body.String())
		d.mu.Unlock()
		http.Error(w, "<html>upstream failed</html>", int(mode)-2000)
		return
	}
	rec := httptest.NewRecorder()
	if mode != dropBefore {
		d.next.ServeHTTP(rec, r)
		d.mu.Lock()
		d.lost = append(d.lost, rec.Body.String())
		d.mu.Unlock()
	}
	conn, bw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(err) // httptest.Server's connections can be hijacked
	}
	if mode == cutMidway || mode == cutThenReset {
		b, ct := rec.Body.Bytes(), rec.Header().Get("Content-Type")
		cut := len(b) / 2
		if strings.HasPrefix(ct, "text/event-stream") {
			cut = bytes.LastIndex(b, []byte("event:"))
		}
		fmt.Fprintf(bw, "HTTP/1.1 200 OK\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n", ct, len(b))
		bw.Write(b[:cut])
		bw.Flush()
	}
	if mode == resetAfter || mode == cutThenReset {
		conn.(*net.TCPConn).SetLinger(0)
	}
	conn.Close()
}

// lostResponses returns the bodies of the responses d lost after the
// server answered.
func (d *dropper) lostResponses() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.lost...)
}

// serveDropping serves s over mcp-go's streamable HTTP transport on
// 127.0.0.1 behind a dropper with plan, and returns its endpoint.
func serveDropping(t testing.TB, s *server.MCPServer, plan func(int) dropMode) (string, *dropper) {
	t.Helper()
	d := &dropper{next: server.NewStreamableHTTPServer(s), plan: plan}
	srv := httptest.NewServer(d)
	t.Cleanup(srv.Close)
	return srv.URL + "/mcp", d
}

// clientFor returns an mcp-go client connected over streamable HTTP to
// endpoint (through hc when not nil), initialized with opts.
func clientFor(t testing.TB, endpoint string, hc *http.Client, opts ...client.ClientOption) *client.Client {
	t.Helper()
	topts := []transport.StreamableHTTPCOption{transport.WithHTTPLogger(slog.New(slog.DiscardHandler))} // mcp-go logs the streams the tests cut
	if hc != nil {
		topts = append(topts, transport.WithHTTPBasicClient(hc))
	}
	tr, err := transport.NewStreamableHTTP(endpoint, topts...)
	if err != nil {
		t.Fatal(err)
	}
	c := client.NewClient(tr, opts...)
	ctx := context.Background()
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	init := mcp.InitializeRequest{}
	init.Params.ClientInfo = mcp.Implementation{Name: "client", Version: "v0"}
	if _, err := c.Initialize(ctx, init); err != nil {
		t.Fatal(err)
	}
	return c
}

func deployRequest(service string) mcp.CallToolRequest {
	req := mcp.CallToolRequest{}
	req.Params.Name = "deploy"
	req.Params.Arguments = map[string]any{"service": service}
	return req
}

// resultText returns the text of res, which must be one text content.
func resultText(t testing.TB, res *mcp.CallToolResult) string {
	t.Helper()
	if res == nil || len(res.Content) != 1 {
		t.Fatalf("result %+v", res)
	}
	tc, ok := res.Content[0].(mcp.TextContent)
	if !ok {
		t.Fatalf("content %T", res.Content[0])
	}
	return tc.Text
}

// wantOutcomeUnknown checks that err is ErrOutcomeUnknown carrying a key,
// never in its text, and returns the key.
func wantOutcomeUnknown(t testing.TB, err error) string {
	t.Helper()
	if !errors.Is(err, ErrOutcomeUnknown) {
		t.Fatalf("error %v does not match ErrOutcomeUnknown", err)
	}
	key, ok := RetryKey(err)
	if !ok || key == "" {
		t.Fatalf("RetryKey = %q, %v", key, ok)
	}
	if strings.Contains(err.Error(), key) || strings.Contains(fmt.Sprintf("%+v %#v", err, err), key) {
		t.Fatalf("the error shows its key: %v", err)
	}
	return key
}

// waitFor waits for ch to deliver or close, failing t after failsafe.
func waitFor[T any](t testing.TB, ch <-chan T, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(failsafe):
		t.Fatalf("%s did not happen within %v", what, failsafe)
	}
}

// once returns a plan that applies mode to the first tools/call only.
func once(mode dropMode) func(int) dropMode {
	return func(n int) dropMode {
		if n == 1 {
			return mode
		}
		return passThrough
	}
}

// protocols runs f with a client on the newest protocol (no session) and
// with one pinned to 2025-11-25 (a session of the stateful server).
func protocols(t *testing.T, f func(t *testing.T, opts ...client.ClientOption)) {
	t.Run("2026-07-28", func(t *testing.T) { f(t) })
	t.Run(legacyVersion, func(t *testing.T) { f(t, client.WithProtocolVersion(legacyVersion)) })
}

func TestCallTool(t *testing.T) {
	ctx := context.Background()

	// Once an attempt may have run the tool, no later error lets the
	// caller forget the key: every one is ErrOutcomeUnknown with the key,
	// and the call made again with it gets the first result.
	t.Run("a lost answer then an error no retry settles keeps the key", func(t *testing.T) {
		for _, status := range []int{400, 401, 403, 404, 409, 500, 502, 503, 504} {
			t.Run(fmt.Sprint(status), func(t *testing.T) {
				protocols(t, func(t *testing.T, opts ...client.ClientOption) {
					d := &deployTool{}
					var healed atomic.Bool
					url, dr := serveDropping(t, idemDeployServer(t, d, false, nil), func(n int) dropMode {
						switch {
						case healed.Load():
							return passThrough
						case n == 1:
							return dropAfter
						}
						return refusedWith(status)
					})
					_, err := CallTool(ctx, clientFor(t, url, nil, opts...), deployRequest("api"), CallOptions{MaxElapsed: 300 * time.Millisecond})
					key := wantOutcomeUnknown(t, err)
					healed.Store(true)
					res, err := CallTool(ctx, clientFor(t, url, nil, opts...), deployRequest("api"), CallOptions{Key: key})
					if err != nil {
						t.Fatal(err)
					}
					if got := resultText(t, res); got != "deployed api (deploy 1)" || d.deploys.Load() != 1 || len(dr.lostResponses()) != 1 {
						t.Fatalf("%q; %d deploys", got, d.deploys.Load())
					}
				})
			})
		}
	})

	t.Run("a proxy's 502 after its upstream ran the tool is retried", func(t *testing.T) {
		for _, status := range []int{502, 503, 504} {
			t.Run(fmt.Sprint(status), func(t *testing.T) {
				protocols(t, func(t *testing.T, opts ...client.ClientOption) {
					d := &deployTool{}
					url, dr := serveDropping(t, idemDeployServer(t, d, false, nil), once(ranThen(status)))
					res, err := CallTool(ctx, clientFor(t, url, nil, opts...), deployRequest("api"), CallOptions{})
					if err != nil {
						t.Fatal(err)
					}
					if got := resultText(t, res); got != "deployed api (deploy 1)" || d.deploys.Load() != 1 || dr.calls.Load() != 2 {
						t.Fatalf("%q; %d deploys in %d attempts", got, d.deploys.Load(), dr.calls.Load())
					}
				})
			})
		}
	})

	t.Run("a 4xx that no attempt before met is returned as it is", func(t *testing.T) {
		for _, status := range []int{400, 401, 403} {
			d := &deployTool{}
			url, _ := serveDropping(t, idemDeployServer(t, d, false, nil), func(int) dropMode { return refusedWith(status) })
			_, err := CallTool(ctx, clientFor(t, url, nil), deployRequest("api"), CallOptions{})
			if err == nil || errors.Is(err, ErrOutcomeUnknown) || d.deploys.Load() != 0 {
				t.Fatalf("%d: %v", status, err)
			}
			if _, ok := RetryKey(err); ok {
				t.Fatalf("%d: RetryKey reports a key for a call that never ran", status)
			}
		}
	})

	t.Run("a key reused after a lost answer keeps the key", func(t *testing.T) {
		// The first attempt ran under the key and its answer was lost;
		// the second is answered 1024 (as when the arguments the server
		// fingerprints differ): not the call's result.
		d := &deployTool{}
		var calls atomic.Int32
		url, _ := serveDropping(t, idemDeployServer(t, d, false, func(h server.ToolHandlerFunc) server.ToolHandlerFunc {
			return func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				if calls.Add(1) == 2 {
					return refusalResult(map[string]any{MetaTokenCode: KeyReused}), nil
				}
				return h(ctx, req)
			}
		}), once(dropAfter))
		_, err := CallTool(ctx, clientFor(t, url, nil), deployRequest("api"), CallOptions{})
		wantOutcomeUnknown(t, err)
		if d.deploys.Load() != 1 {
			t.Fatalf("%d deploys", d.deploys.Load())
		}
	})

	t.Run("a connection dropped before the tool ran is retried and the tool runs once", func(t *testing.T) {
		protocols(t, func(t *testing.T, opts ...client.ClientOption) {
			d := &deployTool{}
			url, dr := serveDropping(t, idemDeployServer(t, d, false, nil), once(dropBefore))
			res, err := CallTool(ctx, clientFor(t, url, nil, opts...), deployRequest("api"), CallOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if got := resultText(t, res); got != "deployed api (deploy 1)" || d.deploys.Load() != 1 || dr.calls.Load() != 2 {
				t.Fatalf("%q; %d deploys in %d attempts", got, d.deploys.Load(), dr.calls.Load())
			}
		})
	})

	t.Run("a response lost after the tool ran is retried and gets the first result", func(t *testing.T) {
		for _, mode := range []struct {
			name string
			mode dropMode
		}{{"closed", dropAfter}, {"reset", resetAfter}, {"cut midway", cutMidway}} {
			for _, sse := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s, SSE %v", mode.name, sse), func(t *testing.T) {
					protocols(t, func(t *testing.T, opts ...client.ClientOption) {
						d := &deployTool{notify: sse}
						url, dr := serveDropping(t, idemDeployServer(t, d, false, nil), once(mode.mode))
						res, err := CallTool(ctx, clientFor(t, url, nil, opts...), deployRequest("api"), CallOptions{})
						if err != nil {
							t.Fatal(err)
						}
						got, lost := resultText(t, res), dr.lostResponses()
						if got != "deployed api (deploy 1)" || len(lost) != 1 || !strings.Contains(lost[0], got) || strings.Contains(lost[0], "event:") != sse ||
							d.deploys.Load() != 1 || dr.calls.Load() != 2 {
							t.Fatalf("%q, lost %q; %d deploys in %d attempts", got, lost, d.deploys.Load(), dr.calls.Load())
						}
					})
				})
			}
		}
	})

	t.Run("a duplicate while the first runs waits out 1025 and gets the first result", func(t *testing.T) {
		d := &deployTool{started: make(chan struct{}), gate: make(chan struct{})}
		inProgress := make(chan struct{}, 1)
		s := idemDeployServer(t, d, false, func(h server.ToolHandlerFunc) server.ToolHandlerFunc {
			return func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				res, err := h(ctx, req)
				if TokenCode(res) == InProgress {
					select {
					case inProgress <- struct{}{}:
					default:
					}
				}
				return res, err
			}
		})
		url, dr := serveDropping(t, s, nil)
		c := clientFor(t, url, nil)
		release := sync.OnceFunc(func() { close(d.gate) })
		t.Cleanup(release) // before the client and the server close, even when the test fails
		opts := CallOptions{Key: "deploy-api-1"}
		type answer struct {
			res *mcp.CallToolResult
			err error
		}
		first, second := make(chan answer, 1), make(chan answer, 1)
		go func() {
			res, err := CallTool(ctx, c, deployRequest("api"), opts)
			first <- answer{res, err}
		}()
		waitFor(t, d.started, "the first deploy")
		go func() {
			res, err := CallTool(ctx, c, deployRequest("api"), opts)
			second <- answer{res, err}
		}()
		waitFor(t, inProgress, "the duplicate's 1025")
		release()
		a, b := <-first, <-second
		if a.err != nil || b.err != nil {
			t.Fatal(a.err, b.err)
		}
		if ta, tb := resultText(t, a.res), resultText(t, b.res); ta != "deployed api (deploy 1)" || tb != ta || d.deploys.Load() != 1 || dr.calls.Load() < 3 {
			t.Fatalf("%q and %q; %d deploys in %d attempts", ta, tb, d.deploys.Load(), dr.calls.Load())
		}
	})

	t.Run("a budget spent on 1025 is ErrOutcomeUnknown, never the refusal as a result", func(t *testing.T) {
		d := &deployTool{started: make(chan struct{}), gate: make(chan struct{})}
		url, dr := serveDropping(t, idemDeployServer(t, d, false, nil), nil)
		c := clientFor(t, url, nil)
		release := sync.OnceFunc(func() { close(d.gate) })
		t.Cleanup(release)
		done := make(chan error, 1)
		go func() {
			_, err := CallTool(ctx, c, deployRequest("api"), CallOptions{Key: "deploy-api-2"})
			done <- err
		}()
		waitFor(t, d.started, "the first deploy")
		res, err := CallTool(ctx, c, deployRequest("api"), CallOptions{Key: "deploy-api-2", MaxAttempts: 2})
		key := wantOutcomeUnknown(t, err)
		if res != nil || key != "deploy-api-2" || !errors.Is(err, mcptoken.ErrInProgress) || errors.Is(err, mcptoken.ErrOutcomeUnknown) ||
			!strings.Contains(err.Error(), "(2 attempts; no attempt left): ctokenmcpgo: tool error result: a call with this idempotency key is in progress (ctokenCode 1025)") {
			t.Fatalf("%+v, %v", res, err)
		}
		release()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		res, err = CallTool(ctx, c, deployRequest("api"), CallOptions{Key: key})
		if err != nil || resultText(t, res) != "deployed api (deploy 1)" || d.deploys.Load() != 1 || dr.calls.Load() != 4 {
			t.Fatalf("%v; %d deploys in %d attempts", err, d.deploys.Load(), dr.calls.Load())
		}
	})

	t.Run("a budget spent on lost responses is ErrOutcomeUnknown with the key, which gets the first result later", func(t *testing.T) {
		d := &deployTool{}
		var lose atomic.Bool
		lose.Store(true)
		url, dr := serveDropping(t, idemDeployServer(t, d, false, nil), func(int) dropMode {
			if lose.Load() {
				return dropAfter
			}
			return passThrough
		})
		c := clientFor(t, url, nil)
		_, err := CallTool(ctx, c, deployRequest("api"), CallOptions{MaxAttempts: 3})
		key := wantOutcomeUnknown(t, err)
		if !strings.Contains(err.Error(), "3 attempts; no attempt left") || dr.calls.Load() != 3 || d.deploys.Load() != 1 {
			t.Fatalf("%v; %d deploys in %d attempts", err, d.deploys.Load(), dr.calls.Load())
		}
		var te *transport.Error
		if !errors.As(err, &te) || !errors.Is(err, io.EOF) {
			t.Fatalf("the last attempt's error is not kept: %v", err)
		}
		_, err = CallTool(ctx, c, deployRequest("api"), CallOptions{Key: key, MaxElapsed: time.Nanosecond})
		if wantOutcomeUnknown(t, err) != key || !strings.Contains(err.Error(), "1 attempts; no time left") || dr.calls.Load() != 4 {
			t.Fatalf("%v after %d attempts", err, dr.calls.Load())
		}
		lose.Store(false)
		res, err := CallTool(ctx, c, deployRequest("api"), CallOptions{Key: key})
		if err != nil {
			t.Fatal(err)
		}
		if got := resultText(t, res); got != "deployed api (deploy 1)" || !strings.Contains(dr.lostResponses()[0], got) || d.deploys.Load() != 1 {
			t.Fatalf("%q; %d deploys", got, d.deploys.Load())
		}
	})

	t.Run("a refusal that does not say retry is returned after one attempt", func(t *testing.T) {
		d := &deployTool{}
		url, dr := serveDropping(t, idemDeployServer(t, d, false, nil), nil)
		c := clientFor(t, url, nil)
		if _, err := CallTool(ctx, c, deployRequest("api"), CallOptions{Key: "k1"}); err != nil {
			t.Fatal(err)
		}
		res, err := CallTool(ctx, c, deployRequest("web"), CallOptions{Key: "k1"})
		if err != nil || TokenCode(res) != KeyReused {
			t.Fatalf("key reused: %+v, %v", res, err)
		}
		// mcp-go sends a handler's error as -32603; Wrap ends its text
		// with 1030, which says it is the tool's recorded failure.
		_, err = CallTool(ctx, c, deployRequest(""), CallOptions{})
		if !errors.Is(err, mcp.ErrInternalError) || !strings.HasSuffix(err.Error(), "internal error: no service (ctokenCode 1030)") ||
			!errors.Is(err, mcptoken.ErrToolFailed) || errors.Is(err, ErrOutcomeUnknown) {
			t.Fatalf("handler error: %v; want the recorded failure", err)
		}
		res, err = CallTool(ctx, c, deployRequest("fail"), CallOptions{})
		if err != nil || !res.IsError || resultText(t, res) != "deploy failed" {
			t.Fatalf("tool error result: %+v, %v", res, err)
		}
		if dr.calls.Load() != 4 || d.deploys.Load() != 2 {
			t.Fatalf("%d deploys in %d attempts, want 2 in 4", d.deploys.Load(), dr.calls.Load())
		}
	})

	t.Run("the caller's key used again replays and another key is its own call", func(t *testing.T) {
		d := &deployTool{}
		url, dr := serveDropping(t, idemDeployServer(t, d, false, nil), nil)
		c := clientFor(t, url, nil)
		var got []string
		for _, key := range []string{"deploy-7", "deploy-7", "deploy-8", "", ""} {
			res, err := CallTool(ctx, c, deployRequest("api"), CallOptions{Key: key})
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, resultText(t, res))
		}
		want := "deployed api (deploy 1);deployed api (deploy 1);deployed api (deploy 2);deployed api (deploy 3);deployed api (deploy 4)"
		if strings.Join(got, ";") != want || dr.calls.Load() != 5 {
			t.Fatalf("%q in %d attempts", got, dr.calls.Load())
		}
		keys := d.seenKeys() // the replay did not run the tool
		if len(keys) != 4 || keys[0] != "deploy-7" || keys[1] != "deploy-8" || keys[2] == keys[3] {
			t.Fatalf("keys seen %q", keys)
		}
		for _, k := range keys[2:] {
			if s, _ := k.(string); len(s) != 22 || strings.Trim(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_") != "" {
				t.Fatalf("fresh key %q is not 128 bits of base64url", k)
			}
		}
	})

	t.Run("a server without ctoken runs the tool once per CallTool", func(t *testing.T) {
		d := &deployTool{}
		url, dr := serveDropping(t, idemDeployServer(t, d, true, nil), nil)
		c := clientFor(t, url, nil)
		for i := 1; i <= 2; i++ {
			res, err := CallTool(ctx, c, deployRequest("api"), CallOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if got := resultText(t, res); got != fmt.Sprintf("deployed api (deploy %d)", i) {
				t.Fatalf("call %d: %q", i, got)
			}
		}
		if d.deploys.Load() != 2 || dr.calls.Load() != 2 {
			t.Fatalf("%d deploys in %d attempts", d.deploys.Load(), dr.calls.Load())
		}
	})

	t.Run("the caller's request is not changed and its _meta is sent", func(t *testing.T) {
		d := &deployTool{}
		var sent *mcp.Meta
		url, _ := serveDropping(t, idemDeployServer(t, d, false, func(h server.ToolHandlerFunc) server.ToolHandlerFunc {
			return func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				sent = req.Params.Meta
				return h(ctx, req)
			}
		}), nil)
		c := clientFor(t, url, nil)
		req := deployRequest("api")
		req.Params.Meta = &mcp.Meta{ProgressToken: "p1", AdditionalFields: map[string]any{"app/trace": "t1"}}
		if _, err := CallTool(ctx, c, req, CallOptions{Key: "k-meta"}); err != nil {
			t.Fatal(err)
		}
		if len(req.Params.Meta.AdditionalFields) != 1 || req.Params.Meta.AdditionalFields["app/trace"] != "t1" || req.Params.Meta.ProgressToken != "p1" ||
			req.GetArguments()["service"] != "api" || len(req.GetArguments()) != 1 {
			t.Fatalf("request changed: %+v", req.Params)
		}
		if sent == nil || sent.ProgressToken != "p1" || sent.AdditionalFields["app/trace"] != "t1" || sent.AdditionalFields[mcptoken.MetaIdempotencyKey] != "k-meta" {
			t.Fatalf("sent _meta %+v", sent)
		}
		// The same key in _meta and in opts is one key.
		req.Params.Meta.AdditionalFields[mcptoken.MetaIdempotencyKey] = "k-meta"
		res, err := CallTool(ctx, c, req, CallOptions{Key: "k-meta"})
		if err != nil || resultText(t, res) != "deployed api (deploy 1)" || d.deploys.Load() != 1 {
			t.Fatalf("%v; %d deploys", err, d.deploys.Load())
		}
	})

	t.Run("a two-round call mcp-go drives whose second answer is lost deploys once and gets the first result", func(t *testing.T) {
		d := &deployTool{rounds: true}
		url, dr := serveDropping(t, idemDeployServer(t, d, false, nil), func(n int) dropMode {
			if n == 2 {
				return dropAfter // the answer to round two
			}
			return passThrough
		})
		e := &elicitor{answer: true}
		res, err := CallTool(ctx, clientFor(t, url, nil, client.WithElicitationHandler(e)), deployRequest("api"), CallOptions{})
		if err != nil {
			t.Fatal(err)
		}
		got, lost := resultText(t, res), dr.lostResponses()
		if got != "deployed api (deploy 1)" || len(lost) != 1 || !strings.Contains(lost[0], got) || d.deploys.Load() != 1 {
			t.Fatalf("%q, lost %q; %d deploys", got, lost, d.deploys.Load())
		}
		// Round one, round two (lost), then the retry's round one,
		// answered with the recorded result of round two: the user was
		// asked once, and mcp-go carried the key into round two.
		keys := d.seenKeys()
		if dr.calls.Load() != 3 || d.asked.Load() != 1 || e.asked.Load() != 1 || len(keys) != 2 || keys[0] == nil || keys[1] != keys[0] {
			t.Fatalf("%d POSTs, asked %d, elicited %d, keys %q", dr.calls.Load(), d.asked.Load(), e.asked.Load(), keys)
		}
	})

	t.Run("an unreachable server is not ErrOutcomeUnknown", func(t *testing.T) {
		d := &deployTool{}
		url, dr := serveDropping(t, idemDeployServer(t, d, false, nil), nil)
		var refuse atomic.Bool
		rt := &http.Transport{DisableKeepAlives: true, DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if refuse.Load() {
				return nil, &net.OpError{Op: "dial", Net: network, Err: syscall.ECONNREFUSED}
			}
			return (&net.Dialer{}).DialContext(ctx, network, addr)
		}}
		c := clientFor(t, url, &http.Client{Transport: rt})
		refuse.Store(true)
		_, err := CallTool(ctx, c, deployRequest("api"), CallOptions{MaxAttempts: 2})
		if err == nil || errors.Is(err, ErrOutcomeUnknown) || !errors.Is(err, syscall.ECONNREFUSED) || !strings.Contains(err.Error(), "not delivered (2 attempts") {
			t.Fatalf("error %v", err)
		}
		if _, ok := RetryKey(err); ok || dr.calls.Load() != 0 {
			t.Fatalf("RetryKey answered; %d attempts reached the server", dr.calls.Load())
		}
	})

	t.Run("a session the server ended takes no further attempt", func(t *testing.T) {
		d := &deployTool{}
		url, dr := serveDropping(t, idemDeployServer(t, d, false, nil), func(n int) dropMode {
			return [...]dropMode{dropAfter, notFound, passThrough}[min(n, 3)-1]
		})
		c := clientFor(t, url, nil, client.WithProtocolVersion(legacyVersion))
		_, err := CallTool(ctx, c, deployRequest("api"), CallOptions{})
		wantOutcomeUnknown(t, err) // the first attempt's answer was lost
		if !errors.Is(err, transport.ErrSessionTerminated) || !strings.Contains(err.Error(), "(2 attempts; the session closed)") || dr.calls.Load() != 2 || d.deploys.Load() != 1 {
			t.Fatalf("%v; %d deploys in %d attempts", err, d.deploys.Load(), dr.calls.Load())
		}
		_, err = CallTool(ctx, c, deployRequest("api"), CallOptions{})
		if !errors.Is(err, transport.ErrSessionTerminated) || errors.Is(err, ErrOutcomeUnknown) || !strings.Contains(err.Error(), "not delivered (1 attempts; the session closed)") || dr.calls.Load() != 2 {
			t.Fatalf("%v after %d attempts", err, dr.calls.Load())
		}
	})

	t.Run("a client closed during the call is ErrOutcomeUnknown", func(t *testing.T) {
		d := &deployTool{started: make(chan struct{}), gate: make(chan struct{})}
		url, dr := serveDropping(t, idemDeployServer(t, d, false, nil), nil)
		c := clientFor(t, url, nil)
		t.Cleanup(sync.OnceFunc(func() { close(d.gate) }))
		done := make(chan error, 1)
		go func() {
			_, err := CallTool(ctx, c, deployRequest("api"), CallOptions{})
			done <- err
		}()
		waitFor(t, d.started, "the deploy")
		c.Close()
		select {
		case err := <-done:
			wantOutcomeUnknown(t, err)
			if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "(1 attempts; the session closed)") || dr.calls.Load() != 1 {
				t.Fatalf("%v after %d attempts", err, dr.calls.Load())
			}
		case <-time.After(failsafe):
			t.Fatal("CallTool did not return after its client closed")
		}
	})
	t.Run("only the refusals that say retry are retried", callToolRetriesOnlyTheRefusalsThatSayRetry)
	t.Run("it stops waiting when the context ends", callToolStopsWaitingWhenTheContextEnds)
	t.Run("it refuses before sending", callToolRefusesBeforeSending)
}

// refusingServer returns a server whose tool "deploy" answers its first
// refuse calls with res and err, and the call after them with the result
// "done"; calls counts the calls.
func refusingServer(refuse int32, res *mcp.CallToolResult, err error, calls *atomic.Int32) *server.MCPServer {
	s := server.NewMCPServer("refusing", "v0", server.WithToolCapabilities(false))
	s.AddTool(mcp.NewTool("deploy", mcp.WithString("service")), func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		if calls.Add(1) <= refuse {
			return res, err
		}
		return mcp.NewToolResultText("done"), nil
	})
	return s
}

// refusalResult returns a tool error result with _meta meta.
func refusalResult(meta map[string]any) *mcp.CallToolResult {
	res := mcp.NewToolResultError("refused")
	res.Meta = mcp.NewMetaFromMap(meta)
	return res
}

func callToolRetriesOnlyTheRefusalsThatSayRetry(t *testing.T) {
	busy := mcptoken.RefuseState(mcptoken.ErrStateBusy)
	busy.RetryAfter = time.Millisecond
	cases := []struct {
		name  string
		res   *mcp.CallToolResult
		err   error
		retry bool
	}{
		{"1025 in progress", refusalResult(map[string]any{MetaTokenCode: InProgress, MetaRetryAfterMs: 1}), nil, true},
		{"1025 without a hint", refusalResult(map[string]any{MetaTokenCode: InProgress}), nil, true},
		{"1028 outcome unknown", refusalResult(map[string]any{MetaTokenCode: OutcomeUnknown, MetaRetryAfterMs: 1}), nil, true},
		{"1027 request state busy", nil, newRejection(busy), true},
		{"idempotency store unavailable", nil, ErrIdempotencyStore, true},
		{"1024 key reused", refusalResult(map[string]any{MetaTokenCode: KeyReused}), nil, false},
		{"a tool error result", mcp.NewToolResultError("deploy failed"), nil, false},
		{"1025 in a result that is not an error", &mcp.CallToolResult{Result: mcp.Result{Meta: mcp.NewMetaFromMap(map[string]any{MetaTokenCode: InProgress})}, Content: []mcp.Content{mcp.NewTextContent("ok")}}, nil, false},
		{"1029 of an interrupted round", nil, roundInterrupted, false},
		{"1026 request state used", nil, stateUsed, false},
		{"request state store unavailable", nil, ErrStoreUnavailable, false},
		{"no caller", nil, ErrNoCaller, false},
		{"another error", nil, errors.New("ctokenmcpgo: idempotency store unavailable"), false},
		{"a tool that failed after it began", nil, errors.New("deploy failed"), false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var calls atomic.Int32
			p := inProcess(t, refusingServer(1, c.res, c.err, &calls), "alice", nil)
			res, err := CallTool(p.ctx, p.c, deployRequest("api"), CallOptions{})
			switch {
			case c.retry:
				if err != nil || resultText(t, res) != "done" || calls.Load() != 2 {
					t.Fatalf("%v after %d calls", err, calls.Load())
				}
			case c.err != nil && !strings.Contains(c.err.Error(), "ctokenCode") && c.err != ErrNoCaller && c.err != ErrStoreUnavailable:
				// A -32603 that is no refusal of ctoken's: the tool may
				// have run.
				if err == nil || !strings.HasSuffix(err.Error(), "internal error: "+c.err.Error()) || calls.Load() != 1 {
					t.Fatalf("%v after %d calls", err, calls.Load())
				}
				wantOutcomeUnknown(t, err)
			case c.err != nil:
				if err == nil || err.Error() != "internal error: "+c.err.Error() || errors.Is(err, ErrOutcomeUnknown) || calls.Load() != 1 {
					t.Fatalf("%v after %d calls", err, calls.Load())
				}
			default:
				if err != nil || resultText(t, res) != resultText(t, c.res) || calls.Load() != 1 {
					t.Fatalf("%+v, %v after %d calls", res, err, calls.Load())
				}
			}
		})
	}
	// 1028 (the tool ran, its commit's outcome unknown), then 1026 (a
	// round two's state, used by the first attempt) or 1024 (the key,
	// taken with other arguments): never a plain error, never a result.
	for _, second := range []struct {
		name string
		res  *mcp.CallToolResult
		err  error
	}{{"1026", nil, stateUsed}, {"1024", refusalResult(map[string]any{MetaTokenCode: KeyReused}), nil}} {
		t.Run("1028 then "+second.name+" keeps the key", func(t *testing.T) {
			var calls atomic.Int32
			s := server.NewMCPServer("refusing", "v0", server.WithToolCapabilities(false))
			s.AddTool(mcp.NewTool("deploy", mcp.WithString("service")), func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				if calls.Add(1) == 1 {
					return refusalResult(map[string]any{MetaTokenCode: OutcomeUnknown, MetaRetryAfterMs: 1}), nil
				}
				return second.res, second.err
			})
			p := inProcess(t, s, "alice", nil)
			res, err := CallTool(p.ctx, p.c, deployRequest("api"), CallOptions{})
			if res != nil || calls.Load() != 2 {
				t.Fatalf("%+v, %v after %d calls", res, err, calls.Load())
			}
			wantOutcomeUnknown(t, err)
		})
	}
	for _, c := range []struct {
		code int
		is   error
	}{{InProgress, mcptoken.ErrInProgress}, {OutcomeUnknown, mcptoken.ErrOutcomeUnknown}} {
		t.Run(fmt.Sprintf("%d to the end is ErrOutcomeUnknown and no result", c.code), func(t *testing.T) {
			var calls atomic.Int32
			p := inProcess(t, refusingServer(100, refusalResult(map[string]any{MetaTokenCode: c.code, MetaRetryAfterMs: 1}), nil, &calls), "alice", nil)
			res, err := CallTool(p.ctx, p.c, deployRequest("api"), CallOptions{MaxAttempts: 4})
			wantOutcomeUnknown(t, err)
			if res != nil || !errors.Is(err, c.is) || !strings.HasSuffix(err.Error(), fmt.Sprintf("(ctokenCode %d)", c.code)) || calls.Load() != 4 {
				t.Fatalf("%+v, %v after %d calls", res, err, calls.Load())
			}
		})
	}
}

// answered is a client transport that reports on its channel each
// tools/call whose answer it has.
type answered struct {
	transport.Interface
	ch chan struct{}
}

func (a *answered) SendRequest(ctx context.Context, req transport.JSONRPCRequest) (*transport.JSONRPCResponse, error) {
	resp, err := a.Interface.SendRequest(ctx, req)
	if req.Method == "tools/call" {
		a.ch <- struct{}{}
	}
	return resp, err
}

func callToolStopsWaitingWhenTheContextEnds(t *testing.T) {
	var calls atomic.Int32
	s := refusingServer(100, refusalResult(map[string]any{MetaTokenCode: InProgress, MetaRetryAfterMs: 60000}), nil, &calls)
	tr := &answered{Interface: transport.NewInProcessTransport(s), ch: make(chan struct{}, 1)}
	p := start(t, tr, WithCaller(context.Background(), "alice"), nil)
	ctx, cancel := context.WithCancel(p.ctx)
	done := make(chan error, 1)
	go func() {
		_, err := CallTool(ctx, p.c, deployRequest("api"), CallOptions{})
		done <- err
	}()
	waitFor(t, tr.ch, "the first attempt")
	cancel()
	select {
	case err := <-done:
		wantOutcomeUnknown(t, err)
		if !errors.Is(err, context.Canceled) || !errors.Is(err, mcptoken.ErrInProgress) || calls.Load() != 1 {
			t.Fatalf("%v after %d calls", err, calls.Load())
		}
	case <-time.After(failsafe):
		t.Fatal("CallTool kept waiting after its context ended")
	}
	if _, err := CallTool(ctx, p.c, deployRequest("api"), CallOptions{}); !errors.Is(err, context.Canceled) || errors.Is(err, ErrOutcomeUnknown) || calls.Load() != 1 {
		t.Fatalf("a call with an ended context: %v, %d calls", err, calls.Load())
	}
}

func callToolRefusesBeforeSending(t *testing.T) {
	var calls atomic.Int32
	p := inProcess(t, refusingServer(0, nil, nil, &calls), "alice", nil)
	withMeta := func(v any) mcp.CallToolRequest {
		req := deployRequest("api")
		req.Params.Meta = mcp.NewMetaFromMap(map[string]any{mcptoken.MetaIdempotencyKey: v})
		return req
	}
	cases := []struct {
		name string
		c    *client.Client
		req  mcp.CallToolRequest
		opts CallOptions
		want error
	}{
		{"a key with a space", p.c, deployRequest("api"), CallOptions{Key: "zq 7x"}, mcptoken.ErrIdempotencyKey},
		{"a quoted key", p.c, deployRequest("api"), CallOptions{Key: `"zq7x"`}, mcptoken.ErrIdempotencyKey},
		{"a key with a comma", p.c, deployRequest("api"), CallOptions{Key: "zq,7x"}, mcptoken.ErrIdempotencyKey},
		{"a key outside ASCII", p.c, deployRequest("api"), CallOptions{Key: "clé"}, mcptoken.ErrIdempotencyKey},
		{"a key of 256 bytes", p.c, deployRequest("api"), CallOptions{Key: strings.Repeat("k", 256)}, mcptoken.ErrIdempotencyKey},
		{"another key in _meta", p.c, withMeta("zq-other"), CallOptions{Key: "zq-mine"}, mcptoken.ErrIdempotencyKey},
		{"a _meta key that is not a string", p.c, withMeta(7), CallOptions{}, mcptoken.ErrIdempotencyKey},
		{"a malformed _meta key", p.c, withMeta(""), CallOptions{}, mcptoken.ErrIdempotencyKey},
		{"negative MaxAttempts", p.c, deployRequest("api"), CallOptions{MaxAttempts: -1}, ctoken.ErrConfig},
		{"negative MaxElapsed", p.c, deployRequest("api"), CallOptions{MaxElapsed: -time.Second}, ctoken.ErrConfig},
		{"nil client", nil, deployRequest("api"), CallOptions{}, ctoken.ErrConfig},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := CallTool(p.ctx, c.c, c.req, c.opts)
			if !errors.Is(err, c.want) || calls.Load() != 0 {
				t.Fatalf("%v (want %v); %d calls sent", err, c.want, calls.Load())
			}
			if c.opts.Key != "" && strings.Contains(err.Error(), c.opts.Key) {
				t.Fatalf("the error shows the key: %v", err)
			}
		})
	}
	if _, err := CallTool(p.ctx, p.c, deployRequest("api"), CallOptions{Key: strings.Repeat("k", 255)}); err != nil || calls.Load() != 1 {
		t.Fatalf("a key of 255 bytes: %v", err)
	}
}

func BenchmarkCallTool(b *testing.B) {
	var calls atomic.Int32
	p := inProcess(b, refusingServer(0, nil, nil, &calls), "alice", nil)
	b.Run("client.CallTool", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := p.c.CallTool(p.ctx, deployRequest("api")); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("ctokenmcpgo.CallTool", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := CallTool(p.ctx, p.c, deployRequest("api"), CallOptions{}); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// FuzzClassify judges arbitrary error texts as mcp-go's client returns
// them, transport errors and the server's -32603 alike: never a panic, a
// status only within 100–599, and a verdict that retries only what it
// deems may have reached the server or was never sent.
func FuzzClassify(f *testing.F) {
	f.Add("request failed with status 502: <html>bad gateway</html>")
	f.Add("request failed with status 401: unauthorized")
	f.Add("request failed with status 99999999999999999999: x")
	f.Add("requestState already used (ctokenCode 1026)")
	f.Add("busy (retryAfterMs 5) (ctokenCode 1027)")
	f.Fuzz(func(t *testing.T, msg string) {
		for _, err := range []error{transport.NewError(errors.New(msg)), fmt.Errorf("%w: %s", mcp.ErrInternalError, msg), errors.New(msg)} {
			if s := sdkHTTPStatus(err); s != 0 && (s < 100 || s > 599) {
				t.Fatalf("sdkHTTPStatus(%q) = %d", err, s)
			}
			v := classify(err)
			if v.Retry && v.Closed {
				t.Fatalf("classify(%q) = %+v: retries a closed session", err, v)
			}
		}
	})
}

func TestCallToolTakesTheKeyFromKeyArgument(t *testing.T) {
	d := &deployTool{}
	idem, err := NewIdempotency(IdempotencyOptions{
		IdempotencyConfig: mcptoken.IdempotencyConfig{Keys: idemKeys, Store: replay.NewMemoryStore(100), KeyArgument: "idempotency_key", KeyFromMeta: true},
		Caller:            FixedCaller("alice"),
	})
	if err != nil {
		t.Fatal(err)
	}
	s := server.NewMCPServer("deployer", "v0", server.WithToolCapabilities(false))
	s.AddTool(mcp.NewTool("deploy", mcp.WithString("idempotency_key", mcp.Required()), mcp.WithString("service")), idem.Wrap(d.handler))
	url, dr := serveDropping(t, s, func(n int) dropMode {
		if n == 1 {
			return dropAfter
		}
		return passThrough
	})
	c := clientFor(t, url, nil)
	req := deployRequest("api")
	req.Params.Arguments = map[string]any{"idempotency_key": "pay-42", "service": "api"}

	// The argument's key is the call's: a lost answer is retried under it.
	res, err := CallTool(context.Background(), c, req, CallOptions{KeyArgument: "idempotency_key"})
	if err != nil {
		t.Fatal(err)
	}
	if got := resultText(t, res); got != "deployed api (deploy 1)" || d.deploys.Load() != 1 || dr.calls.Load() != 2 {
		t.Fatalf("%q; %d deploys in %d calls", got, d.deploys.Load(), dr.calls.Load())
	}
	if keys := d.seenKeys(); len(keys) != 1 || keys[0] != "pay-42" {
		t.Fatalf("_meta keys %v", keys)
	}
	// The same key from Key or _meta is no conflict.
	same := req
	same.Params.Meta = &mcp.Meta{AdditionalFields: map[string]any{mcptoken.MetaIdempotencyKey: "pay-42"}}
	if res, err := CallTool(context.Background(), c, same, CallOptions{KeyArgument: "idempotency_key", Key: "pay-42"}); err != nil || resultText(t, res) != "deployed api (deploy 1)" {
		t.Fatalf("%v, %v", res, err)
	}

	// Refused before anything is sent.
	for name, tc := range map[string]struct {
		args any
		key  string
		meta map[string]any
	}{
		"no key argument":        {args: map[string]any{"service": "api"}},
		"a key that is a number": {args: map[string]any{"idempotency_key": 42, "service": "api"}},
		"a null key":             {args: map[string]any{"idempotency_key": nil, "service": "api"}},
		"an empty key":           {args: map[string]any{"idempotency_key": "", "service": "api"}},
		"no arguments":           {},
		"arguments not a object": {args: []string{"pay-42"}},
		"another Key":            {args: req.Params.Arguments, key: "pay-43"},
		"another _meta key":      {args: req.Params.Arguments, meta: map[string]any{mcptoken.MetaIdempotencyKey: "pay-43"}},
	} {
		r := deployRequest("api")
		r.Params.Arguments = tc.args
		if tc.meta != nil {
			r.Params.Meta = &mcp.Meta{AdditionalFields: tc.meta}
		}
		before := dr.calls.Load()
		_, err := CallTool(context.Background(), c, r, CallOptions{KeyArgument: "idempotency_key", Key: tc.key})
		if !errors.Is(err, mcptoken.ErrIdempotencyKey) || dr.calls.Load() != before || strings.Contains(err.Error(), "pay-4") {
			t.Errorf("%s: %v; %d calls sent", name, err, dr.calls.Load()-before)
		}
	}
}

// FuzzKeyedRequest: whatever the arguments, keyedRequest with KeyArgument
// either refuses them with ErrIdempotencyKey or returns the argument's
// string as the key, in _meta too.
func FuzzKeyedRequest(f *testing.F) {
	f.Add([]byte(`{"idempotency_key":"pay-42","to":"bob"}`), "idempotency_key")
	f.Add([]byte(`{"k":"a\u0026b"}`), "k")
	f.Add([]byte(`{"k":null}`), "k")
	f.Add([]byte(`{"k":""}`), "k")
	f.Add([]byte(`[1]`), "k")
	f.Fuzz(func(t *testing.T, args []byte, name string) {
		if name == "" {
			return
		}
		req := mcp.CallToolRequest{}
		req.Params.Name = "pay"
		req.Params.Arguments = json.RawMessage(args)
		r, key, err := keyedRequest(req, "", name)
		if err != nil {
			if !errors.Is(err, mcptoken.ErrIdempotencyKey) {
				t.Fatalf("error %v", err)
			}
			return
		}
		var m map[string]json.RawMessage
		var s string
		if json.Unmarshal(args, &m) != nil || json.Unmarshal(m[name], &s) != nil || s != key || r.Params.Meta.AdditionalFields[mcptoken.MetaIdempotencyKey] != key {
			t.Fatalf("key %q from %s (member %q); _meta %v", key, args, name, r.Params.Meta)
		}
	})
}
