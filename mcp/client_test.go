package ctokenmcp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
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
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// failsafe bounds every wait of these tests for an event that must come;
// none of them waits for time to pass.
const failsafe = 30 * time.Second

// deployTool is a tool with an effect, counted: each run deploys once and
// says which deploy it was, so a replayed result names the run that made
// it. A call of service "" is refused with -32602, one of service "fail"
// is a tool error result. With rounds, a call without inputResponses asks
// the user first (a multi round-trip call whose second round deploys).
type deployTool struct {
	rounds  bool
	deploys atomic.Int32
	asked   atomic.Int32
	started chan struct{} // when set, closed as the first deploy starts
	gate    chan struct{} // when set, every deploy waits for it to close
	mu      sync.Mutex
	keys    []any // the _meta key of every run, rounds included
}

var deployInput = json.RawMessage(`{"type":"object","properties":{"service":{"type":"string"}}}`)

func (d *deployTool) handler(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	d.mu.Lock()
	d.keys = append(d.keys, req.Params.Meta[mcptoken.MetaIdempotencyKey])
	d.mu.Unlock()
	var in struct {
		Service string `json:"service"`
	}
	if err := json.Unmarshal(req.Params.Arguments, &in); err != nil || in.Service == "" {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "no service"}
	}
	if d.rounds && len(req.Params.InputResponses) == 0 {
		d.asked.Add(1)
		return &mcp.CallToolResult{
			InputRequests: mcp.InputRequestMap{"ok": &mcp.ElicitParams{
				Message:         "Deploy " + in.Service + "?",
				RequestedSchema: map[string]any{"type": "object", "properties": map[string]any{"ok": map[string]any{"type": "boolean"}}},
			}},
			RequestState: "confirm",
		}, nil
	}
	n := d.deploys.Add(1)
	if d.started != nil && n == 1 {
		close(d.started)
	}
	if d.gate != nil {
		<-d.gate
	}
	switch in.Service {
	case "fail":
		return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "deploy failed"}}}, nil
	case "crash": // failed after it acted
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "deploy crashed"}
	}
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf("deployed %s (deploy %d)", in.Service, n)}}}, nil
}

// seenKeys returns the _meta keys of the runs so far.
func (d *deployTool) seenKeys() []any {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]any(nil), d.keys...)
}

// idemDeployServer returns a server whose tool "deploy" is d, made idempotent
// (keys from _meta, caller alice) on a MemoryStore unless plain.
func idemDeployServer(t testing.TB, d *deployTool, plain bool) *mcp.Server {
	t.Helper()
	s := mcp.NewServer(&mcp.Implementation{Name: "deployer", Version: "v0"}, nil)
	if plain {
		s.AddTool(&mcp.Tool{Name: "deploy", InputSchema: deployInput}, d.handler)
		return s
	}
	idem, err := NewIdempotency(IdempotencyOptions{
		IdempotencyConfig: mcptoken.IdempotencyConfig{Keys: idemKeys, Store: replay.NewMemoryStore(100), KeyFromMeta: true, Lease: 5 * time.Second},
		Caller:            FixedCaller("alice"),
	})
	if err != nil {
		t.Fatal(err)
	}
	s.AddTool(&mcp.Tool{Name: "deploy", InputSchema: deployInput}, idem.Wrap(d.handler))
	return s
}

// dropMode is what a [dropper] does with one tools/call POST.
type dropMode int

