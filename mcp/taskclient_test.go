package ctokenmcp

import (
	"context"
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
	"github.com/ctoken/ctoken/mcptoken"
	"github.com/ctoken/ctoken/replay"
	"github.com/ctoken/ctoken/replay/replaytest"
	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// taskEndpoint serves s behind tasks.Handler and bearer authentication
// (testUsers), stateless, on 127.0.0.1.
func taskEndpoint(t *testing.T, s *mcp.Server, tasks *mcptoken.Tasks) string {
	t.Helper()
	verify := func(_ context.Context, token string, _ *http.Request) (*auth.TokenInfo, error) {
		user, ok := testUsers[token]
		if !ok {
			return nil, auth.ErrInvalidToken
		}
		return &auth.TokenInfo{UserID: user, Expiration: time.Now().Add(time.Hour)}, nil
	}
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, &mcp.StreamableHTTPOptions{Stateless: true})
	srv := httptest.NewServer(auth.RequireBearerToken(verify, nil)(tasks.Handler(h)))
	t.Cleanup(srv.Close)
	return srv.URL
}

// bearer adds the Authorization of token to every request.
type bearer struct {
	token string
	next  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(r)
}

func text0(t *testing.T, res *mcp.CallToolResult) string {
	t.Helper()
	if res == nil || len(res.Content) == 0 {
		t.Fatalf("result %+v has no content", res)
	}
	tc, ok := res.Content[0].(*mcp.TextContent)
	if !ok {
		t.Fatalf("content %T", res.Content[0])
	}
	return tc.Text
}

