package mcptoken

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
	"testing"
	"testing/iotest"
	"time"

	"github.com/ctoken/ctoken"
	"github.com/ctoken/ctoken/replay"
)

// taskServer is a Tasks handler in front of a stand-in SDK that answers
// every request it is handed with {"sdk":true}.
type taskServer struct {
	t      *testing.T
	tasks  *Tasks
	h      http.Handler
	sdk    int // requests the stand-in SDK saw
	caller string
}

func newTaskServer(t *testing.T) *taskServer {
	t.Helper()
	keys, err := ctoken.NewKeyring(ctoken.RandomKey())
	if err != nil {
		t.Fatal(err)
	}
	s := &taskServer{t: t, caller: "alice"}
	s.tasks, err = NewTasks(TasksConfig{Keys: keys, Store: replay.NewMemoryStore(0), Hold: time.Second, PollInterval: 10 * time.Millisecond,
		Caller: func(*http.Request) (string, error) {
			if s.caller == "" {
				return "", errors.New("not signed in")
			}
			return s.caller, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	must(t, s.tasks.Add(TaskTool{Name: "slow", Run: func(ctx context.Context, c *TaskCall) (json.RawMessage, error) {
		select {
		case <-release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return json.RawMessage(`{"content":[{"type":"text","text":"slow done"}]}`), nil
	}}))
	must(t, s.tasks.Add(TaskTool{Name: "quick", Required: true, Run: func(ctx context.Context, c *TaskCall) (json.RawMessage, error) {
		return json.Marshal(map[string]any{"content": []any{map[string]any{"type": "text", "text": "args " + string(c.Arguments)}}})
	}}))
	must(t, s.tasks.Add(TaskTool{Name: "asking", Ask: func(c *TaskCall) map[string]json.RawMessage {
		if c.InputResponses["who"] != nil {
			return nil
		}
		return map[string]json.RawMessage{"who": json.RawMessage(`{"method":"elicitation/create","params":{"message":"who?"}}`)}
	}, Run: func(ctx context.Context, c *TaskCall) (json.RawMessage, error) {
		return json.Marshal(map[string]any{"content": []any{map[string]any{"type": "text", "text": "hi " + string(c.InputResponses["who"])}}})
	}}))
	must(t, s.tasks.Add(TaskTool{Name: "broken", Run: func(context.Context, *TaskCall) (json.RawMessage, error) {
		panic("tool bug")
	}}))
	s.h = s.tasks.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.sdk++
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"sdk":true}`))
	}))
	return s
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

var declared = map[string]any{"io.modelcontextprotocol/clientCapabilities": map[string]any{"extensions": map[string]any{TasksExtension: map[string]any{}}}}

// declaredModern is declared as a 2026-07-28 client sends it.
var declaredModern = map[string]any{metaProtocolVersion: "2026-07-28", "io.modelcontextprotocol/clientCapabilities": declared["io.modelcontextprotocol/clientCapabilities"]}

// rpc posts one request and returns the HTTP status and the decoded body.
func (s *taskServer) rpc(method string, params map[string]any, header map[string]string) (int, map[string]any) {
	s.t.Helper()
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 7, "method": method, "params": params})
	req := jsonPost(bytes.NewReader(body))
	for k, v := range header {
		req.Header.Set(k, v)
	}
	w := httptest.NewRecorder()
	s.h.ServeHTTP(w, req)
	var out map[string]any
	if err := json.Unmarshal(w.Body.Bytes(), &out); err != nil {
		s.t.Fatalf("%s: answer %q is not JSON", method, w.Body.String())
	}
	return w.Code, out
}

func with(params map[string]any, meta map[string]any) map[string]any {
	if meta != nil {
		params["_meta"] = meta
	}
	return params
}

func errCode(out map[string]any) int {
	e, _ := out["error"].(map[string]any)
	c, _ := e["code"].(float64)
	return int(c)
}

func result(t *testing.T, out map[string]any) map[string]any {
	t.Helper()
	r, ok := out["result"].(map[string]any)
	if !ok {
		t.Fatalf("no result in %v", out)
	}
	return r
}

// create calls tool as a declaring client and returns its taskId.
func (s *taskServer) create(tool string) string {
	s.t.Helper()
	_, out := s.rpc("tools/call", with(map[string]any{"name": tool, "arguments": map[string]any{"n": 1}}, declared), nil)
	r := result(s.t, out)
	id, _ := r["taskId"].(string)
	if r["resultType"] != "task" || r["status"] != "working" || id == "" {
		s.t.Fatalf("tools/call %s: %v", tool, r)
	}
	return id
}

// await polls tasks/get until the task leaves status working.
func (s *taskServer) await(id string) map[string]any {
	s.t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		_, out := s.rpc("tasks/get", with(map[string]any{"taskId": id}, declared), nil)
		if r := result(s.t, out); r["status"] != "working" {
			return r
		}
	}
	s.t.Fatal("task still working")
	return nil
}

func TestTasksHandler(t *testing.T) {
	t.Run("creates a flat CreateTaskResult and inlines the result on tasks/get", func(t *testing.T) {
		s := newTaskServer(t)
		_, out := s.rpc("tools/call", with(map[string]any{"name": "quick", "arguments": map[string]any{"n": 1}}, declared), nil)
		r := result(t, out)
		for _, k := range []string{"result", "error", "inputRequests", "task", "requestState", "ttl", "pollInterval"} {
			if _, ok := r[k]; ok {
				t.Errorf("CreateTaskResult carries %q", k)
			}
		}
		if r["ttlMs"] != float64(time.Hour.Milliseconds()) || r["pollIntervalMs"] != float64(10) {
			t.Errorf("ttlMs, pollIntervalMs = %v, %v", r["ttlMs"], r["pollIntervalMs"])
		}
		got := s.await(r["taskId"].(string))
		res, _ := got["result"].(map[string]any)
		if got["status"] != "completed" || got["resultType"] != "complete" || !strings.Contains(mustJSON(t, res), `args {\"n\":1}`) {
			t.Fatalf("tasks/get: %v", got)
		}
		if res["resultType"] != "complete" {
			t.Errorf("the task's result is not what tools/call returns: resultType %v", res["resultType"])
		}
		if s.sdk != 0 {
			t.Fatalf("the SDK saw %d requests", s.sdk)
		}
	})
	t.Run("a panicking tool fails the task with a JSON-RPC error and no result", func(t *testing.T) {
		s := newTaskServer(t)
		got := s.await(s.create("broken"))
		e, _ := got["error"].(map[string]any)
		if _, has := got["result"]; got["status"] != "failed" || e["code"] != float64(codeInternal) || has {
			t.Fatalf("tasks/get: %v", got)
		}
		if msg, _ := got["statusMessage"].(string); msg == "" || msg != e["message"] {
			t.Errorf("statusMessage %q, error message %q", msg, e["message"])
		}
	})
	t.Run("cancel acks with an empty result, on a running and on a finished task", func(t *testing.T) {
		s := newTaskServer(t)
		id := s.create("slow")
		for i := 0; i < 2; i++ {
			_, out := s.rpc("tasks/cancel", with(map[string]any{"taskId": id}, declared), nil)
			if r := result(t, out); len(r) != 1 || r["resultType"] != "complete" {
				t.Fatalf("cancel ack %d: %v", i, r)
			}
		}
		if got := s.await(id); got["status"] != "cancelled" {
			t.Fatalf("after cancel: %v", got)
		}
	})
	t.Run("Ask answers input_required without a task, then the answer creates one", func(t *testing.T) {
		s := newTaskServer(t)
		_, out := s.rpc("tools/call", with(map[string]any{"name": "asking"}, declared), nil)
		r := result(t, out)
		if _, has := r["taskId"]; r["resultType"] != "input_required" || r["inputRequests"] == nil || has {
			t.Fatalf("first round: %v", r)
		}
		_, out = s.rpc("tools/call", with(map[string]any{"name": "asking", "inputResponses": map[string]any{"who": map[string]any{"action": "accept"}}}, declared), nil)
		r = result(t, out)
		if got := s.await(r["taskId"].(string)); !strings.Contains(mustJSON(t, got["result"]), "accept") {
			t.Fatalf("task result: %v", got)
		}
	})
	t.Run("an optional tool from a client without the extension goes to the SDK", func(t *testing.T) {
		s := newTaskServer(t)
		_, out := s.rpc("tools/call", map[string]any{"name": "slow"}, nil)
		if out["sdk"] != true || s.sdk != 1 {
			t.Fatalf("answer %v, SDK saw %d", out, s.sdk)
		}
	})
	t.Run("every other request goes to the SDK", func(t *testing.T) {
		s := newTaskServer(t)
		_, out := s.rpc("tools/call", with(map[string]any{"name": "greet"}, declared), nil)
		_, out2 := s.rpc("tasks/list", with(map[string]any{}, declared), nil)
		req := httptest.NewRequest(http.MethodGet, "/", nil)
		s.h.ServeHTTP(httptest.NewRecorder(), req)
		batch := jsonPost(strings.NewReader(`[{"jsonrpc":"2.0","id":1,"method":"tasks/get"}]`))
		s.h.ServeHTTP(httptest.NewRecorder(), batch)
		if out["sdk"] != true || out2["sdk"] != true || s.sdk != 4 {
			t.Fatalf("answers %v %v, SDK saw %d", out, out2, s.sdk)
		}
	})
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestTasksHandlerRefuses(t *testing.T) {
	for _, m := range []string{"tasks/get", "tasks/update", "tasks/cancel"} {
		t.Run("rejects "+m+" from a client without the extension", func(t *testing.T) {
			s := newTaskServer(t)
			id := s.create("slow")
			_, out := s.rpc(m, map[string]any{"taskId": id, "inputResponses": map[string]any{}}, nil)
			if errCode(out) != CodeMissingCapability {
				t.Fatalf("answer %v", out)
			}
			if got := s.await2(id); got != "working" {
				t.Fatalf("task %s after the refusal", got)
			}
		})
		t.Run("rejects "+m+" whose Mcp-Name differs from the taskId", func(t *testing.T) {
			s := newTaskServer(t)
			id := s.create("slow")
			code, out := s.rpc(m, with(map[string]any{"taskId": id, "inputResponses": map[string]any{}}, declared), map[string]string{"Mcp-Name": "other"})
			if code != http.StatusBadRequest || errCode(out) != CodeHeaderMismatch {
				t.Fatalf("answer %d %v", code, out)
			}
			if got := s.await2(id); got != "working" {
				t.Fatalf("task %s after the refusal", got)
			}
		})
		t.Run("rejects "+m+" whose Mcp-Method differs from the body", func(t *testing.T) {
			s := newTaskServer(t)
			id := s.create("slow")
			code, out := s.rpc(m, with(map[string]any{"taskId": id}, declared), map[string]string{"Mcp-Method": "tools/call", "Mcp-Name": id})
			if code != http.StatusBadRequest || errCode(out) != CodeHeaderMismatch {
				t.Fatalf("answer %d %v", code, out)
			}
		})
		t.Run("rejects "+m+" of another caller's task, consuming nothing", func(t *testing.T) {
			s := newTaskServer(t)
			id := s.create("slow")
			s.caller = "mallory"
			_, out := s.rpc(m, with(map[string]any{"taskId": id, "inputResponses": map[string]any{}}, declared), nil)
			if errCode(out) != codeInvalid {
				t.Fatalf("answer %v", out)
			}
			s.caller = "alice"
			if got := s.await2(id); got != "working" {
				t.Fatalf("task %s after the refusal", got)
			}
		})
		t.Run("rejects "+m+" of an unknown or tampered taskId", func(t *testing.T) {
			s := newTaskServer(t)
			id := []byte(s.create("slow"))
			id[len(id)-3] ^= 2
			for _, bad := range []string{"tasks-conformance-nonexistent-12345", string(id), ""} {
				_, out := s.rpc(m, with(map[string]any{"taskId": bad, "inputResponses": map[string]any{}}, declared), nil)
				if errCode(out) != codeInvalid {
					t.Fatalf("%q: answer %v", bad, out)
				}
			}
		})
		t.Run("rejects "+m+" without an authenticated caller", func(t *testing.T) {
			s := newTaskServer(t)
			id := s.create("slow")
			s.caller = ""
			_, out := s.rpc(m, with(map[string]any{"taskId": id}, declared), nil)
			if errCode(out) != codeInvalidRequest {
				t.Fatalf("answer %v", out)
			}
		})
		t.Run("rejects "+m+" with malformed params", func(t *testing.T) {
			s := newTaskServer(t)
			_, out := s.rpc(m, map[string]any{"taskId": 12}, nil)
			if errCode(out) != codeInvalid {
				t.Fatalf("answer %v", out)
			}
		})
	}
	t.Run("rejects a required tool from a client without the extension, naming it", func(t *testing.T) {
		s := newTaskServer(t)
		_, out := s.rpc("tools/call", map[string]any{"name": "quick"}, nil)
		e, _ := out["error"].(map[string]any)
		if errCode(out) != CodeMissingCapability || !strings.Contains(mustJSON(t, e["data"]), TasksExtension) || s.sdk != 0 {
			t.Fatalf("answer %v", out)
		}
	})
	t.Run("rejects a 2026-07-28 task request without Mcp-Method or Mcp-Name", func(t *testing.T) {
		s := newTaskServer(t)
		id := s.create("slow")
		v := map[string]string{"Mcp-Protocol-Version": "2026-07-28"}
		for _, c := range []struct {
			method, name string
			params       map[string]any
		}{
			{"tools/call", "quick", map[string]any{"name": "quick"}},
			{"tasks/get", id, map[string]any{"taskId": id}},
			{"tasks/cancel", id, map[string]any{"taskId": id}},
		} {
			for _, missing := range []string{"Mcp-Method", "Mcp-Name"} {
				h := map[string]string{"Mcp-Protocol-Version": "2026-07-28", "Mcp-Method": c.method, "Mcp-Name": c.name}
				delete(h, missing)
				code, out := s.rpc(c.method, with(c.params, declaredModern), h)
				if code != http.StatusBadRequest || errCode(out) != CodeHeaderMismatch {
					t.Fatalf("%s without %s: answer %d %v", c.method, missing, code, out)
				}
			}
		}
		if got := s.await2(id); got != "working" || s.sdk != 0 {
			t.Fatalf("task %s after the refusals; the SDK saw %d", got, s.sdk)
		}
		// An earlier revision's request need not carry them.
		v["Mcp-Protocol-Version"] = "2025-11-25"
		if _, out := s.rpc("tasks/get", with(map[string]any{"taskId": id}, declared), v); errCode(out) != 0 {
			t.Fatalf("2025-11-25 tasks/get: %v", out)
		}
	})
	t.Run("rejects a task subscription from a client without the extension", func(t *testing.T) {
		s := newTaskServer(t)
		id := s.create("slow")
		for _, key := range []string{"taskIds", "TaskIDs"} {
			listen := map[string]any{"notifications": map[string]any{key: []string{id}}}
			_, out := s.rpc("subscriptions/listen", listen, nil)
			e, _ := out["error"].(map[string]any)
			if errCode(out) != CodeMissingCapability || !strings.Contains(mustJSON(t, e["data"]), TasksExtension) || s.sdk != 0 {
				t.Fatalf("%s: answer %v", key, out)
			}
		}
		// Declared, or asking for no task notifications: the SDK's.
		s.rpc("subscriptions/listen", with(map[string]any{"notifications": map[string]any{"taskIds": []string{id}}}, declared), nil)
		s.rpc("subscriptions/listen", map[string]any{"notifications": map[string]any{"toolsListChanged": true}}, nil)
		if s.sdk != 2 {
			t.Fatalf("the SDK saw %d of the 2 other subscriptions", s.sdk)
		}
	})
	t.Run("rejects a task tool call whose Mcp-Name differs from the tool", func(t *testing.T) {
		s := newTaskServer(t)
		code, out := s.rpc("tools/call", with(map[string]any{"name": "quick"}, declared), map[string]string{"Mcp-Name": "slow"})
		if code != http.StatusBadRequest || errCode(out) != CodeHeaderMismatch {
			t.Fatalf("answer %d %v", code, out)
		}
	})
	t.Run("rejects a task tool call without an authenticated caller", func(t *testing.T) {
		s := newTaskServer(t)
		s.caller = ""
		_, out := s.rpc("tools/call", with(map[string]any{"name": "quick"}, declared), nil)
		if errCode(out) != codeInvalidRequest {
			t.Fatalf("answer %v", out)
		}
	})
	t.Run("refuses a body over the limit, which it cannot route", func(t *testing.T) {
		s := newTaskServer(t)
		w := httptest.NewRecorder()
		s.h.ServeHTTP(w, jsonPost(bytes.NewReader(make([]byte, maxTaskRequestBytes+10))))
		if w.Code != http.StatusRequestEntityTooLarge || s.sdk != 0 {
			t.Fatalf("answer %d, %d requests reached the SDK", w.Code, s.sdk)
		}
	})
	t.Run("refuses a body that is not one JSON value, which the SDK may read otherwise", func(t *testing.T) {
		for _, body := range []string{"", "{", `{"jsonrpc":"2.0","id":1,"method":"ping"} x`, `{"jsonrpc":"2.0","id":1,"method":"ping"}{}`, "\ufeff{}"} {
			s := newTaskServer(t)
			w := s.post(body)
			var out map[string]any
			if err := json.Unmarshal(w.Body.Bytes(), &out); err != nil || w.Code != http.StatusBadRequest || errCode(out) != -32700 || s.sdk != 0 {
				t.Fatalf("%q: answer %d %q, %d requests reached the SDK", body, w.Code, w.Body.String(), s.sdk)
			}
		}
	})
	t.Run("refuses a body it cannot read", func(t *testing.T) {
		s := newTaskServer(t)
		req := jsonPost(io.MultiReader(strings.NewReader("{"), iotest.ErrReader(errors.New("reset"))))
		w := httptest.NewRecorder()
		s.h.ServeHTTP(w, req)
		if w.Code != http.StatusBadRequest || s.sdk != 0 {
			t.Fatalf("status %d, SDK saw %d", w.Code, s.sdk)
		}
	})
}

// TestTasksHandlerRefusesAVersionOnlyInMeta: a 2026-07-28 task request
// whose headers do not state what its _meta does is refused with HTTP 400
// as both SDKs refuse a plain tool's (mcp/sdk_test.go and
// mcpgo/sdk_test.go compare the two): -32020 for a version only in _meta
// or two versions, -32602 for a version only in the header; the task goes
// on, and a refused tools/call creates none (its key is still free).
func TestTasksHandlerRefusesAVersionOnlyInMeta(t *testing.T) {
	const v = "2026-07-28"
	cases := []struct {
		name   string
		meta   map[string]any
		header map[string]string
		code   int
	}{
		{"with no MCP-Protocol-Version, Mcp-Method or Mcp-Name", declaredModern, nil, CodeHeaderMismatch},
		{"with Mcp-Method and Mcp-Name but no MCP-Protocol-Version", declaredModern, map[string]string{"Mcp-Method": "", "Mcp-Name": ""}, CodeHeaderMismatch},
		{"whose MCP-Protocol-Version names another version", declaredModern, map[string]string{"Mcp-Protocol-Version": "2025-11-25", "Mcp-Method": "", "Mcp-Name": ""}, CodeHeaderMismatch},
		{"whose MCP-Protocol-Version names 2026-07-28 and _meta none", declared, map[string]string{"Mcp-Protocol-Version": v, "Mcp-Method": "", "Mcp-Name": ""}, codeInvalid},
	}
	keyed := func(meta map[string]any) map[string]any {
		m := map[string]any{MetaIdempotencyKey: "k1"}
		for k, val := range meta {
			m[k] = val
		}
		return m
	}
	for _, m := range []string{"tools/call", "tasks/get", "tasks/update", "tasks/cancel"} {
		t.Run("refuses "+m, func(t *testing.T) {
			s := newTaskServer(t)
			id := s.create("slow")
			params, name := map[string]any{"taskId": id, "inputResponses": map[string]any{}}, id
			if m == "tools/call" {
				params, name = map[string]any{"name": "slow", "arguments": map[string]any{"n": 1}}, "slow"
			}
			for _, c := range cases {
				h := map[string]string{}
				for k, val := range c.header {
					if val == "" { // the body's
						val = map[string]string{"Mcp-Method": m, "Mcp-Name": name}[k]
					}
					h[k] = val
				}
				code, out := s.rpc(m, with(params, keyed(c.meta)), h)
				if code != http.StatusBadRequest || errCode(out) != c.code || out["id"] != float64(7) || out["result"] != nil {
					t.Fatalf("%s: answer %d %v", c.name, code, out)
				}
			}
			if got := s.await2(id); got != "working" || s.sdk != 0 {
				t.Fatalf("task %s after the refusals; the SDK saw %d", got, s.sdk)
			}
			// Served with its headers; a tools/call under the same key
			// with other arguments too: no refused call took the key.
			if m == "tools/call" {
				params["arguments"] = map[string]any{"n": 2}
			}
			code, out := s.rpc(m, with(params, keyed(declaredModern)), map[string]string{"Mcp-Protocol-Version": v, "Mcp-Method": m, "Mcp-Name": name})
			if code != http.StatusOK || errCode(out) != 0 {
				t.Fatalf("with its headers: answer %d %v", code, out)
			}
		})
	}
}

// await2 returns the task's status once, as its owner reads it.
func (s *taskServer) await2(id string) string {
	s.t.Helper()
	_, out := s.rpc("tasks/get", with(map[string]any{"taskId": id}, declared), nil)
	st, _ := result(s.t, out)["status"].(string)
	return st
}

func TestNewTasksRefuses(t *testing.T) {
	keys, err := ctoken.NewKeyring(ctoken.RandomKey())
	must(t, err)
	store := replay.NewMemoryStore(0)
	for name, cfg := range map[string]TasksConfig{
		"no keys":                        {Store: store},
		"no store":                       {Keys: keys},
		"a store without renewal":        {Keys: keys, Store: noRenew{store}},
		"a negative TTL":                 {Keys: keys, Store: store, TTL: -time.Second},
		"a TTL under the hold":           {Keys: keys, Store: store, TTL: time.Second, Hold: 2 * time.Second},
		"a TTL over the store's horizon": {Keys: keys, Store: bounded{store}, TTL: 2 * time.Hour},
	} {
		t.Run("refuses "+name, func(t *testing.T) {
			if _, err := NewTasks(cfg); !errors.Is(err, ctoken.ErrConfig) && !errors.Is(err, ctoken.ErrNoKey) {
				t.Fatalf("NewTasks: %v", err)
			}
		})
	}
	t.Run("refuses a tool without a name or Run", func(t *testing.T) {
		ts, err := NewTasks(TasksConfig{Keys: keys, Store: store})
		must(t, err)
		if ts.Add(TaskTool{Name: "x"}) == nil || ts.Add(TaskTool{Run: func(context.Context, *TaskCall) (json.RawMessage, error) { return nil, nil }}) == nil {
			t.Fatal("Add accepted a tool without a name or Run")
		}
	})
	t.Run("Input outside a task fails", func(t *testing.T) {
		if _, err := (&TaskCall{}).Input(context.Background(), nil); err == nil {
			t.Fatal("Input outside a task succeeded")
		}
	})
}

// noRenew is a Recorder without RenewLease.
type noRenew struct{ replay.Recorder }

// bounded is a MemoryStore with a one-hour horizon.
type bounded struct{ *replay.MemoryStore }

func (bounded) Horizon() time.Duration { return time.Hour }

func TestTaskInputKeysServeOneRound(t *testing.T) {
	s := newTaskServer(t)
	errs := make(chan error, 1)
	must(t, s.tasks.Add(TaskTool{Name: "twice", Run: func(ctx context.Context, c *TaskCall) (json.RawMessage, error) {
		if _, err := c.Input(ctx, map[string]json.RawMessage{"k": json.RawMessage(`{"method":"elicitation/create"}`)}); err != nil {
			return nil, err
		}
		_, err := c.Input(ctx, map[string]json.RawMessage{"k": json.RawMessage(`{"method":"elicitation/create"}`)})
		errs <- err
		return nil, err
	}}))
	id := s.create("twice")
	for s.await2(id) != "input_required" {
		time.Sleep(5 * time.Millisecond)
	}
	_, out := s.rpc("tasks/update", with(map[string]any{"taskId": id, "inputResponses": map[string]any{"k": map[string]any{"action": "accept"}}}, declared), nil)
	if r := result(t, out); len(r) != 1 || r["resultType"] != "complete" {
		t.Fatalf("update ack %v", r)
	}
	if err := <-errs; err == nil {
		t.Fatal("a key of an earlier round was asked again")
	}
	if got := s.await(id); got["status"] != "failed" {
		t.Fatalf("task %v", got)
	}
}

func FuzzTasksHandler(f *testing.F) {
	f.Add([]byte(`{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"taskId":"x","_meta":{"io.modelcontextprotocol/clientCapabilities":{"extensions":{"io.modelcontextprotocol/tasks":{}}}}}}`))
	f.Add([]byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"quick","arguments":null}}`))
	f.Add([]byte(`{"jsonrpc":"2.0","id":"a","method":"tasks/update","params":{"taskId":"","inputResponses":{"k":1}}}`))
	f.Add([]byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"quick","arguments":{"a":1},"_meta":{"io.github.ctoken/idempotencyKey":"k","ctoken/idempotencyKey":["k"],"io.modelcontextprotocol/clientCapabilities":{"extensions":{"io.modelcontextprotocol/tasks":{}}}}}}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		s := newTaskServer(t)
		w := httptest.NewRecorder()
		s.h.ServeHTTP(w, jsonPost(bytes.NewReader(body)))
		if s.sdk == 0 && !json.Valid(w.Body.Bytes()) {
			t.Fatalf("answer %q is not JSON", w.Body.String())
		}
	})
}

func FuzzTaskID(f *testing.F) {
	keys, err := ctoken.NewKeyring(ctoken.RandomKey())
	must(f, err)
	ts, err := NewTasks(TasksConfig{Keys: keys, Store: replay.NewMemoryStore(0)})
	must(f, err)
	st, err := ts.Create(context.Background(), TaskTool{Name: "t", Run: func(context.Context, *TaskCall) (json.RawMessage, error) {
		return json.RawMessage(`{"content":[]}`), nil
	}}, &TaskCall{Caller: "alice"})
	must(f, err)
	f.Add(st.ID)
	f.Add("")
	f.Fuzz(func(t *testing.T, id string) {
		ref, err := ts.open("alice", id)
		if err == nil && (len(ref.Nonce) != 16 || ref.Token == "") {
			t.Fatalf("opened a malformed task %+v", ref)
		}
		if err != nil && !errors.Is(err, ErrTaskInvalid) {
			t.Fatalf("open: %v", err)
		}
		if _, err := ts.open("mallory", id); err == nil {
			t.Fatal("another caller opened the task")
		}
	})
}

func TestTasksHandlerLocalhostProtection(t *testing.T) {
	body := `{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"taskId":"x"}}`
	req := func(local, host string) *http.Request {
		r := jsonPost(strings.NewReader(body))
		r.Host = host
		addr, err := net.ResolveTCPAddr("tcp", local)
		must(t, err)
		return r.WithContext(context.WithValue(r.Context(), http.LocalAddrContextKey, addr))
	}
	for _, tc := range []struct {
		name, local, host string
		refused           bool
	}{
		{"refuses a loopback request for another host", "127.0.0.1:80", "evil.example:80", true},
		{"refuses an IPv6 loopback request for another host", "[::1]:80", "evil.example", true},
		{"serves a loopback request for localhost", "127.0.0.1:80", "localhost:80", false},
		{"serves a loopback request for an IPv6 loopback", "127.0.0.1:80", "[::1]:8080", false},
		{"serves a public address for any host", "192.0.2.1:80", "evil.example", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newTaskServer(t)
			w := httptest.NewRecorder()
			s.h.ServeHTTP(w, req(tc.local, tc.host))
			if (w.Code == http.StatusForbidden) != tc.refused {
				t.Fatalf("status %d", w.Code)
			}
		})
	}
	t.Run("InsecureSkipLocalhostProtection serves any host", func(t *testing.T) {
		keys, err := ctoken.NewKeyring(ctoken.RandomKey())
		must(t, err)
		ts, err := NewTasks(TasksConfig{Keys: keys, Store: replay.NewMemoryStore(0), InsecureSkipLocalhostProtection: true})
		must(t, err)
		w := httptest.NewRecorder()
		ts.Handler(http.NotFoundHandler()).ServeHTTP(w, req("127.0.0.1:80", "evil.example"))
		if w.Code == http.StatusForbidden {
			t.Fatal("refused")
		}
	})
}

// post posts body as it is and returns the recorder.
func (s *taskServer) post(body string) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	s.h.ServeHTTP(w, jsonPost(strings.NewReader(body)))
	return w
}

// TestTasksHandlerReadsKeysExactly: go-sdk decodes JSON-RPC with exact,
// case-sensitive keys; a body the adapter read differently (encoding/json
// matches keys case-insensitively, last duplicate wins) would take a
// required task tool's call past the adapter's -32021 to the SDK, which
// runs it synchronously for a client that did not declare the extension.
func TestTasksHandlerReadsKeysExactly(t *testing.T) {
	for _, body := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"quick","NAME":"other"}}`,
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","METHOD":"ping","params":{"name":"quick"}}`,
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"quick"},"Params":{"name":"other"}}`,
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"other","name":"quick"}}`,
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"quick","name":"other"}}`,
		`[{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"quick"}}]`,
		// mcp-go decodes with encoding/json, which matches a key in any case.
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"NAME":"quick"}}`,
		`{"jsonrpc":"2.0","id":1,"METHOD":"tools/call","params":{"name":"quick"}}`,
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","PARAMS":{"name":"quick"}}`,
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"slow","Name":"quick"}}`,
		"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"param\u017f\":{\"name\":\"quick\"}}", // long s folds to s
		` [{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"quick","NAME":"x"}}]`,
	} {
		s := newTaskServer(t)
		w := s.post(body)
		if s.sdk != 0 {
			t.Errorf("%s: reached the SDK", body)
			continue
		}
		var out map[string]any
		if err := json.Unmarshal(w.Body.Bytes(), &out); err != nil || (errCode(out) != CodeMissingCapability && errCode(out) != codeInvalidRequest) {
			t.Errorf("%s: answer %d %q", body, w.Code, w.Body.String())
		}
	}
	// A call of an optional task tool from a client without the
	// extension, with keys of its own in any case, is the SDK's.
	s := newTaskServer(t)
	if s.post(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"slow","Other":1,"other":2}}`); s.sdk != 1 {
		t.Error("an optional tool's call from a client without the extension did not reach the SDK")
	}
}

