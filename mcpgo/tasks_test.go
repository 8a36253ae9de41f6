package ctokenmcpgo

import (
	"context"
	"encoding/json"
	"errors"
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
	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
)

// taskServer is an mcp-go server with task tools behind Tasks.Handler,
// served over HTTP; "Bearer <user>" names the caller.
type taskServer struct {
	tasks    *mcptoken.Tasks
	s        *server.MCPServer
	endpoint string
	release  chan struct{} // closing it lets "held" answer
}

func newTaskServer(t testing.TB) *taskServer { return newTaskServerPolled(t, 10*time.Millisecond) }

// newTaskServerPolled is newTaskServer with a PollInterval (0: the default).
func newTaskServerPolled(t testing.TB, poll time.Duration) *taskServer {
	t.Helper()
	tasks, err := mcptoken.NewTasks(mcptoken.TasksConfig{
		Keys:         keyring(t, 7),
		Store:        replay.NewMemoryStore(0),
		PollInterval: poll,
		Caller: func(r *http.Request) (string, error) {
			u, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
			return u, nil // "" is refused
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	ts := &taskServer{tasks: tasks, release: make(chan struct{})}
	ts.s = server.NewMCPServer("tasks", "v0", server.WithToolCapabilities(true),
		server.WithExtensions(map[string]any{mcptoken.TasksExtension: map[string]any{}}))
	add := func(name string, required bool, h server.ToolHandlerFunc) {
		ts.s.AddTool(mcp.NewTool(name), h)
		if err := tasks.Add(TaskTool(name, h, required)); err != nil {
			t.Fatal(err)
		}
	}
	add("echo", false, func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		who, _ := ContextCaller(ctx)
		return mcp.NewToolResultText(req.GetString("say", "") + " for " + who), nil
	})
	add("args", false, func(_ context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return mcp.NewToolResultText(string(req.Params.RawArguments)), nil
	})
	add("required", true, func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return mcp.NewToolResultText("ran"), nil
	})
	add("confirm", false, func(_ context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		a := server.ElicitationResponse(req.Params.InputResponses, "sure")
		b := server.ElicitationResponse(req.Params.InputResponses, "really")
		if a != nil && b != nil {
			return mcp.NewToolResultText("confirmed: " + string(a.Action) + "," + string(b.Action) + " state " + req.Params.RequestState), nil
		}
		return server.NewInputRequestBuilder("round-one").
			Elicit("sure", mcp.ElicitationParams{Message: "Sure?"}).
			Elicit("really", mcp.ElicitationParams{Message: "Really?"}).ToolResult(), nil
	})
	add("asks-forever", false, func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return server.NewInputRequestBuilder("").Elicit("again", mcp.ElicitationParams{Message: "Again?"}).ToolResult(), nil
	})
	add("no-input", false, func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return server.NewInputRequestBuilder("state only").ToolResult(), nil
	})
	add("fails", false, func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return nil, errors.New("the job broke")
	})
	add("nil-result", false, func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return nil, nil
	})
	add("held", false, func(ctx context.Context, _ mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		select {
		case <-ts.release:
			return mcp.NewToolResultText("released"), nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	})
	h := server.NewStreamableHTTPServer(ts.s, server.WithHTTPContextFunc(bearerCaller))
	srv := httptest.NewServer(tasks.Handler(h))
	t.Cleanup(srv.Close)
	ts.endpoint = srv.URL + "/mcp"
	return ts
}

// answerAll accepts every elicitation, counting the keys it was asked.
type answerAll struct {
	mu    sync.Mutex
	asked map[string]int
}

func (a *answerAll) input(_ context.Context, reqs mcp.InputRequests) (mcp.InputResponses, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.asked == nil {
		a.asked = map[string]int{}
	}
	out := mcp.InputResponses{}
	for k := range reqs {
		a.asked[k]++
		out[k] = mcp.NewElicitationInputResponse(mcp.ElicitationResult{ElicitationResponse: mcp.ElicitationResponse{Action: mcp.ElicitationResponseActionAccept, Content: map[string]any{}}})
	}
	return out, nil
}

func taskCall(p *peer, tool string, args map[string]any, topts *TaskOptions) (*mcp.CallToolResult, error) {
	req := mcp.CallToolRequest{}
	req.Params.Name = tool
	req.Params.Arguments = args
	return CallTool(p.ctx, p.c, req, CallOptions{Task: topts})
}