func TestTaskTransport(t *testing.T) {
	keys, err := ctoken.NewKeyring(ctoken.RandomKey())
	if err != nil {
		t.Fatal(err)
	}
	tasks, err := mcptoken.NewTasks(mcptoken.TasksConfig{Keys: keys, Store: replay.NewMemoryStore(0), PollInterval: 10 * time.Millisecond, Caller: HTTPTokenUserID})
	if err != nil {
		t.Fatal(err)
	}
	s := mcp.NewServer(&mcp.Implementation{Name: "tasks", Version: "v0"}, nil)
	release := make(chan struct{})
	add := func(name string, h mcp.ToolHandler) {
		s.AddTool(&mcp.Tool{Name: name, InputSchema: &jsonschema.Schema{Type: "object"}}, h)
		if err := tasks.Add(TaskTool(name, h, false)); err != nil {
			t.Fatal(err)
		}
	}
	add("hello", func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		if r, ok := req.Params.InputResponses["name"].(*mcp.ElicitResult); ok && r.Action == "accept" {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "hello " + r.Content["name"].(string)}}}, nil
		}
		return &mcp.CallToolResult{InputRequests: mcp.InputRequestMap{"name": &mcp.ElicitParams{Message: "name?", RequestedSchema: &jsonschema.Schema{Type: "object"}}}}, nil
	})
	add("fails", func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return nil, errors.New("the job broke")
	})
	add("held", func(ctx context.Context, _ *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		select {
		case <-release:
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "released"}}}, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	})
	add("args", func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: string(req.Params.Arguments)}}}, nil
	})
	endpoint := taskEndpoint(t, s, tasks)

	var mu sync.Mutex
	var started []string
	asked := 0
	opts := TaskOptions{
		Input: func(_ context.Context, reqs mcp.InputRequestMap) (mcp.InputResponseMap, error) {
			mu.Lock()
			defer mu.Unlock()
			asked += len(reqs)
			out := mcp.InputResponseMap{}
			for k := range reqs {
				out[k] = &mcp.ElicitResult{Action: "accept", Content: map[string]any{"name": "Ada"}}
			}
			return out, nil
		},
		Started: func(id string) { mu.Lock(); started = append(started, id); mu.Unlock() },
	}
	connectTasks := func(token string, opts TaskOptions) *mcp.ClientSession {
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "tasks-client", Version: "v0"}, nil).Connect(context.Background(),
			&mcp.StreamableClientTransport{Endpoint: endpoint, HTTPClient: &http.Client{Transport: TaskTransport(bearer{token, http.DefaultTransport}, opts)}, MaxRetries: -1}, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cs.Close() })
		return cs
	}
	cs := connectTasks("alice-token", opts)

	t.Run("cs.CallTool gets the task's result; its input asked once", func(t *testing.T) {
		res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "hello"})
		if err != nil {
			t.Fatal(err)
		}
		if got := text0(t, res); got != "hello Ada" {
			t.Fatalf("result %q", got)
		}
		mu.Lock()
		defer mu.Unlock()
		if asked != 1 || len(started) != 1 || started[0] == "" || strings.Contains(started[0], "alice") {
			t.Fatalf("asked %d, started %q: want one question and one opaque task ID", asked, started)
		}
	})

	t.Run("the call's numbers reach the tool as sent", func(t *testing.T) {
		res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "args", Arguments: json.RawMessage(`{"n":9007199254740993}`)})
		if err != nil {
			t.Fatal(err)
		}
		if got := text0(t, res); !strings.Contains(got, "9007199254740993") {
			t.Fatalf("the tool got %s", got)
		}
	})

	t.Run("CallTool too", func(t *testing.T) {
		res, err := CallTool(context.Background(), cs, &mcp.CallToolParams{Name: "hello"}, CallOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got := text0(t, res); got != "hello Ada" {
			t.Fatalf("result %q", got)
		}
	})

	t.Run("a failed task is the JSON-RPC error it failed with", func(t *testing.T) {
		_, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "fails"})
		wantRPCError(t, err, -32603, 0)
		if strings.Contains(err.Error(), "the job broke") {
			t.Fatalf("err = %v: the handler's text reached the client", err)
		}
	})

	t.Run("a cancelled task is a -32603 saying so", func(t *testing.T) {
		canceller := connectTasks("alice-token", TaskOptions{Started: func(id string) {
			if err := tasks.Cancel(context.Background(), "alice", id); err != nil {
				t.Error(err)
			}
		}})
		_, err := canceller.CallTool(context.Background(), &mcp.CallToolParams{Name: "held"})
		wantRPCError(t, err, -32603, 0)
		if !strings.Contains(err.Error(), "the task was cancelled") {
			t.Fatalf("err = %v", err)
		}
	})

	t.Run("a task asking for input without an Input fails the call", func(t *testing.T) {
		bare := connectTasks("alice-token", TaskOptions{})
		if _, err := bare.CallTool(context.Background(), &mcp.CallToolParams{Name: "hello"}); err == nil || !strings.Contains(err.Error(), "no input handler") {
			t.Fatalf("err = %v", err)
		}
	})

	t.Run("ResumeTask gets the result of a task whose call ended", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		var id string
		quitter := connectTasks("alice-token", TaskOptions{Started: func(s string) { id = s; cancel() }})
		if _, err := quitter.CallTool(ctx, &mcp.CallToolParams{Name: "held"}); err == nil || id == "" {
			t.Fatalf("err = %v, id %q: want the call ended by its context after the task started", err, id)
		}
		bob := &http.Client{Transport: bearer{"bob-token", http.DefaultTransport}}
		if _, err := ResumeTask(context.Background(), bob, endpoint, id, TaskOptions{}); err == nil || !strings.Contains(err.Error(), "-32602") {
			t.Fatalf("another caller's resume: err = %v, want -32602", err)
		}
		close(release)
		alice := &http.Client{Transport: bearer{"alice-token", http.DefaultTransport}}
		res, err := ResumeTask(context.Background(), alice, endpoint, id, TaskOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got := text0(t, res); got != "released" {
			t.Fatalf("result %q", got)
		}
	})

	t.Run("ResumeTask refuses an empty endpoint or ID", func(t *testing.T) {
		for _, c := range [][2]string{{"", "id"}, {endpoint, ""}} {
			if _, err := ResumeTask(context.Background(), nil, c[0], c[1], TaskOptions{}); !errors.Is(err, ctoken.ErrConfig) {
				t.Errorf("ResumeTask(%q, %q): err = %v", c[0], c[1], err)
			}
		}
	})
}

// recordRT records the body of each request and answers 200 with an empty
// JSON object.
type recordRT struct{ bodies [][]byte }

func (r *recordRT) RoundTrip(req *http.Request) (*http.Response, error) {
	var b []byte
	if req.Body != nil {
		var err error
		if b, err = io.ReadAll(req.Body); err != nil {
			return nil, err
		}
		req.Body.Close()
	}
	r.bodies = append(r.bodies, b)
	return &http.Response{StatusCode: http.StatusOK, Header: http.Header{"Content-Type": {"application/json"}}, Body: io.NopCloser(strings.NewReader(`{}`)), Request: req}, nil
}

