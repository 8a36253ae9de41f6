package mcptokentest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ctoken/ctoken"
	"github.com/ctoken/ctoken/mcptoken"
	"github.com/ctoken/ctoken/replay"
)

// keyedServer is one instance's Tasks behind its Handler, with the caller
// named by the X-Caller header.
type keyedServer struct {
	t  *testing.T
	ts *mcptoken.Tasks
	h  http.Handler
}

func newKeyedServer(t *testing.T, s replay.Recorder, keys *ctoken.Keyring, tool mcptoken.TaskTool) *keyedServer {
	t.Helper()
	ts, err := mcptoken.NewTasks(mcptoken.TasksConfig{Keys: keys, Store: s, TTL: time.Minute, Hold: contractHold, PollInterval: 20 * time.Millisecond,
		Caller: func(r *http.Request) (string, error) { return r.Header.Get("X-Caller"), nil }})
	if err != nil {
		t.Fatal(err)
	}
	if err := ts.Add(tool); err != nil {
		t.Fatal(err)
	}
	sdk := http.HandlerFunc(func(http.ResponseWriter, *http.Request) { t.Error("a task call reached the SDK") })
	return &keyedServer{t: t, ts: ts, h: ts.Handler(sdk)}
}

// keyedAnswer is the answer to a tools/call through the Handler.
type keyedAnswer struct {
	Result struct {
		ResultType string `json:"resultType"`
		TaskID     string `json:"taskId"`
		Status     string `json:"status"`
	} `json:"result"`
	Error *struct {
		Code int `json:"code"`
		Data struct {
			CtokenCode int `json:"ctokenCode"`
		} `json:"data"`
	} `json:"error"`
}