func TestTasks(t *testing.T) {
	ts := newTaskServer(t)
	alice := overHTTP(t, ts.endpoint, "alice", nil)
	if !mcp.IsModernProtocol(alice.c.ProtocolVersion()) {
		t.Fatalf("the test client speaks %q, not protocol 2026-07-28", alice.c.ProtocolVersion())
	}

	t.Run("a call answered with a task gets the task's result", func(t *testing.T) {
		var started []string
		res, err := taskCall(alice, "echo", map[string]any{"say": "hi"}, &TaskOptions{Started: func(id string) { started = append(started, id) }})
		if err != nil {
			t.Fatal(err)
		}
		if got := text(res); got != "hi for alice" {
			t.Fatalf("result %q, want %q (the handler runs as the task's caller)", got, "hi for alice")
		}
		if len(started) != 1 || started[0] == "" || strings.Contains(started[0], "alice") {
			t.Fatalf("Started got %q, want one opaque task ID", started)
		}
	})

	t.Run("the call's numbers reach the task as sent", func(t *testing.T) {
		req := mcp.CallToolRequest{}
		req.Params.Name = "args"
		req.Params.Arguments = json.RawMessage(`{"n":9007199254740993}`)
		res, err := CallTool(alice.ctx, alice.c, req, CallOptions{Task: &TaskOptions{}})
		if err != nil {
			t.Fatal(err)
		}
		if got := text(res); !strings.Contains(got, "9007199254740993") {
			t.Fatalf("the task got %s", got)
		}
	})

	t.Run("input requests are answered once each, then the handler runs again", func(t *testing.T) {
		a := &answerAll{}
		res, err := taskCall(alice, "confirm", nil, &TaskOptions{Input: a.input})
		if err != nil {
			t.Fatal(err)
		}
		if got, want := text(res), "confirmed: accept,accept state round-one"; got != want {
			t.Fatalf("result %q, want %q", got, want)
		}
		if a.asked["sure"] != 1 || a.asked["really"] != 1 || len(a.asked) != 2 {
			t.Fatalf("Input was asked %v, want each key once", a.asked)
		}
	})

	t.Run("a task asking for input without an Input handler fails the call", func(t *testing.T) {
		if _, err := taskCall(alice, "confirm", nil, &TaskOptions{}); err == nil || !strings.Contains(err.Error(), "no input handler") {
			t.Fatalf("err = %v, want the missing input handler named", err)
		}
	})

	t.Run("a handler error fails the task with a JSON-RPC error", func(t *testing.T) {
		_, err := taskCall(alice, "fails", nil, &TaskOptions{})
		var f *mcptoken.TaskFailure
		if !errors.As(err, &f) || f.Code != -32603 {
			t.Fatalf("err = %v, want a TaskFailure with -32603", err)
		}
		if strings.Contains(err.Error(), "the job broke") {
			t.Fatalf("err = %v: the handler's own error text reached the client", err)
		}
	})

	for _, tool := range []string{"nil-result", "no-input", "asks-forever"} {
		t.Run("the task of a handler that misbehaves fails: "+tool, func(t *testing.T) {
			_, err := taskCall(alice, tool, nil, &TaskOptions{Input: (&answerAll{}).input})
			var f *mcptoken.TaskFailure
			if !errors.As(err, &f) {
				t.Fatalf("err = %v, want a TaskFailure", err)
			}
		})
	}

	t.Run("a cancelled task is ErrTaskCancelled", func(t *testing.T) {
		_, err := taskCall(alice, "held", nil, &TaskOptions{Started: func(id string) {
			if err := ts.tasks.Cancel(context.Background(), "alice", id); err != nil {
				t.Error(err)
			}
		}})
		if !errors.Is(err, mcptoken.ErrTaskCancelled) {
			t.Fatalf("err = %v, want ErrTaskCancelled", err)
		}
	})

	t.Run("without the extension an optional task tool runs synchronously", func(t *testing.T) {
		res, err := alice.call("echo", map[string]any{"say": "sync"})
		if err != nil {
			t.Fatal(err)
		}
		if got := text(res); got != "sync for alice" {
			t.Fatalf("result %q", got)
		}
	})

	t.Run("without the extension a required task tool is refused with -32021", func(t *testing.T) {
		_, err := alice.call("required", nil)
		if !errors.As(err, new(mcp.MissingRequiredClientCapabilityError)) {
			t.Fatalf("err = %v, want -32021", err)
		}
	})

	t.Run("a task outlives its client and another client of the caller resumes it", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		var id string
		req := mcp.CallToolRequest{}
		req.Params.Name = "held"
		_, err := CallTool(ctx, alice.c, req, CallOptions{Task: &TaskOptions{Started: func(s string) { id = s; cancel() }}})
		if !errors.Is(err, context.Canceled) || id == "" {
			t.Fatalf("err = %v, id %q: want the call ended by its context after the task started", err, id)
		}
		bob := overHTTP(t, ts.endpoint, "bob", nil)
		if _, err := ResumeTask(bob.ctx, bob.c, id, TaskOptions{}); !errors.Is(err, mcp.ErrInvalidParams) {
			t.Fatalf("another caller's resume: err = %v, want -32602", err)
		}
		close(ts.release)
		again := overHTTP(t, ts.endpoint, "alice", nil)
		res, err := ResumeTask(again.ctx, again.c, id, TaskOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got := text(res); got != "released" {
			t.Fatalf("result %q", got)
		}
	})

	t.Run("a forged task ID is refused with -32602", func(t *testing.T) {
		if _, err := ResumeTask(alice.ctx, alice.c, "v1e.forged", TaskOptions{}); !errors.Is(err, mcp.ErrInvalidParams) {
			t.Fatalf("err = %v, want -32602", err)
		}
	})
}