// TestTasksHandlerLeavesInvalidRequests: a message that is not a JSON-RPC
// 2.0 request (wrong or missing version, an id that is null, an object or
// a boolean) is the SDK's to refuse; the adapter creates no task for it.
func TestTasksHandlerLeavesInvalidRequests(t *testing.T) {
	params := `"params":{"name":"quick","_meta":{"io.modelcontextprotocol/clientCapabilities":{"extensions":{"io.modelcontextprotocol/tasks":{}}}}}`
	for _, head := range []string{
		`"jsonrpc":"2.0","id":null`,
		`"jsonrpc":"2.0","id":{"a":1}`,
		`"jsonrpc":"2.0","id":true`,
		`"jsonrpc":"1.0","id":1`,
		`"id":1`,
	} {
		s := newTaskServer(t)
		if w := s.post(`{` + head + `,"method":"tools/call",` + params + `}`); s.sdk != 1 {
			t.Errorf("%s: the adapter answered %q", head, w.Body.String())
		}
	}
}

// TestTasksHandlerNeedsJSONContentType: a web page may POST a text/plain
// or form body to a local server without a CORS preflight (its response
// unread, its effect done); go-sdk refuses any Content-Type but
// application/json, and so must the adapter before it starts a task.
func TestTasksHandlerNeedsJSONContentType(t *testing.T) {
	body := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"quick","_meta":{"io.modelcontextprotocol/clientCapabilities":{"extensions":{"io.modelcontextprotocol/tasks":{}}}}}}`
	for _, ct := range []string{"", "text/plain", "text/plain; charset=utf-8", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"} {
		s := newTaskServer(t)
		r := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(body))
		if ct != "" {
			r.Header.Set("Content-Type", ct)
		}
		w := httptest.NewRecorder()
		s.h.ServeHTTP(w, r)
		if s.sdk != 1 {
			t.Errorf("Content-Type %q: the adapter answered %q", ct, w.Body.String())
		}
	}
	s := newTaskServer(t)
	r := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(body))
	r.Header.Set("Content-Type", "Application/JSON; charset=utf-8")
	w := httptest.NewRecorder()
	s.h.ServeHTTP(w, r)
	if s.sdk != 0 || !strings.Contains(w.Body.String(), `"resultType":"task"`) {
		t.Errorf("application/json with a charset: %q", w.Body.String())
	}
}

// jsonPost is a POST of body as application/json.
func jsonPost(body io.Reader) *http.Request {
	r := httptest.NewRequest(http.MethodPost, "/", body)
	r.Header.Set("Content-Type", "application/json")
	return r
}

// TestTasksHandlerRefusesMalformedKeys: a task tool's call whose
// idempotency key is malformed is refused -32602 as Idempotency refuses
// it, creating no task.
func TestTasksHandlerRefusesMalformedKeys(t *testing.T) {
	caps := declared["io.modelcontextprotocol/clientCapabilities"]
	for name, meta := range map[string]map[string]any{
		"not a string":      {MetaIdempotencyKey: 7},
		"an object":         {MetaIdempotencyKey: map[string]any{"k": 1}},
		"empty":             {MetaIdempotencyKey: ""},
		"too long":          {MetaIdempotencyKey: strings.Repeat("k", DefaultMaxIdempotencyKeyBytes+1)},
		"a space":           {MetaIdempotencyKey: "a b"},
		"two keys differ":   {MetaIdempotencyKey: "k1", LegacyMetaIdempotencyKey: "k2"},
		"legacy not string": {LegacyMetaIdempotencyKey: []any{1}},
	} {
		s := newTaskServer(t)
		meta["io.modelcontextprotocol/clientCapabilities"] = caps
		_, out := s.rpc("tools/call", with(map[string]any{"name": "slow", "arguments": map[string]any{}}, meta), nil)
		if c := errCode(out); c != codeInvalid {
			t.Errorf("%s: answer %v; want -32602", name, out)
		}
	}
	// The legacy key alone, or both equal, keys the call.
	s := newTaskServer(t)
	for _, meta := range []map[string]any{{LegacyMetaIdempotencyKey: "k"}, {MetaIdempotencyKey: "k", LegacyMetaIdempotencyKey: "k"}} {
		meta["io.modelcontextprotocol/clientCapabilities"] = caps
		_, out := s.rpc("tools/call", with(map[string]any{"name": "slow", "arguments": map[string]any{}}, meta), nil)
		if r := result(t, out); r["resultType"] != "task" {
			t.Fatalf("keyed call: %v", out)
		}
	}
	_, out := s.rpc("tools/call", with(map[string]any{"name": "slow", "arguments": map[string]any{"x": 1}}, map[string]any{MetaIdempotencyKey: "k", "io.modelcontextprotocol/clientCapabilities": caps}), nil)
	if errCode(out) != codeInvalid || !strings.Contains(fmt.Sprint(out), "ctokenCode:1024") {
		t.Fatalf("the legacy key's task called again under the new key with other arguments: %v; want -32602 ctokenCode 1024", out)
	}
	// Arguments without a canonical form are keyed by their bytes.
	big := func(n string) map[string]any {
		return map[string]any{"name": "slow", "arguments": json.RawMessage(`{"n":` + n + `}`), "_meta": map[string]any{MetaIdempotencyKey: "big", "io.modelcontextprotocol/clientCapabilities": caps}}
	}
	_, first := s.rpc("tools/call", big("9007199254740993"), nil)
	_, again := s.rpc("tools/call", big("9007199254740993"), nil)
	id1, _ := result(t, first)["taskId"].(string)
	id2, _ := result(t, again)["taskId"].(string)
	if id1 == "" || id2 == "" || result(t, again)["status"] != "working" {
		t.Fatalf("keyed call with a number past 2^53: %v, then %v", first, again)
	}
	if _, out := s.rpc("tools/call", big("9007199254740995"), nil); errCode(out) != codeInvalid {
		t.Fatalf("other big arguments under the key: %v; want -32602", out)
	}
}

func TestCompleteResult(t *testing.T) {
	for in, want := range map[string]string{
		`{}`:                        `{"resultType":"complete"}`,
		` { } `:                     `{"resultType":"complete"}`,
		`{"content":[]}`:            `{"resultType":"complete","content":[]}`,
		` {"isError":true} `:        `{"resultType":"complete","isError":true}`,
		`{"resultType":"complete"}`: `{"resultType":"complete"}`,
		`[1]`:                       `[1]`,
	} {
		got := completeResult(json.RawMessage(in))
		if string(got) != want || !json.Valid(got) {
			t.Errorf("completeResult(%s) = %s, want %s", in, got, want)
		}
	}
}

func TestTaskPollHint(t *testing.T) {
	// PollInterval an hour, so that no stall of the test's own reaches it.
	tasks := &Tasks{poll: time.Hour}
	now := time.Now()
	for _, c := range []struct {
		name     string
		st       TaskState
		min, max time.Duration
	}{
		{"a new task: 10 ms", TaskState{Status: taskWorking, Created: now.Add(time.Second)}, minPollHint, minPollHint},
		{"a running task: its age", TaskState{Status: taskWorking, Created: now.Add(-200 * time.Millisecond)}, 200 * time.Millisecond, time.Hour - 1},
		{"a task waiting for input: its age", TaskState{Status: taskInputRequired, Created: now.Add(-300 * time.Millisecond)}, 300 * time.Millisecond, time.Hour - 1},
		{"an old task: PollInterval", TaskState{Status: taskWorking, Created: now.Add(-2 * time.Hour)}, time.Hour, time.Hour},
		{"a finished task: PollInterval", TaskState{Status: taskCompleted, Created: now}, time.Hour, time.Hour},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := tasks.pollFor(c.st); got < c.min || got > c.max {
				t.Errorf("pollFor = %v, want %v to %v", got, c.min, c.max)
			}
		})
	}
}

func TestTasksHandlerWithoutCallerSaysSo(t *testing.T) {
	var logs syncBuffer
	ts, err := NewTasks(TasksConfig{Keys: keyringFor(t), Store: replay.NewMemoryStore(0), Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	must(t, err)
	ts.Handler(http.NotFoundHandler())
	if !strings.Contains(logs.String(), "level=ERROR") || !strings.Contains(logs.String(), "TasksConfig.Caller") {
		t.Fatalf("logged %q", logs.String())
	}
}

func keyringFor(t *testing.T) *ctoken.Keyring {
	t.Helper()
	keys, err := ctoken.NewKeyring(ctoken.RandomKey())
	must(t, err)
	return keys
}