// call sends caller's tools/call of job with args and the idempotency key.
func (s *keyedServer) call(caller, args, key string) keyedAnswer {
	s.t.Helper()
	body := fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"job","arguments":%s,"_meta":{%q:%q,"io.modelcontextprotocol/clientCapabilities":{"extensions":{%q:{}}}}}}`,
		args, mcptoken.MetaIdempotencyKey, key, mcptoken.TasksExtension)
	r := httptest.NewRequest(http.MethodPost, "/mcp", strings.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("X-Caller", caller)
	w := httptest.NewRecorder()
	s.h.ServeHTTP(w, r)
	var a keyedAnswer
	if w.Code != http.StatusOK || json.Unmarshal(w.Body.Bytes(), &a) != nil {
		s.t.Fatalf("tools/call answered %d %s", w.Code, w.Body.String())
	}
	return a
}

// task returns the task of an answer, failing the test for any other.
func (a keyedAnswer) task(t *testing.T) string {
	t.Helper()
	if a.Error != nil || a.Result.ResultType != "task" || a.Result.TaskID == "" {
		t.Fatalf("answer %+v; want a task", a)
	}
	return a.Result.TaskID
}

// tasksKeyedRetry: a retry of a task's tools/call with its idempotency key
// (ctokenmcp's after a lost answer), on either instance, gets the task the
// first created, which runs once; the key with other arguments is refused
// with CodeKeyReused, creating nothing; another caller's same key is its
// own task.
func tasksKeyedRetry(t *testing.T, sa, sb replay.Recorder, keys *ctoken.Keyring) {
	release := make(chan struct{})
	runs := map[string]*atomic.Int32{"alice": {}, "bob": {}}
	tool := mcptoken.TaskTool{Name: "job", Run: func(ctx context.Context, c *mcptoken.TaskCall) (json.RawMessage, error) {
		runs[c.Caller].Add(1)
		<-release
		return json.Marshal(map[string]any{"content": []any{map[string]any{"type": "text", "text": c.Caller + ":" + string(c.Arguments)}}})
	}}
	a, b := newKeyedServer(t, sa, keys, tool), newKeyedServer(t, sb, keys, tool)
	first := a.call("alice", `{"n":1}`, "k-1").task(t)
	retried := b.call("alice", `{ "n" : 1 }`, "k-1")
	again := retried.task(t)
	if retried.Result.Status != "working" {
		t.Fatalf("the retry's task is %s; want working", retried.Result.Status)
	}
	if ans := b.call("alice", `{"n":2}`, "k-1"); ans.Error == nil || ans.Error.Code != -32602 || ans.Error.Data.CtokenCode != mcptoken.CodeKeyReused {
		t.Fatalf("the key with other arguments: %+v; want -32602 with ctokenCode %d", ans, mcptoken.CodeKeyReused)
	}
	bobs := a.call("bob", `{"n":1}`, "k-1").task(t)
	ctx := context.Background()
	for _, id := range []string{first, again} {
		if _, err := a.ts.Get(ctx, "bob", id); !errors.Is(err, mcptoken.ErrTaskInvalid) {
			t.Fatalf("bob reads alice's task: %v; want ErrTaskInvalid", err)
		}
	}
	close(release)
	want := `alice:{\"n\":1}`
	for _, id := range []string{first, again} {
		if st := await(t, b.ts, "alice", id, status("completed")); !strings.Contains(string(st.Result), want) {
			t.Fatalf("result %s; want %s", st.Result, want)
		}
	}
	if st := await(t, a.ts, "bob", bobs, status("completed")); !strings.Contains(string(st.Result), `bob:`) {
		t.Fatalf("bob's result %s", st.Result)
	}
	// A retry after the end gets the outcome; other arguments are still
	// refused.
	late := a.call("alice", `{"n":1}`, "k-1")
	if st := await(t, a.ts, "alice", late.task(t), status("completed")); late.Result.Status != "completed" || !strings.Contains(string(st.Result), want) {
		t.Fatalf("a retry after the end: %+v, %s", late, st.Result)
	}
	if ans := a.call("alice", `{"n":3}`, "k-1"); ans.Error == nil || ans.Error.Data.CtokenCode != mcptoken.CodeKeyReused {
		t.Fatalf("the key with other arguments after the end: %+v", ans)
	}
	if n, m := runs["alice"].Load(), runs["bob"].Load(); n != 1 || m != 1 {
		t.Fatalf("alice's task ran %d times, bob's %d; want once each", n, m)
	}
}

// tasksKeyedCancel: the task ID a retry got cancels the task on the
// instance that runs it.
func tasksKeyedCancel(t *testing.T, sa, sb replay.Recorder, keys *ctoken.Keyring) {
	started, stopped := make(chan struct{}), make(chan struct{})
	var runs atomic.Int32
	tool := mcptoken.TaskTool{Name: "job", Run: func(ctx context.Context, _ *mcptoken.TaskCall) (json.RawMessage, error) {
		if runs.Add(1) != 1 {
			return nil, errors.New("the task ran twice")
		}
		close(started)
		<-ctx.Done()
		close(stopped)
		return nil, ctx.Err()
	}}
	a, b := newKeyedServer(t, sa, keys, tool), newKeyedServer(t, sb, keys, tool)
	first := a.call("alice", `{}`, "k-2").task(t)
	<-started
	again := b.call("alice", `{}`, "k-2").task(t)
	if n := runs.Load(); n != 1 {
		t.Fatalf("the task ran %d times", n)
	}
	ctx := context.Background()
	if err := b.ts.Cancel(ctx, "bob", again); !errors.Is(err, mcptoken.ErrTaskInvalid) {
		t.Fatalf("bob cancels alice's task: %v", err)
	}
	if err := b.ts.Cancel(ctx, "alice", again); err != nil {
		t.Fatalf("Cancel: %v", err)
	}
	<-stopped // the running instance saw the cancel through the store
	for _, id := range []string{first, again} {
		if st := await(t, a.ts, "alice", id, status("cancelled")); st.Status != "cancelled" {
			t.Fatalf("after cancel: %s", st.Status)
		}
	}
}