func TestTasksRefusals(t *testing.T) {
	ts := newTaskServer(t)
	p := overHTTP(t, ts.endpoint, "alice", nil)
	if _, err := ResumeTask(p.ctx, nil, "id", TaskOptions{}); !errors.Is(err, ctoken.ErrConfig) {
		t.Errorf("ResumeTask with a nil client: err = %v", err)
	}
	if _, err := ResumeTask(p.ctx, p.c, "", TaskOptions{}); !errors.Is(err, ctoken.ErrConfig) {
		t.Errorf("ResumeTask with an empty ID: err = %v", err)
	}
	//lint:ignore SA1019 a client on a protocol before 2026-07-28 is what is refused
	legacy := overHTTP(t, ts.endpoint, "alice", nil, client.WithLegacyProtocolOnly())
	req := mcp.CallToolRequest{}
	req.Params.Name = "echo"
	if _, err := CallTool(legacy.ctx, legacy.c, req, CallOptions{Task: &TaskOptions{}}); !errors.Is(err, ctoken.ErrConfig) {
		t.Errorf("CallTool with Task from a client on %q: err = %v, want ctoken.ErrConfig", legacy.c.ProtocolVersion(), err)
	}
	if _, err := ResumeTask(legacy.ctx, legacy.c, "id", TaskOptions{}); !errors.Is(err, ctoken.ErrConfig) {
		t.Errorf("ResumeTask from a client on %q: err = %v, want ctoken.ErrConfig", legacy.c.ProtocolVersion(), err)
	}
}

// taskFleet is one mcp-go server behind two instances' Tasks (a, then b
// once toB is called) at one endpoint, as a proxy in front of a fleet;
// "Bearer <user>" names the caller.
type taskFleet struct {
	endpoint string
	a, b     *mcptoken.Tasks
	cur      atomic.Pointer[http.Handler]
}

func (f *taskFleet) toB(h http.Handler) { f.cur.Store(&h) }

func newTaskFleet(t *testing.T, storeA, storeB replay.Recorder, name string, transactional bool, h server.ToolHandlerFunc) (*taskFleet, http.Handler) {
	t.Helper()
	keys := keyring(t, 11)
	s := server.NewMCPServer("tasks", "v0", server.WithToolCapabilities(true),
		server.WithExtensions(map[string]any{mcptoken.TasksExtension: map[string]any{}}))
	s.AddTool(mcp.NewTool(name), h)
	sdk := server.NewStreamableHTTPServer(s, server.WithHTTPContextFunc(bearerCaller))
	instance := func(store replay.Recorder) (*mcptoken.Tasks, http.Handler) {
		ts, err := mcptoken.NewTasks(mcptoken.TasksConfig{Keys: keys, Store: store, Hold: time.Second, PollInterval: 10 * time.Millisecond,
			Caller: func(r *http.Request) (string, error) {
				u, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
				return u, nil
			}})
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
	f := &taskFleet{}
	var ha, hb http.Handler
	f.a, ha = instance(storeA)
	f.b, hb = instance(storeB)
	f.cur.Store(&ha)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { (*f.cur.Load()).ServeHTTP(w, r) }))
	t.Cleanup(srv.Close)
	f.endpoint = srv.URL + "/mcp"
	return f, hb
}