const (
	passThrough     dropMode = iota
	dropBefore               // close the connection before the server sees the call
	dropAfter                // let the server answer, then close the connection without the response
	cutAfterHeaders          // let the server answer, send its headers only, then close the connection
	cutMidBody               // let the server answer, send its headers and half its body, then close the connection
	htmlAfter                // let the server answer, then answer 200 with an HTML page instead (a proxy's)
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
	switch {
	case mode == passThrough:
		d.next.ServeHTTP(w, r)
		return
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
	if mode == htmlAfter {
		rec := httptest.NewRecorder()
		d.next.ServeHTTP(rec, r)
		d.mu.Lock()
		d.lost = append(d.lost, rec.Body.String())
		d.mu.Unlock()
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		io.WriteString(w, "<html><body>Bad gateway</body></html>")
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
	switch mode {
	case cutAfterHeaders:
		fmt.Fprintf(bw, "HTTP/1.1 200 OK\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n", rec.Header().Get("Content-Type"), rec.Body.Len()+100)
		bw.Flush()
	case cutMidBody: // no Content-Length: the body ends with the connection (FIN)
		fmt.Fprintf(bw, "HTTP/1.1 200 OK\r\nContent-Type: %s\r\nConnection: close\r\n\r\n", rec.Header().Get("Content-Type"))
		bw.Write(rec.Body.Bytes()[:rec.Body.Len()/2])
		bw.Flush()
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

// serveDropping serves s over streamable HTTP on 127.0.0.1 behind a
// dropper with plan (stateless unless opts says otherwise).
func serveDropping(t testing.TB, s *mcp.Server, opts *mcp.StreamableHTTPOptions, plan func(int) dropMode) (string, *dropper) {
	t.Helper()
	if opts == nil {
		opts = &mcp.StreamableHTTPOptions{Stateless: true}
	}
	d := &dropper{next: mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, opts), plan: plan}
	srv := httptest.NewServer(d)
	t.Cleanup(srv.Close)
	return srv.URL, d
}

// clientFor connects a go-sdk client with opts to the streamable HTTP
// server at url through rt (http.DefaultTransport when nil).
func clientFor(t testing.TB, url string, opts *mcp.ClientOptions, rt http.RoundTripper) *mcp.ClientSession {
	t.Helper()
	if rt == nil {
		rt = http.DefaultTransport
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "client", Version: "v0"}, opts).Connect(context.Background(),
		&mcp.StreamableClientTransport{Endpoint: url, HTTPClient: &http.Client{Transport: rt}, MaxRetries: -1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

func deployParams(service string) *mcp.CallToolParams {
	return &mcp.CallToolParams{Name: "deploy", Arguments: map[string]any{"service": service}}
}

// resultText returns the text of res, which must be one text content.
func resultText(t testing.TB, res *mcp.CallToolResult) string {
	t.Helper()
	if res == nil || len(res.Content) != 1 {
		t.Fatalf("result %+v", res)
	}
	tc, ok := res.Content[0].(*mcp.TextContent)
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

func TestCallTool(t *testing.T) {
	ctx := context.Background()

	// Once an attempt may have run the tool, no later error lets the
	// caller forget the key: every one is ErrOutcomeUnknown with the key,
	// and the call made again with it gets the first result.
	t.Run("a lost answer then an error no retry settles keeps the key", func(t *testing.T) {
		for _, status := range []int{400, 401, 403, 404, 409, 500, 502, 503, 504} {
			t.Run(fmt.Sprint(status), func(t *testing.T) {
				d := &deployTool{}
				var healed atomic.Bool
				url, dr := serveDropping(t, idemDeployServer(t, d, false), nil, func(n int) dropMode {
					switch {
					case healed.Load():
						return passThrough
					case n == 1:
						return dropAfter
					}
					return refusedWith(status)
				})
				_, err := CallTool(ctx, clientFor(t, url, nil, nil), deployParams("api"), CallOptions{MaxElapsed: 300 * time.Millisecond})
				key := wantOutcomeUnknown(t, err)
				healed.Store(true)
				res, err := CallTool(ctx, clientFor(t, url, nil, nil), deployParams("api"), CallOptions{Key: key})
				if err != nil {
					t.Fatal(err)
				}
				if got := resultText(t, res); got != "deployed api (deploy 1)" || d.deploys.Load() != 1 || len(dr.lostResponses()) != 1 {
					t.Fatalf("%q; %d deploys", got, d.deploys.Load())
				}
			})
		}
	})

	t.Run("a stateful session the server closes mid-call keeps the key", func(t *testing.T) {
		for range 5 { // the close races the response: every run must keep the key
			d := &deployTool{}
			s := idemDeployServer(t, d, false)
			var closed atomic.Bool
			// The first session ends as the tool returns, after it acted.
			s.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
				return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
					res, err := next(ctx, method, req)
					if method == "tools/call" && closed.CompareAndSwap(false, true) {
						go req.GetSession().(*mcp.ServerSession).Close() // Close waits for this request
					}
					return res, err
				}
			})
			url, _ := serveDropping(t, s, &mcp.StreamableHTTPOptions{}, nil)
			_, err := CallTool(ctx, clientFor(t, url, nil, nil), deployParams("api"), CallOptions{MaxElapsed: 300 * time.Millisecond})
			if err == nil {
				continue // the response won the race: the call has its result
			}
			key := wantOutcomeUnknown(t, err)
			res, err := CallTool(ctx, clientFor(t, url, nil, nil), deployParams("api"), CallOptions{Key: key})
			if err != nil {
				t.Fatal(err)
			}
			if got := resultText(t, res); got != "deployed api (deploy 1)" || d.deploys.Load() != 1 {
				t.Fatalf("%q; %d deploys", got, d.deploys.Load())
			}
		}
	})

	t.Run("a tool that failed after it acted does not run again, and its recorded failure is what the caller is told", func(t *testing.T) {
		d := &deployTool{}
		url, _ := serveDropping(t, idemDeployServer(t, d, false), nil, func(n int) dropMode {
			if n == 1 {
				return dropAfter
			}
			return passThrough
		})
		params := deployParams("crash")
		params.Meta = mcp.Meta{mcptoken.MetaIdempotencyKey: "k-crash"}
		for call := 1; call <= 2; call++ {
			// The first call's answer is lost, and its retry gets the
			// recorded failure; a second call under the key gets it too.
			_, err := CallTool(ctx, clientFor(t, url, nil, nil), params, CallOptions{})
			var we *jsonrpc.Error
			if !errors.Is(err, mcptoken.ErrToolFailed) || errors.Is(err, ErrOutcomeUnknown) || !errors.As(err, &we) ||
				we.Message != "deploy crashed" || we.Code != jsonrpc.CodeInternalError || d.deploys.Load() != 1 {
				t.Fatalf("call %d: %v; %d deploys; want the recorded failure, one deploy", call, err, d.deploys.Load())
			}
			if _, ok := RetryKey(err); ok {
				t.Fatalf("call %d: a key to call again with, for a failure every call under it gets", call)
			}
		}
	})

	t.Run("a proxy's 502 after its upstream ran the tool is retried", func(t *testing.T) {
		for _, status := range []int{502, 503, 504} {
			t.Run(fmt.Sprint(status), func(t *testing.T) {
				d := &deployTool{}
				url, dr := serveDropping(t, idemDeployServer(t, d, false), nil, func(n int) dropMode {
					if n == 1 {
						return ranThen(status)
					}
					return passThrough
				})
				res, err := CallTool(ctx, clientFor(t, url, nil, nil), deployParams("api"), CallOptions{})
				if err != nil {
					t.Fatal(err)
				}
				if got := resultText(t, res); got != "deployed api (deploy 1)" || d.deploys.Load() != 1 || dr.calls.Load() != 2 {
					t.Fatalf("%q; %d deploys in %d attempts", got, d.deploys.Load(), dr.calls.Load())
				}
			})
		}
	})

	t.Run("a 4xx that no attempt before met is returned as it is", func(t *testing.T) {
		for _, status := range []int{400, 401, 403} {
			d := &deployTool{}
			url, _ := serveDropping(t, idemDeployServer(t, d, false), nil, func(int) dropMode { return refusedWith(status) })
			_, err := CallTool(ctx, clientFor(t, url, nil, nil), deployParams("api"), CallOptions{})
			if err == nil || errors.Is(err, ErrOutcomeUnknown) || d.deploys.Load() != 0 {
				t.Fatalf("%d: %v", status, err)
			}
			if _, ok := RetryKey(err); ok {
				t.Fatalf("%d: RetryKey reports a key for a call that never ran", status)
			}
		}
	})

	t.Run("a connection dropped before the tool ran is retried and the tool runs once", func(t *testing.T) {
		d := &deployTool{}
		url, dr := serveDropping(t, idemDeployServer(t, d, false), nil, func(n int) dropMode {
			if n == 1 {
				return dropBefore
			}
			return passThrough
		})
		res, err := CallTool(ctx, clientFor(t, url, nil, nil), deployParams("api"), CallOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got := resultText(t, res); got != "deployed api (deploy 1)" || d.deploys.Load() != 1 || dr.calls.Load() != 2 {
			t.Fatalf("%q; %d deploys in %d attempts", got, d.deploys.Load(), dr.calls.Load())
		}
	})

	t.Run("a response lost after the tool ran is retried and gets the first result", func(t *testing.T) {
		for name, opts := range map[string]*mcp.StreamableHTTPOptions{
			"stateless, SSE":  {Stateless: true},
			"stateless, JSON": {Stateless: true, JSONResponse: true},
			"stateful, SSE":   {},
		} {
			t.Run(name, func(t *testing.T) {
				d := &deployTool{}
				url, dr := serveDropping(t, idemDeployServer(t, d, false), opts, func(n int) dropMode {
					if n == 1 {
						return dropAfter
					}
					return passThrough
				})
				res, err := CallTool(ctx, clientFor(t, url, nil, nil), deployParams("api"), CallOptions{})
				if err != nil {
					t.Fatal(err)
				}
				got, lost := resultText(t, res), dr.lostResponses()
				if got != "deployed api (deploy 1)" || len(lost) != 1 || !strings.Contains(lost[0], got) || d.deploys.Load() != 1 || dr.calls.Load() != 2 {
					t.Fatalf("%q, lost %q; %d deploys in %d attempts", got, lost, d.deploys.Load(), dr.calls.Load())
				}
			})
		}
	})

	t.Run("an SSE response stream cut after its headers is retried and gets the first result", func(t *testing.T) {
		d := &deployTool{}
		url, dr := serveDropping(t, idemDeployServer(t, d, false), &mcp.StreamableHTTPOptions{}, func(n int) dropMode {
			if n == 1 {
				return cutAfterHeaders // go-sdk: "request terminated without response"; the session lives on
			}
			return passThrough
		})
		res, err := CallTool(ctx, clientFor(t, url, nil, nil), deployParams("api"), CallOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got := resultText(t, res); got != "deployed api (deploy 1)" || d.deploys.Load() != 1 || dr.calls.Load() != 2 {
			t.Fatalf("%q; %d deploys in %d attempts", got, d.deploys.Load(), dr.calls.Load())
		}
	})

	t.Run("an answer cut mid-way or not the server's closes the session: a reconnect, else outcome unknown", func(t *testing.T) {
		for name, mode := range map[string]dropMode{
			"an SSE result event cut mid-event": cutMidBody, // go-sdk: "failed to decode event"
			"a proxy's 200 HTML page":           htmlAfter,  // go-sdk: "unsupported content type"
		} {
			plan := func(n int) dropMode {
				if n == 1 {
					return mode // after the tool ran
				}
				return passThrough
			}
			t.Run(name+": with Reconnect, the first result", func(t *testing.T) {
				d := &deployTool{}
				url, dr := serveDropping(t, idemDeployServer(t, d, false), nil, plan)
				cs, reconnect, reconnects := reconnectingVia(t, url, nil)
				res, err := CallTool(ctx, cs, deployParams("api"), CallOptions{Reconnect: reconnect})
				if err != nil {
					t.Fatal(err)
				}
				if got := resultText(t, res); got != "deployed api (deploy 1)" || d.deploys.Load() != 1 || dr.calls.Load() != 2 || *reconnects != 1 {
					t.Fatalf("%q; %d deploys in %d attempts, %d reconnects", got, d.deploys.Load(), dr.calls.Load(), *reconnects)
				}
			})
			t.Run(name+": without, the key gets the first result later", func(t *testing.T) {
				d := &deployTool{}
				url, dr := serveDropping(t, idemDeployServer(t, d, false), nil, plan)
				_, err := CallTool(ctx, clientFor(t, url, nil, nil), deployParams("api"), CallOptions{})
				key := wantOutcomeUnknown(t, err)
				if !strings.Contains(err.Error(), "the session closed") || dr.calls.Load() != 1 {
					t.Fatalf("%v after %d attempts", err, dr.calls.Load())
				}
				res, err := CallTool(ctx, clientFor(t, url, nil, nil), deployParams("api"), CallOptions{Key: key})
				if err != nil {
					t.Fatal(err)
				}
				if got := resultText(t, res); got != "deployed api (deploy 1)" || d.deploys.Load() != 1 {
					t.Fatalf("%q; %d deploys", got, d.deploys.Load())
				}
			})
		}
	})

	t.Run("a JSON response cut after its headers closes the session: outcome unknown, and the key gets the first result later", func(t *testing.T) {
		d := &deployTool{}
		url, dr := serveDropping(t, idemDeployServer(t, d, false), &mcp.StreamableHTTPOptions{Stateless: true, JSONResponse: true}, func(n int) dropMode {
			if n == 1 {
				return cutAfterHeaders // go-sdk: "failed to read body": the connection fails
			}
			return passThrough
		})
		_, err := CallTool(ctx, clientFor(t, url, nil, nil), deployParams("api"), CallOptions{})
		key := wantOutcomeUnknown(t, err)
		if !strings.Contains(err.Error(), "the session closed") || dr.calls.Load() != 1 {
			t.Fatalf("%v after %d attempts", err, dr.calls.Load())
		}
		res, err := CallTool(ctx, clientFor(t, url, nil, nil), deployParams("api"), CallOptions{Key: key})
		if err != nil {
			t.Fatal(err)
		}
		if got := resultText(t, res); got != "deployed api (deploy 1)" || d.deploys.Load() != 1 {
			t.Fatalf("%q; %d deploys", got, d.deploys.Load())
		}
	})

	t.Run("a duplicate while the first runs waits out 1025 and gets the first result", func(t *testing.T) {
		d := &deployTool{started: make(chan struct{}), gate: make(chan struct{})}
		s := idemDeployServer(t, d, false)
		release := sync.OnceFunc(func() { close(d.gate) })
		inProgress := make(chan struct{}, 1)
		s.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
			return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
				res, err := next(ctx, method, req)
				if TokenErrorCode(err) == InProgress {
					select {
					case inProgress <- struct{}{}:
					default:
					}
				}
				return res, err
			}
		})
		url, dr := serveDropping(t, s, nil, nil)
		cs := clientFor(t, url, nil, nil)
		t.Cleanup(release) // before the client and the server close, even when the test fails
		opts := CallOptions{Key: "deploy-api-1"}
		type answer struct {
			res *mcp.CallToolResult
			err error
		}
		first, second := make(chan answer, 1), make(chan answer, 1)
		go func() {
			res, err := CallTool(ctx, cs, deployParams("api"), opts)
			first <- answer{res, err}
		}()
		waitFor(t, d.started, "the first deploy")
		go func() {
			res, err := CallTool(ctx, cs, deployParams("api"), opts)
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

	t.Run("a budget spent on lost responses is ErrOutcomeUnknown with the key, which gets the first result later", func(t *testing.T) {
		d := &deployTool{}
		var lose atomic.Bool
		lose.Store(true)
		url, dr := serveDropping(t, idemDeployServer(t, d, false), nil, func(int) dropMode {
			if lose.Load() {
				return dropAfter
			}
			return passThrough
		})
		cs := clientFor(t, url, nil, nil)
		_, err := CallTool(ctx, cs, deployParams("api"), CallOptions{MaxAttempts: 3})
		key := wantOutcomeUnknown(t, err)
		if !strings.Contains(err.Error(), "3 attempts; no attempt left") || dr.calls.Load() != 3 || d.deploys.Load() != 1 {
			t.Fatalf("%v; %d deploys in %d attempts", err, d.deploys.Load(), dr.calls.Load())
		}
		var we *jsonrpc.Error
		if !errors.As(err, &we) || we.Code != codeRejected {
			t.Fatalf("the last attempt's error is not kept: %v", err)
		}
		_, err = CallTool(ctx, cs, deployParams("api"), CallOptions{Key: key, MaxElapsed: time.Nanosecond})
		if wantOutcomeUnknown(t, err) != key || !strings.Contains(err.Error(), "1 attempts; no time left") || dr.calls.Load() != 4 {
			t.Fatalf("%v after %d attempts", err, dr.calls.Load())
		}
		lose.Store(false)
		res, err := CallTool(ctx, cs, deployParams("api"), CallOptions{Key: key})
		if err != nil {
			t.Fatal(err)
		}
		lost := dr.lostResponses()
		if got := resultText(t, res); got != "deployed api (deploy 1)" || !strings.Contains(lost[0], got) || d.deploys.Load() != 1 {
			t.Fatalf("%q; %d deploys", got, d.deploys.Load())
		}
	})

	t.Run("a refusal that does not say retry is returned after one attempt", func(t *testing.T) {
		d := &deployTool{}
		url, dr := serveDropping(t, idemDeployServer(t, d, false), nil, nil)
		cs := clientFor(t, url, nil, nil)
		if _, err := CallTool(ctx, cs, deployParams("api"), CallOptions{Key: "k1"}); err != nil {
			t.Fatal(err)
		}
		_, err := CallTool(ctx, cs, deployParams("web"), CallOptions{Key: "k1"})
		wantRPCError(t, err, jsonrpc.CodeInvalidParams, KeyReused)
		_, err = CallTool(ctx, cs, deployParams(""), CallOptions{})
		wantRPCError(t, err, jsonrpc.CodeInvalidParams, 0)
		res, err := CallTool(ctx, cs, deployParams("fail"), CallOptions{})
		if err != nil || !res.IsError {
			t.Fatalf("tool error result: %+v, %v", res, err)
		}
		if dr.calls.Load() != 4 || d.deploys.Load() != 2 {
			t.Fatalf("%d deploys in %d attempts, want 2 in 4", d.deploys.Load(), dr.calls.Load())
		}
	})

	t.Run("the caller's key used again replays and another key is its own call", func(t *testing.T) {
		d := &deployTool{}
		url, dr := serveDropping(t, idemDeployServer(t, d, false), nil, nil)
		cs := clientFor(t, url, nil, nil)
		var got []string
		for _, key := range []string{"deploy-7", "deploy-7", "deploy-8", "", ""} {
			res, err := CallTool(ctx, cs, deployParams("api"), CallOptions{Key: key})
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
		url, dr := serveDropping(t, idemDeployServer(t, d, true), nil, nil)
		cs := clientFor(t, url, nil, nil)
		for i := 1; i <= 2; i++ {
			res, err := CallTool(ctx, cs, deployParams("api"), CallOptions{})
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

	t.Run("the caller's params are not changed and its _meta is sent", func(t *testing.T) {
		d := &deployTool{}
		s := idemDeployServer(t, d, false)
		var sent mcp.Meta
		s.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
			return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
				if r, ok := req.(*mcp.CallToolRequest); ok {
					sent = r.Params.Meta
				}
				return next(ctx, method, req)
			}
		})
		url, _ := serveDropping(t, s, nil, nil)
		params := &mcp.CallToolParams{Name: "deploy", Arguments: json.RawMessage(`{"service":"api"}`), Meta: mcp.Meta{"app/trace": "t1"}}
		if _, err := CallTool(ctx, clientFor(t, url, nil, nil), params, CallOptions{Key: "k-meta"}); err != nil {
			t.Fatal(err)
		}
		if len(params.Meta) != 1 || params.Meta["app/trace"] != "t1" || string(params.Arguments.(json.RawMessage)) != `{"service":"api"}` {
			t.Fatalf("params changed: %+v", params)
		}
		if sent["app/trace"] != "t1" || sent[mcptoken.MetaIdempotencyKey] != "k-meta" {
			t.Fatalf("sent _meta %v", sent)
		}
		// The same key in _meta and in opts is one key.
		params.Meta[mcptoken.MetaIdempotencyKey] = "k-meta"
		res, err := CallTool(ctx, clientFor(t, url, nil, nil), params, CallOptions{Key: "k-meta"})
		if err != nil || resultText(t, res) != "deployed api (deploy 1)" || d.deploys.Load() != 1 {
			t.Fatalf("%v; %d deploys", err, d.deploys.Load())
		}
	})

	t.Run("an SDK-driven two-round call whose second answer is lost deploys once and gets the first result", func(t *testing.T) {
		d := &deployTool{rounds: true}
		url, dr := serveDropping(t, idemDeployServer(t, d, false), nil, func(n int) dropMode {
			if n == 2 {
				return dropAfter // the answer to round two
			}
			return passThrough
		})
		var elicited atomic.Int32
		cs := clientFor(t, url, &mcp.ClientOptions{ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			elicited.Add(1)
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"ok": true}}, nil
		}}, nil)
		res, err := CallTool(ctx, cs, deployParams("api"), CallOptions{})
		if err != nil {
			t.Fatal(err)
		}
		got, lost := resultText(t, res), dr.lostResponses()
		if got != "deployed api (deploy 1)" || len(lost) != 1 || !strings.Contains(lost[0], got) || d.deploys.Load() != 1 {
			t.Fatalf("%q, lost %q; %d deploys", got, lost, d.deploys.Load())
		}
		// Round one, round two (lost), then the retry's round one,
		// answered with the recorded result of round two: the user was
		// asked once, and go-sdk carried the key into round two.
		keys := d.seenKeys()
		if dr.calls.Load() != 3 || d.asked.Load() != 1 || elicited.Load() != 1 || len(keys) != 2 || keys[0] == nil || keys[1] != keys[0] {
			t.Fatalf("%d POSTs, asked %d, elicited %d, keys %q", dr.calls.Load(), d.asked.Load(), elicited.Load(), keys)
		}
	})

	t.Run("an unreachable server is not ErrOutcomeUnknown", func(t *testing.T) {
		d := &deployTool{}
		url, dr := serveDropping(t, idemDeployServer(t, d, false), nil, nil)
		var refuse atomic.Bool
		rt := &http.Transport{DisableKeepAlives: true, DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if refuse.Load() {
				return nil, &net.OpError{Op: "dial", Net: network, Err: syscall.ECONNREFUSED}
			}
			return (&net.Dialer{}).DialContext(ctx, network, addr)
		}}
		cs := clientFor(t, url, nil, rt)
		refuse.Store(true)
		_, err := CallTool(ctx, cs, deployParams("api"), CallOptions{MaxAttempts: 2})
		if err == nil || errors.Is(err, ErrOutcomeUnknown) || !errors.Is(err, syscall.ECONNREFUSED) || !strings.Contains(err.Error(), "not delivered (2 attempts") {
			t.Fatalf("error %v", err)
		}
		if _, ok := RetryKey(err); ok || dr.calls.Load() != 0 {
			t.Fatalf("RetryKey answered; %d attempts reached the server", dr.calls.Load())
		}
	})
	t.Run("only the refusals that say retry are retried", callToolRetriesOnlyTheRefusalsThatSayRetry)
	t.Run("it stops waiting when the context ends", callToolStopsWaitingWhenTheContextEnds)
	t.Run("it refuses before sending", callToolRefusesBeforeSending)
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

// refusingServer returns a server whose tool "deploy" answers its first
// refuse calls with err, and the call after them with a result; calls
// counts the calls.
func refusingServer(refuse int32, err error, calls *atomic.Int32) *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "refusing", Version: "v0"}, nil)
	s.AddTool(&mcp.Tool{Name: "deploy", InputSchema: deployInput}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		if calls.Add(1) <= refuse {
			return nil, err
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "done"}}}, nil
	})
	return s
}