// TestTaskTransportPassesOtherRequests: what is not a tools/call (another
// method, not JSON, a body too large to look into) reaches the server
// byte for byte.
func TestTaskTransportPassesOtherRequests(t *testing.T) {
	big := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","arguments":{"pad":"` + strings.Repeat("a", maxTaskBodyBytes) + `"}}}`
	for name, body := range map[string]string{
		"another method": `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"NAME":1,"n":9007199254740993}}`,
		"not JSON":       `{"jsonrpc":`,
		"a notification": `{"jsonrpc":"2.0","method":"tools/call","params":{"name":"x"}}`,
		"over the limit": big,
	} {
		rec := &recordRT{}
		rt := TaskTransport(rec, TaskOptions{})
		req, err := http.NewRequest(http.MethodPost, "http://127.0.0.1/", io.MultiReader(strings.NewReader(body))) // unknown length
		if err != nil {
			t.Fatal(err)
		}
		resp, err := rt.RoundTrip(req)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		resp.Body.Close()
		if len(rec.bodies) != 1 || string(rec.bodies[0]) != body {
			t.Errorf("%s: the server got %d requests, the first %d bytes, want the %d sent", name, len(rec.bodies), len(rec.bodies[0]), len(body))
		}
	}
}

// lossyProxy is a proxy that loses the server's answer to the first
// tools/call it forwards, answering 502 after the server took the call.
type lossyProxy struct {
	next    http.RoundTripper
	mu      sync.Mutex
	calls   int
	dropped bool
}

func (d *lossyProxy) RoundTrip(r *http.Request) (*http.Response, error) {
	body, err := io.ReadAll(r.Body)
	r.Body.Close()
	if err != nil {
		return nil, err
	}
	r = r.Clone(r.Context())
	r.Body = io.NopCloser(strings.NewReader(string(body)))
	resp, err := d.next.RoundTrip(r)
	if err != nil || !strings.Contains(string(body), `"tools/call"`) {
		return resp, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.calls++
	if d.dropped {
		return resp, nil
	}
	d.dropped = true
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return &http.Response{StatusCode: http.StatusBadGateway, Status: "502 Bad Gateway", Header: http.Header{"Content-Type": {"text/plain"}},
		Body: io.NopCloser(strings.NewReader("upstream answer lost")), Request: r, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1}, nil
}

// TestTaskTransportRetryGetsTheSameTask: CallTool's retry of a call whose
// CreateTaskResult a proxy lost (a 502 after the server created the task)
// carries the call's idempotency key, gets the task the lost answer named,
// and the tool runs once.
func TestTaskTransportRetryGetsTheSameTask(t *testing.T) {
	keys, err := ctoken.NewKeyring(ctoken.RandomKey())
	if err != nil {
		t.Fatal(err)
	}
	tasks, err := mcptoken.NewTasks(mcptoken.TasksConfig{Keys: keys, Store: replay.NewMemoryStore(0), PollInterval: 10 * time.Millisecond, Caller: HTTPTokenUserID})
	if err != nil {
		t.Fatal(err)
	}
	s := mcp.NewServer(&mcp.Implementation{Name: "tasks", Version: "v0"}, nil)
	var mu sync.Mutex
	runs := 0
	h := func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		mu.Lock()
		runs++
		n := runs
		mu.Unlock()
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf("run %d of %s", n, req.Params.Arguments)}}}, nil
	}
	s.AddTool(&mcp.Tool{Name: "once", InputSchema: &jsonschema.Schema{Type: "object"}}, h)
	if err := tasks.Add(TaskTool("once", h, true)); err != nil {
		t.Fatal(err)
	}
	endpoint := taskEndpoint(t, s, tasks)
	proxy := &lossyProxy{next: http.DefaultTransport}
	var started []string
	opts := TaskOptions{Started: func(id string) { mu.Lock(); started = append(started, id); mu.Unlock() }}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "tasks-client", Version: "v0"}, nil).Connect(context.Background(),
		&mcp.StreamableClientTransport{Endpoint: endpoint, HTTPClient: &http.Client{Transport: TaskTransport(bearer{"alice-token", proxy}, opts)}, MaxRetries: -1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })

	res, err := CallTool(context.Background(), cs, &mcp.CallToolParams{Name: "once", Arguments: map[string]any{"n": 1}}, CallOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := text0(t, res); got != `run 1 of {"n":1}` {
		t.Fatalf("result %q", got)
	}
	mu.Lock()
	defer mu.Unlock()
	proxy.mu.Lock()
	defer proxy.mu.Unlock()
	if !proxy.dropped || proxy.calls != 2 || runs != 1 || len(started) != 1 {
		t.Fatalf("dropped %v, %d tools/call sent, the tool ran %d times, %d tasks seen; want the first answer lost, 2 calls, 1 run, 1 task", proxy.dropped, proxy.calls, runs, len(started))
	}
}