// TestCallToolTaskEnds: CallTool ends a call's task with a typed outcome,
// as ctokenmcp does, and the key names the way forward: a Transactional
// task whose instance stopped kept nothing and the next call under the key
// runs it again (one effect committed); a non-Transactional one is a
// TaskFailure of unknown effect that carries the key, not run again until
// the server allows it; a call whose ctx ended while its task ran carries
// the key, under which the next call gets the task's result, run once.
func TestCallToolTaskEnds(t *testing.T) {
	call := func(ctx context.Context, p *peer, tool, key string, topts *TaskOptions) (*mcp.CallToolResult, error) {
		req := mcp.CallToolRequest{}
		req.Params.Name = tool
		req.Params.Arguments = map[string]any{"n": 1}
		return CallTool(ctx, p.c, req, CallOptions{Key: key, Task: topts})
	}

	t.Run("a Transactional task whose instance stopped runs again under the key", func(t *testing.T) {
		store := replaytest.NewTxStore()
		var runs atomic.Int32
		release := make(chan struct{})
		t.Cleanup(func() { close(release) })
		f, _ := newTaskFleet(t, store, store, "pay", true, func(ctx context.Context, _ mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			n := runs.Add(1)
			if err := replaytest.TxWrite(ctx, "paid"); err != nil {
				return nil, err
			}
			if n == 1 {
				store.Kill() // its instance dies mid-transaction
				<-release
				return nil, errors.New("stopped")
			}
			return mcp.NewToolResultText("paid"), nil
		})
		alice := overHTTP(t, f.endpoint, "alice", nil)
		_, err := call(alice.ctx, alice, "pay", "pay-1", &TaskOptions{})
		var failure *mcptoken.TaskFailure
		if !errors.As(err, &failure) || errors.Is(err, ErrOutcomeUnknown) || !strings.Contains(err.Error(), "calling again is safe") {
			t.Fatalf("err = %v; want a TaskFailure that kept nothing", err)
		}
		res, err := call(alice.ctx, alice, "pay", "pay-1", &TaskOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got := text(res); got != "paid" || runs.Load() != 2 || store.Committed("paid") != 1 {
			t.Fatalf("result %q after %d runs, %d effects committed; want paid, 2 runs, 1 effect", got, runs.Load(), store.Committed("paid"))
		}
	})

	t.Run("a non-Transactional task whose instance stopped is a TaskFailure carrying the key", func(t *testing.T) {
		mem := replay.NewMemoryStore(0)
		dying := &replaytest.CutOff{MemoryStore: mem}
		var runs atomic.Int32
		var f *taskFleet
		var hb http.Handler
		f, hb = newTaskFleet(t, dying, mem, "mail", false, func(ctx context.Context, _ mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			if runs.Add(1) == 1 {
				dying.Cut.Store(true) // instance a stops; the proxy turns to b
				f.toB(hb)
				<-ctx.Done()
				return nil, ctx.Err()
			}
			return mcp.NewToolResultText("sent"), nil
		})
		alice := overHTTP(t, f.endpoint, "alice", nil)
		for i := range 2 {
			_, err := call(alice.ctx, alice, "mail", "mail-1", &TaskOptions{})
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
		res, err := call(alice.ctx, alice, "mail", "mail-1", &TaskOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got := text(res); got != "sent" || runs.Load() != 2 {
			t.Fatalf("after AllowRerun: result %q, %d runs", got, runs.Load())
		}
	})

	t.Run("a call whose ctx ended while its task ran carries the key", func(t *testing.T) {
		store := replay.NewMemoryStore(0)
		var runs atomic.Int32
		release := make(chan struct{})
		f, _ := newTaskFleet(t, store, store, "held", false, func(ctx context.Context, _ mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			runs.Add(1)
			select {
			case <-release:
				return mcp.NewToolResultText("released"), nil
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		})
		alice := overHTTP(t, f.endpoint, "alice", nil)
		ctx, cancel := context.WithCancel(context.Background())
		_, err := call(ctx, alice, "held", "held-1", &TaskOptions{Started: func(string) { cancel() }})
		if key, ok := RetryKey(err); !ok || key != "held-1" || !errors.Is(err, ErrOutcomeUnknown) || !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v (key %q); want the outcome unknown with the key", err, key)
		}
		close(release)
		res, err := call(context.Background(), overHTTP(t, f.endpoint, "alice", nil), "held", "held-1", &TaskOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got := text(res); got != "released" || runs.Load() != 1 {
			t.Fatalf("the key's next call: %q after %d runs; want released, 1 run", got, runs.Load())
		}
	})
}