func refusalError(code int64, message string, data string) error {
	return &jsonrpc.Error{Code: code, Message: message, Data: json.RawMessage(data)}
}

func callToolRetriesOnlyTheRefusalsThatSayRetry(t *testing.T) {
	cases := []struct {
		name  string
		err   error
		retry bool
		// unknown: not retried, and the tool may have run: ErrOutcomeUnknown
		unknown bool
	}{
		{"1025 in progress", refusalError(jsonrpc.CodeInternalError, "in progress", `{"ctokenCode":1025,"retryAfterMs":1}`), true, false},
		{"1028 outcome unknown", refusalError(jsonrpc.CodeInternalError, "outcome unknown", `{"ctokenCode":1028,"retryAfterMs":1}`), true, false},
		{"1027 request state busy", refusalError(jsonrpc.CodeInvalidParams, "busy", `{"ctokenCode":1027,"retryAfterMs":1}`), true, false},
		{"1027 without a hint", refusalError(jsonrpc.CodeInvalidParams, "busy", `{"ctokenCode":1027}`), true, false},
		{"idempotency store unavailable", refusalError(jsonrpc.CodeInternalError, msgStoreUnavailable, ""), true, false},
		{"1024 key reused", refusalError(jsonrpc.CodeInvalidParams, "reused", `{"ctokenCode":1024}`), false, false},
		{"1026 request state used", refusalError(jsonrpc.CodeInvalidParams, "used", `{"ctokenCode":1026}`), false, false},
		{"1023 request state invalid", refusalError(jsonrpc.CodeInvalidParams, "invalid", `{"ctokenCode":1023}`), false, false},
		{"1029 of an interrupted round", refusalError(jsonrpc.CodeInvalidParams, "interrupted", `{"ctokenCode":1029}`), false, false},
		{"1025 under -32602", refusalError(jsonrpc.CodeInvalidParams, "in progress", `{"ctokenCode":1025,"retryAfterMs":1}`), false, false},
		{"another internal error", refusalError(jsonrpc.CodeInternalError, "this call completed but its result was not recorded", ""), false, true},
		{"a tool that failed after it began", refusalError(jsonrpc.CodeInternalError, "deploy failed", ""), false, true},
		{"an application's own code", refusalError(-32000, "deploy failed", ""), false, true},
		{"unreadable data", refusalError(jsonrpc.CodeInternalError, msgStoreUnavailable, `[1]`), false, true},
		{"invalid params", refusalError(jsonrpc.CodeInvalidParams, "no service", ""), false, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var calls atomic.Int32
			cs := connect(t, refusingServer(1, c.err, &calls), nil)
			res, err := CallTool(context.Background(), cs, deployParams("api"), CallOptions{})
			if c.retry {
				if err != nil || resultText(t, res) != "done" || calls.Load() != 2 {
					t.Fatalf("%v after %d calls", err, calls.Load())
				}
				return
			}
			var we *jsonrpc.Error
			if !errors.As(err, &we) || we.Message != c.err.(*jsonrpc.Error).Message || errors.Is(err, ErrOutcomeUnknown) != c.unknown || calls.Load() != 1 {
				t.Fatalf("%v after %d calls", err, calls.Load())
			}
			if c.unknown {
				wantOutcomeUnknown(t, err)
			}
		})
	}
	t.Run("an answer no retry settles after one that may have run keeps the key", func(t *testing.T) {
		// 1028 (the tool ran, its commit's outcome unknown), then 1026 (a
		// hand-driven round two's state, used by the first attempt) or
		// 1024 (the key, taken with other arguments): never a plain error.
		for _, second := range []error{
			refusalError(jsonrpc.CodeInvalidParams, "used", `{"ctokenCode":1026}`),
			refusalError(jsonrpc.CodeInvalidParams, "reused", `{"ctokenCode":1024}`),
			refusalError(jsonrpc.CodeInvalidParams, "no service", ""),
		} {
			var calls atomic.Int32
			s := mcp.NewServer(&mcp.Implementation{Name: "refusing", Version: "v0"}, nil)
			s.AddTool(&mcp.Tool{Name: "deploy", InputSchema: deployInput}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				if calls.Add(1) == 1 {
					return nil, refusalError(jsonrpc.CodeInternalError, "outcome unknown", `{"ctokenCode":1028,"retryAfterMs":1}`)
				}
				return nil, second
			})
			_, err := CallTool(context.Background(), connect(t, s, nil), deployParams("api"), CallOptions{})
			wantOutcomeUnknown(t, err)
			var we *jsonrpc.Error
			if !errors.As(err, &we) || we.Message != second.(*jsonrpc.Error).Message || calls.Load() != 2 {
				t.Fatalf("%v after %d calls; want the second answer, wrapped", err, calls.Load())
			}
		}
	})
	t.Run("a refusal retried to the end is ErrOutcomeUnknown", func(t *testing.T) {
		var calls atomic.Int32
		cs := connect(t, refusingServer(100, refusalError(jsonrpc.CodeInternalError, "in progress", `{"ctokenCode":1025,"retryAfterMs":1}`), &calls), nil)
		_, err := CallTool(context.Background(), cs, deployParams("api"), CallOptions{MaxAttempts: 4})
		wantOutcomeUnknown(t, err)
		if TokenErrorCode(err) != InProgress || calls.Load() != 4 {
			t.Fatalf("%v after %d calls", err, calls.Load())
		}
	})
}