// taskFleet is one go-sdk server behind two instances' Tasks (a, then b
// once toB is called) at one endpoint, as a proxy in front of a fleet;
// each instance's Tasks has tool added with h.
type taskFleet struct {
	endpoint string
	a, b     *mcptoken.Tasks
	cur      atomic.Pointer[http.Handler]
	toB      func()
}

func newTaskFleet(t *testing.T, storeA, storeB replay.Recorder, name string, transactional bool, h mcp.ToolHandler) *taskFleet {
	t.Helper()
	keys, err := ctoken.NewKeyring(ctoken.RandomKey())
	if err != nil {
		t.Fatal(err)
	}
	s := mcp.NewServer(&mcp.Implementation{Name: "tasks", Version: "v0"}, nil)
	s.AddTool(&mcp.Tool{Name: name, InputSchema: &jsonschema.Schema{Type: "object"}}, h)
	sdk := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, &mcp.StreamableHTTPOptions{Stateless: true})
	f := &taskFleet{}
	instance := func(store replay.Recorder) (*mcptoken.Tasks, http.Handler) {
		ts, err := mcptoken.NewTasks(mcptoken.TasksConfig{Keys: keys, Store: store, Hold: time.Second, PollInterval: 10 * time.Millisecond, Caller: HTTPTokenUserID})
		if err != nil {
			t.Fatal(err)
		}
		tool := TaskTool(name, h, false)
		tool.Transactional = transactional
		if err := ts.Add(tool); err != nil {
			t.Fatal(err)
		}
		return ts, ts.Handler(sdk)
	}
	var ha, hb http.Handler
	f.a, ha = instance(storeA)
	f.b, hb = instance(storeB)
	f.cur.Store(&ha)
	f.toB = func() { f.cur.Store(&hb) }
	verify := func(_ context.Context, token string, _ *http.Request) (*auth.TokenInfo, error) {
		user, ok := testUsers[token]
		if !ok {
			return nil, auth.ErrInvalidToken
		}
		return &auth.TokenInfo{UserID: user, Expiration: time.Now().Add(time.Hour)}, nil
	}
	front := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { (*f.cur.Load()).ServeHTTP(w, r) })
	srv := httptest.NewServer(auth.RequireBearerToken(verify, nil)(front))
	t.Cleanup(srv.Close)
	f.endpoint = srv.URL
	return f
}

// client returns a session of alice's over TaskTransport with opts.
func (f *taskFleet) client(t *testing.T, opts TaskOptions) *mcp.ClientSession {
	t.Helper()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "tasks-client", Version: "v0"}, nil).Connect(context.Background(),
		&mcp.StreamableClientTransport{Endpoint: f.endpoint, HTTPClient: &http.Client{Transport: TaskTransport(bearer{"alice-token", http.DefaultTransport}, opts)}, MaxRetries: -1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

func textResult(s string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: s}}}
}

