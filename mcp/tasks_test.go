package ctokenmcp

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/ctoken/ctoken"
	"github.com/ctoken/ctoken/mcptoken"
	"github.com/ctoken/ctoken/replay"
	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func newTestTasks(t *testing.T) *mcptoken.Tasks {
	t.Helper()
	keys, err := ctoken.NewKeyring(ctoken.RandomKey())
	if err != nil {
		t.Fatal(err)
	}
	ts, err := mcptoken.NewTasks(mcptoken.TasksConfig{Keys: keys, Store: replay.NewMemoryStore(0), Hold: time.Second, PollInterval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return ts
}

// awaitTask reads the task until done accepts it.
func awaitTask(t *testing.T, ts *mcptoken.Tasks, id string, done func(mcptoken.TaskState) bool) mcptoken.TaskState {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		st, err := ts.Get(context.Background(), "alice", id)
		if err != nil {
			t.Fatal(err)
		}
		if done(st) {
			return st
		}
	}
	t.Fatal("the task did not get there")
	return mcptoken.TaskState{}
}

func TestTaskTool(t *testing.T) {
	t.Run("runs an MRTR handler inside the task, its state kept in the instance", func(t *testing.T) {
		ts := newTestTasks(t)
		var states []string
		h := func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			states = append(states, req.Params.RequestState)
			if r, ok := req.Params.InputResponses["name"].(*mcp.ElicitResult); ok && r.Action == "accept" {
				return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "hello " + r.Content["name"].(string)}}}, nil
			}
			return &mcp.CallToolResult{
				InputRequests: mcp.InputRequestMap{"name": &mcp.ElicitParams{Message: "name?", RequestedSchema: &jsonschema.Schema{Type: "object"}}},
				RequestState:  "round-1",
			}, nil
		}
		st, err := ts.Create(context.Background(), TaskTool("hello", h, false), &mcptoken.TaskCall{Caller: "alice", Arguments: json.RawMessage(`{}`)})
		if err != nil {
			t.Fatal(err)
		}
		in := awaitTask(t, ts, st.ID, func(s mcptoken.TaskState) bool { return s.Status == "input_required" })
		if !strings.Contains(string(in.InputRequests["name"]), "elicitation/create") {
			t.Fatalf("input request %s", in.InputRequests["name"])
		}
		if err := ts.Update(context.Background(), "alice", st.ID, map[string]json.RawMessage{"name": json.RawMessage(`{"action":"accept","content":{"name":"Ada"}}`)}); err != nil {
			t.Fatal(err)
		}
		done := awaitTask(t, ts, st.ID, func(s mcptoken.TaskState) bool { return s.Status == "completed" })
		if !strings.Contains(string(done.Result), "hello Ada") || len(states) != 2 || states[1] != "round-1" {
			t.Fatalf("result %s, states %q", done.Result, states)
		}
	})
	t.Run("the handler sees the creating request's TokenInfo, not its end", func(t *testing.T) {
		ts := newTestTasks(t)
		seen := make(chan *mcp.RequestExtra, 1)
		h := func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			seen <- req.Extra
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "ok"}}}, ctx.Err()
		}
		var created mcptoken.TaskState
		var cerr error
		create := auth.RequireBearerToken(func(context.Context, string, *http.Request) (*auth.TokenInfo, error) {
			return &auth.TokenInfo{UserID: "ada", Expiration: time.Now().Add(time.Hour)}, nil
		}, nil)(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
			ctx, cancel := context.WithCancel(r.Context())
			created, cerr = ts.Create(ctx, TaskTool("who", h, false), &mcptoken.TaskCall{Caller: "alice", Arguments: json.RawMessage(`{}`)})
			cancel() // the request ends before the task does
		}))
		r := httptest.NewRequest(http.MethodPost, "/", nil)
		r.Header.Set("Authorization", "Bearer t")
		create.ServeHTTP(httptest.NewRecorder(), r)
		if cerr != nil {
			t.Fatal(cerr)
		}
		if extra := <-seen; extra == nil || extra.TokenInfo == nil || extra.TokenInfo.UserID != "ada" {
			t.Fatalf("req.Extra inside the task: %+v", extra)
		}
		if got := awaitTask(t, ts, created.ID, func(s mcptoken.TaskState) bool { return s.Status != "working" }); got.Status != "completed" {
			t.Fatalf("task %+v", got)
		}
	})
	t.Run("a handler error fails the task", func(t *testing.T) {
		ts := newTestTasks(t)
		h := func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return nil, errors.New("boom")
		}
		st, err := ts.Create(context.Background(), TaskTool("boom", h, true), &mcptoken.TaskCall{Caller: "alice"})
		if err != nil {
			t.Fatal(err)
		}
		if got := awaitTask(t, ts, st.ID, func(s mcptoken.TaskState) bool { return s.Status != "working" }); got.Status != "failed" || strings.Contains(got.ErrorMessage, "boom") {
			t.Fatalf("task %+v", got)
		}
	})
	t.Run("a nil result fails the task", func(t *testing.T) {
		ts := newTestTasks(t)
		h := func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) { return nil, nil }
		st, err := ts.Create(context.Background(), TaskTool("nil", h, false), &mcptoken.TaskCall{Caller: "alice"})
		if err != nil {
			t.Fatal(err)
		}
		if got := awaitTask(t, ts, st.ID, func(s mcptoken.TaskState) bool { return s.Status != "working" }); got.Status != "failed" {
			t.Fatalf("task %+v", got)
		}
	})
	t.Run("an answer of no known shape fails the task", func(t *testing.T) {
		ts := newTestTasks(t)
		h := func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{InputRequests: mcp.InputRequestMap{"k": &mcp.ElicitParams{Message: "?"}}}, nil
		}
		st, err := ts.Create(context.Background(), TaskTool("odd", h, false), &mcptoken.TaskCall{Caller: "alice"})
		if err != nil {
			t.Fatal(err)
		}
		awaitTask(t, ts, st.ID, func(s mcptoken.TaskState) bool { return s.Status == "input_required" })
		if err := ts.Update(context.Background(), "alice", st.ID, map[string]json.RawMessage{"k": json.RawMessage(`{"neither":1}`)}); err != nil {
			t.Fatal(err)
		}
		if got := awaitTask(t, ts, st.ID, func(s mcptoken.TaskState) bool { return s.Status != "input_required" && s.Status != "working" }); got.Status != "failed" {
			t.Fatalf("task %+v", got)
		}
	})
}

func TestHTTPTokenUserID(t *testing.T) {
	r := httptest.NewRequest(http.MethodPost, "/", nil)
	if id, err := HTTPTokenUserID(r); !errors.Is(err, ErrNoCaller) || id != "" {
		t.Fatalf("without a token: %q, %v", id, err)
	}
	var got string
	h := auth.RequireBearerToken(func(context.Context, string, *http.Request) (*auth.TokenInfo, error) {
		return &auth.TokenInfo{UserID: "ada", Expiration: time.Now().Add(time.Hour)}, nil
	}, nil)(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		got, _ = HTTPTokenUserID(r)
	}))
	r.Header.Set("Authorization", "Bearer t")
	h.ServeHTTP(httptest.NewRecorder(), r)
	if got != "ada" {
		t.Fatalf("behind RequireBearerToken: %q", got)
	}
}