func callToolStopsWaitingWhenTheContextEnds(t *testing.T) {
	var calls atomic.Int32
	s := refusingServer(100, refusalError(jsonrpc.CodeInternalError, "in progress", `{"ctokenCode":1025,"retryAfterMs":60000}`), &calls)
	st, ct := mcp.NewInMemoryTransports()
	if _, err := s.Connect(context.Background(), st, nil); err != nil {
		t.Fatal(err)
	}
	// called is sent to when the client has the answer to an attempt.
	called := make(chan struct{}, 1)
	c := mcp.NewClient(&mcp.Implementation{Name: "client", Version: "v0"}, nil)
	c.AddSendingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			res, err := next(ctx, method, req)
			if method == "tools/call" {
				called <- struct{}{}
			}
			return res, err
		}
	})
	cs, err := c.Connect(context.Background(), ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := CallTool(ctx, cs, deployParams("api"), CallOptions{})
		done <- err
	}()
	waitFor(t, called, "the first attempt")
	cancel()
	select {
	case err := <-done:
		wantOutcomeUnknown(t, err)
		if !errors.Is(err, context.Canceled) || TokenErrorCode(err) != InProgress || calls.Load() != 1 {
			t.Fatalf("%v after %d calls", err, calls.Load())
		}
	case <-time.After(failsafe):
		t.Fatal("CallTool kept waiting after its context ended")
	}
	if _, err := CallTool(ctx, cs, deployParams("api"), CallOptions{}); !errors.Is(err, context.Canceled) || errors.Is(err, ErrOutcomeUnknown) || calls.Load() != 1 {
		t.Fatalf("a call with an ended context: %v, %d calls", err, calls.Load())
	}
}