// TestCallToolTaskEnds: CallTool ends a call's task with a typed outcome,
// as ctokenmcpgo does, and the key names the way forward: a Transactional
// task whose instance stopped kept nothing and the next call under the key
// runs it again (one effect committed); a non-Transactional one is a
// TaskFailure of unknown effect that carries the key, not run again until
// the server allows it; a call whose ctx ended while its task ran carries
// the key, under which the next call gets the task's result, run once.
func TestCallToolTaskEnds(t *testing.T) {
	t.Run("a Transactional task whose instance stopped runs again under the key", func(t *testing.T) {
		store := replaytest.NewTxStore()
		var runs atomic.Int32
		release := make(chan struct{})
		t.Cleanup(func() { close(release) })
		f := newTaskFleet(t, store, store, "pay", true, func(ctx context.Context, _ *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			n := runs.Add(1)
			if err := replaytest.TxWrite(ctx, "paid"); err != nil {
				return nil, err
			}
			if n == 1 {
				store.Kill() // its instance dies mid-transaction
				<-release
				return nil, errors.New("stopped")
			}
			return textResult("paid"), nil
		})
		cs := f.client(t, TaskOptions{})
		params := &mcp.CallToolParams{Name: "pay", Arguments: map[string]any{"cents": 500}}
		_, err := CallTool(context.Background(), cs, params, CallOptions{Key: "pay-1"})
		var failure *mcptoken.TaskFailure
		if !errors.As(err, &failure) || errors.Is(err, ErrOutcomeUnknown) || !strings.Contains(err.Error(), "calling again is safe") {
			t.Fatalf("err = %v; want a TaskFailure that kept nothing", err)
		}
		res, err := CallTool(context.Background(), cs, params, CallOptions{Key: "pay-1"})
		if err != nil {
			t.Fatal(err)
		}
		if got := text0(t, res); got != "paid" || runs.Load() != 2 || store.Committed("paid") != 1 {
			t.Fatalf("result %q after %d runs, %d effects committed; want paid, 2 runs, 1 effect", got, runs.Load(), store.Committed("paid"))
		}
	})

	t.Run("a non-Transactional task whose instance stopped is a TaskFailure carrying the key", func(t *testing.T) {
		mem := replay.NewMemoryStore(0)
		dying := &replaytest.CutOff{MemoryStore: mem}
		var runs atomic.Int32
		var f *taskFleet
		f = newTaskFleet(t, dying, mem, "mail", false, func(ctx context.Context, _ *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			if runs.Add(1) == 1 {
				dying.Cut.Store(true) // instance a stops; the proxy turns to b
				f.toB()
				<-ctx.Done()
				return nil, ctx.Err()
			}
			return textResult("sent"), nil
		})
		cs := f.client(t, TaskOptions{})
		params := &mcp.CallToolParams{Name: "mail", Arguments: map[string]any{"to": "ada"}}
		for i := range 2 {
			_, err := CallTool(context.Background(), cs, params, CallOptions{Key: "mail-1"})
			var failure *mcptoken.TaskFailure
			key, ok := RetryKey(err)
			if !errors.As(err, &failure) || !errors.Is(err, ErrOutcomeUnknown) || !ok || key != "mail-1" || !strings.Contains(err.Error(), "AllowRerun") {
				t.Fatalf("call %d: err = %v (key %q); want a TaskFailure of unknown effect with the key", i+1, err, key)
			}
			if n := runs.Load(); n != 1 {
				t.Fatalf("call %d: %d runs; want 1", i+1, n)
			}
		}
		if err := f.b.AllowRerun(context.Background(), "alice", "mail", "mail-1"); err != nil {
			t.Fatal(err)
		}
		res, err := CallTool(context.Background(), cs, params, CallOptions{Key: "mail-1"})
		if err != nil {
			t.Fatal(err)
		}
		if got := text0(t, res); got != "sent" || runs.Load() != 2 {
			t.Fatalf("after AllowRerun: result %q, %d runs", got, runs.Load())
		}
	})

	t.Run("a call whose ctx ended while its task ran carries the key", func(t *testing.T) {
		store := replay.NewMemoryStore(0)
		var runs atomic.Int32
		release := make(chan struct{})
		f := newTaskFleet(t, store, store, "held", false, func(ctx context.Context, _ *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			runs.Add(1)
			select {
			case <-release:
				return textResult("released"), nil
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		})
		ctx, cancel := context.WithCancel(context.Background())
		quitter := f.client(t, TaskOptions{Started: func(string) { cancel() }})
		params := &mcp.CallToolParams{Name: "held"}
		_, err := CallTool(ctx, quitter, params, CallOptions{Key: "held-1"})
		if key, ok := RetryKey(err); !ok || key != "held-1" || !errors.Is(err, ErrOutcomeUnknown) || !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v (key %q); want the outcome unknown with the key", err, key)
		}
		close(release)
		res, err := CallTool(context.Background(), f.client(t, TaskOptions{}), params, CallOptions{Key: "held-1"})
		if err != nil {
			t.Fatal(err)
		}
		if got := text0(t, res); got != "released" || runs.Load() != 1 {
			t.Fatalf("the key's next call: %q after %d runs; want released, 1 run", got, runs.Load())
		}
	})
}