func callToolRefusesBeforeSending(t *testing.T) {
	var calls atomic.Int32
	cs := connect(t, refusingServer(0, nil, &calls), nil)
	withMeta := func(v any) *mcp.CallToolParams {
		p := deployParams("api")
		p.Meta = mcp.Meta{mcptoken.MetaIdempotencyKey: v}
		return p
	}
	cases := []struct {
		name   string
		params *mcp.CallToolParams
		opts   CallOptions
		want   error
	}{
		{"a key with a space", deployParams("api"), CallOptions{Key: "zq 7x"}, mcptoken.ErrIdempotencyKey},
		{"a quoted key", deployParams("api"), CallOptions{Key: `"zq7x"`}, mcptoken.ErrIdempotencyKey},
		{"a key with a comma", deployParams("api"), CallOptions{Key: "zq,7x"}, mcptoken.ErrIdempotencyKey},
		{"a key outside ASCII", deployParams("api"), CallOptions{Key: "clé"}, mcptoken.ErrIdempotencyKey},
		{"a key of 256 bytes", deployParams("api"), CallOptions{Key: strings.Repeat("k", 256)}, mcptoken.ErrIdempotencyKey},
		{"another key in _meta", withMeta("zq-other"), CallOptions{Key: "zq-mine"}, mcptoken.ErrIdempotencyKey},
		{"a _meta key that is not a string", withMeta(7), CallOptions{}, mcptoken.ErrIdempotencyKey},
		{"a malformed _meta key", withMeta(""), CallOptions{}, mcptoken.ErrIdempotencyKey},
		{"negative MaxAttempts", deployParams("api"), CallOptions{MaxAttempts: -1}, ctoken.ErrConfig},
		{"negative MaxElapsed", deployParams("api"), CallOptions{MaxElapsed: -time.Second}, ctoken.ErrConfig},
		{"nil params", nil, CallOptions{}, ctoken.ErrConfig},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := CallTool(context.Background(), cs, c.params, c.opts)
			if !errors.Is(err, c.want) || calls.Load() != 0 {
				t.Fatalf("%v (want %v); %d calls sent", err, c.want, calls.Load())
			}
			if c.opts.Key != "" && strings.Contains(err.Error(), c.opts.Key) {
				t.Fatalf("the error shows the key: %v", err)
			}
		})
	}
	if _, err := CallTool(context.Background(), cs, deployParams("api"), CallOptions{Key: strings.Repeat("k", 255)}); err != nil || calls.Load() != 1 {
		t.Fatalf("a key of 255 bytes: %v", err)
	}
}

func BenchmarkCallTool(b *testing.B) {
	var calls atomic.Int32
	cs := connect(b, refusingServer(0, nil, &calls), nil)
	ctx := context.Background()
	b.Run("cs.CallTool", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := cs.CallTool(ctx, deployParams("api")); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("ctokenmcp.CallTool", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := CallTool(ctx, cs, deployParams("api"), CallOptions{}); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestCallToolClassify pins the verdicts on the errors the end-to-end
// tests cannot provoke at will: what the client cannot prove did not run
// the tool is Reached.
func TestCallToolClassify(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want verdict
	}{
		{"a connection closed, perhaps mid-call", fmt.Errorf("calling tools/call: %w", mcp.ErrConnectionClosed), verdict{Reached: true, Closed: true}},
		{"the server's 404 for a lost session", fmt.Errorf("calling tools/call: %w", mcp.ErrSessionMissing), verdict{Closed: true}},
		{"a 408", errors.New(`calling "tools/call": Request Timeout`), verdict{Reached: true}},
		{"an event of a response stream cut off", errors.New(`calling "tools/call": sending "tools/call": failed to decode event: unmarshaling jsonrpc message: unexpected EOF`), verdict{Reached: true, Closed: true}},
		{"a 200 that is an HTML page", errors.New(`calling "tools/call": sending "tools/call": unsupported content type "text/html"`), verdict{Reached: true, Closed: true}},
		{"an error of unknown origin", errors.New("output does not match the schema"), verdict{Reached: true}},
		{"an application's JSON-RPC code", &jsonrpc.Error{Code: -32000, Message: "failed"}, verdict{Reached: true}},
		{"-32602", &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "bad"}, verdict{}},
	} {
		if got := classify(tc.err); got != tc.want {
			t.Errorf("%s: classify = %+v; want %+v", tc.name, got, tc.want)
		}
	}
}

func TestCallToolTakesTheKeyFromKeyArgument(t *testing.T) {
	d := &deployTool{}
	s := mcp.NewServer(&mcp.Implementation{Name: "deployer", Version: "v0"}, nil)
	idem, err := NewIdempotency(IdempotencyOptions{
		IdempotencyConfig: mcptoken.IdempotencyConfig{Keys: idemKeys, Store: replay.NewMemoryStore(100), KeyArgument: "idempotency_key", KeyFromMeta: true},
		Caller:            FixedCaller("alice"),
	})
	if err != nil {
		t.Fatal(err)
	}
	s.AddTool(&mcp.Tool{Name: "deploy", InputSchema: json.RawMessage(`{"type":"object","properties":{"idempotency_key":{"type":"string"},"service":{"type":"string"}},"required":["idempotency_key"]}`)},
		idem.Wrap(d.handler))
	url, dr := serveDropping(t, s, nil, func(n int) dropMode {
		if n == 1 {
			return dropAfter
		}
		return passThrough
	})
	cs := clientFor(t, url, nil, nil)
	params := &mcp.CallToolParams{Name: "deploy", Arguments: map[string]any{"idempotency_key": "pay-42", "service": "api"}}
	opts := CallOptions{KeyArgument: "idempotency_key"}

	// The argument's key is the call's: a lost answer is retried under it.
	res, err := CallTool(context.Background(), cs, params, opts)
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
	p := *params
	p.Meta = mcp.Meta{mcptoken.MetaIdempotencyKey: "pay-42"}
	if res, err := CallTool(context.Background(), cs, &p, CallOptions{KeyArgument: "idempotency_key", Key: "pay-42"}); err != nil || resultText(t, res) != "deployed api (deploy 1)" {
		t.Fatalf("%v, %v", res, err)
	}

	// Refused before anything is sent.
	for name, c := range map[string]struct {
		args any
		key  string
		meta mcp.Meta
	}{
		"no key argument":        {args: map[string]any{"service": "api"}},
		"a key that is a number": {args: map[string]any{"idempotency_key": 42, "service": "api"}},
		"a null key":             {args: map[string]any{"idempotency_key": nil, "service": "api"}},
		"an empty key":           {args: map[string]any{"idempotency_key": "", "service": "api"}},
		"no arguments":           {},
		"arguments not a object": {args: []string{"pay-42"}},
		"another Key":            {args: params.Arguments, key: "pay-43"},
		"another _meta key":      {args: params.Arguments, meta: mcp.Meta{mcptoken.MetaIdempotencyKey: "pay-43"}},
	} {
		before := dr.calls.Load()
		_, err := CallTool(context.Background(), cs, &mcp.CallToolParams{Name: "deploy", Arguments: c.args, Meta: c.meta}, CallOptions{KeyArgument: "idempotency_key", Key: c.key})
		if !errors.Is(err, mcptoken.ErrIdempotencyKey) || dr.calls.Load() != before || strings.Contains(err.Error(), "pay-4") {
			t.Errorf("%s: %v; %d calls sent", name, err, dr.calls.Load()-before)
		}
	}
}

// FuzzKeyedParams: whatever the arguments, keyedParams with KeyArgument
// either refuses them with ErrIdempotencyKey or returns the argument's
// string as the key, in _meta too.
func FuzzKeyedParams(f *testing.F) {
	f.Add([]byte(`{"idempotency_key":"pay-42","to":"bob"}`), "idempotency_key")
	f.Add([]byte(`{"k":"a\u0026b"}`), "k")
	f.Add([]byte(`{"k":null}`), "k")
	f.Add([]byte(`{"k":""}`), "k")
	f.Add([]byte(`[1]`), "k")
	f.Fuzz(func(t *testing.T, args []byte, name string) {
		if name == "" {
			return
		}
		p, key, err := keyedParams(&mcp.CallToolParams{Name: "pay", Arguments: json.RawMessage(args)}, "", name)
		if err != nil {
			if !errors.Is(err, mcptoken.ErrIdempotencyKey) {
				t.Fatalf("error %v", err)
			}
			return
		}
		var m map[string]json.RawMessage
		var s string
		if json.Unmarshal(args, &m) != nil || json.Unmarshal(m[name], &s) != nil || s != key || p.Meta[mcptoken.MetaIdempotencyKey] != key {
			t.Fatalf("key %q from %s (member %q); _meta %v", key, args, name, p.Meta)
		}
	})
}
