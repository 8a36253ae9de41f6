package tsclient

// The MCP Tasks extension's own client (npm @modelcontextprotocol/ext-tasks,
// testdata/tasks.mjs) drives ctoken's tasks (mcptoken.Tasks, its Handler in
// front of the SDK's streamable HTTP handler) on a go-sdk server and on an
// mcp-go server, each on 127.0.0.1: a task polled to completed, an input
// round answered through tasks/update, a cancel, a resume by ID from a
// fresh client, another caller's use of the ID, and a failing tool. The
// script prints what the client saw; the Go test asserts on it and on what
// the tools saw.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	ctokenmcp "github.com/ctoken/ctoken/mcp"
	ctokenmcpgo "github.com/ctoken/ctoken/mcpgo"
	"github.com/ctoken/ctoken/mcptoken"
	"github.com/ctoken/ctoken/replay"
	mcpgo "github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// taskServer is a server of one SDK with ctoken's tasks, and what its
// tools and its HTTP handler saw.
type taskServer struct {
	url string
	// slowEnded receives how the slow tool ended: "context done" or "ran
	// to its end".
	slowEnded chan string
	computed  atomic.Int32 // runs of compute
	confirmed atomic.Int32 // runs of confirm that found the answer

	mu       sync.Mutex
	gates    map[string]chan struct{}
	released map[string]bool
	gateEnds map[string]string // how each gated run ended
	requests []seen
	log      bytes.Buffer
}

// seen is one HTTP request the server answered.
type seen struct {
	at       time.Time
	done     time.Time
	user     string
	method   string // the body's
	tool     string // params.name
	raw      bool   // sent by tasks.mjs's rawDispatch (a string id), not by the SDK client
	header   http.Header
	taskID   string // params.taskId, or the created task's
	poll     int64  // the answer's pollIntervalMs, 0 if none
	response json.RawMessage
}

func (f *taskServer) Write(p []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.log.Write(p)
}

func (f *taskServer) logged() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.log.String()
}

// gate is the channel the gated tool named name waits for.
func (f *taskServer) gate(name string) chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	g, ok := f.gates[name]
	if !ok {
		g = make(chan struct{})
		f.gates[name] = g
	}
	return g
}

// release opens a gate once.
func (f *taskServer) release(name string) {
	g := f.gate(name)
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.released[name] {
		f.released[name] = true
		close(g)
	}
}

// The tools, SDK-independent; each SDK's server adapts them.

func (f *taskServer) compute(label string) string {
	f.computed.Add(1)
	return "computed " + label
}

// gated waits until its gate is released (by the release tool) or its
// task is cancelled.
func (f *taskServer) gated(ctx context.Context, name string) (string, error) {
	end, err := "released", error(nil)
	select {
	case <-f.gate(name):
	case <-ctx.Done():
		end, err = "context done", ctx.Err()
	}
	f.mu.Lock()
	f.gateEnds[name] = end
	f.mu.Unlock()
	return "released " + name, err
}

func (f *taskServer) gateEnd(name string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.gateEnds[name]
}

// slow runs for seconds unless its task is cancelled first.
func (f *taskServer) slow(ctx context.Context, seconds float64) (string, error) {
	tm := time.NewTimer(time.Duration(seconds * float64(time.Second)))
	defer tm.Stop()
	select {
	case <-ctx.Done():
		f.slowEnded <- "context done"
		return "", ctx.Err()
	case <-tm.C:
		f.slowEnded <- "ran to its end"
		return fmt.Sprintf("slept %gs", seconds), nil
	}
}

var errJobFailed = errors.New("the job failed")

const (
	taskUser     = "X-Test-User"
	confirmAsk   = "Delete the file?"
	toolErrorMsg = "the job reported an error"
)

var confirmSchema = map[string]any{"type": "object", "properties": map[string]any{"confirm": map[string]any{"type": "boolean"}}, "required": []string{"confirm"}}

func newTaskServer(t *testing.T) (*taskServer, *mcptoken.Tasks) {
	t.Helper()
	f := &taskServer{slowEnded: make(chan string, 4), gates: map[string]chan struct{}{}, released: map[string]bool{}, gateEnds: map[string]string{}}
	t.Cleanup(func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		for name, g := range f.gates {
			if !f.released[name] {
				f.released[name] = true
				close(g)
			}
		}
	})
	tasks, err := mcptoken.NewTasks(mcptoken.TasksConfig{
		Keys:  keyring(t, 7),
		Store: replay.NewMemoryStore(0),
		TTL:   10 * time.Minute,
		// A lease renewed every 2 s, lost only after a 3 s stall: a loaded
		// CI machine does not cancel a gated tool that waits for the script.
		Hold:         6 * time.Second,
		PollInterval: 20 * time.Millisecond,
		Caller: func(r *http.Request) (string, error) {
			if u := r.Header.Get(taskUser); u != "" {
				return u, nil
			}
			return "", errors.New("no " + taskUser)
		},
		Logger: slog.New(slog.NewTextHandler(f, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	return f, tasks
}

// serve serves h on 127.0.0.1, keeping every request and its answer.
func (f *taskServer) serve(t *testing.T, h http.Handler) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s := seen{at: time.Now(), user: r.Header.Get(taskUser), header: r.Header.Clone()}
		var msg struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Params struct {
				TaskID string `json:"taskId"`
				Name   string `json:"name"`
			} `json:"params"`
		}
		if r.Body != nil {
			body, _ := io.ReadAll(r.Body)
			r.Body = io.NopCloser(bytes.NewReader(body))
			json.Unmarshal(body, &msg)
		}
		s.method, s.taskID, s.tool = msg.Method, msg.Params.TaskID, msg.Params.Name
		s.raw = bytes.HasPrefix(msg.ID, []byte(`"alice-`)) || bytes.HasPrefix(msg.ID, []byte(`"bob-`))
		rec := &recorder{ResponseWriter: w}
		h.ServeHTTP(rec, r)
		s.done = time.Now()
		if b := rec.body.Bytes(); json.Valid(b) {
			s.response = append(json.RawMessage(nil), b...)
			var resp struct {
				Result struct {
					Type   string `json:"resultType"`
					TaskID string `json:"taskId"`
					Poll   int64  `json:"pollIntervalMs"`
				} `json:"result"`
			}
			if json.Unmarshal(b, &resp) == nil {
				s.poll = resp.Result.Poll
				if resp.Result.Type == "task" {
					s.taskID = resp.Result.TaskID
				}
			}
		}
		f.mu.Lock()
		f.requests = append(f.requests, s)
		f.mu.Unlock()
	}))
	t.Cleanup(srv.Close)
	f.url = srv.URL
}

// recorder keeps a copy of what a handler writes.
type recorder struct {
	http.ResponseWriter
	body bytes.Buffer
}

func (r *recorder) Write(p []byte) (int, error) {
	r.body.Write(p)
	return r.ResponseWriter.Write(p)
}

func (r *recorder) Flush() {
	if fl, ok := r.ResponseWriter.(http.Flusher); ok {
		fl.Flush()
	}
}

// seenRequests is every request the server answered so far.
func (f *taskServer) seenRequests() []seen {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]seen(nil), f.requests...)
}

// execution is a settled execution as tasks.mjs reports it.
type execution struct {
	Kind     string   `json:"kind"`
	TaskID   string   `json:"taskId"`
	Statuses []string `json:"statuses"`
	Outcome  settled  `json:"outcome"`
}

// settled is an outcome as tasks.mjs reports it.
type settled struct {
	Status string          `json:"status"`
	Result json.RawMessage `json:"result"`
	Error  *clientError    `json:"error"`
	Task   *taskView       `json:"task"`
}

type taskView struct {
	TaskID        string `json:"taskId"`
	Status        string `json:"status"`
	StatusMessage string `json:"statusMessage"`
}

type clientError struct {
	Name    string          `json:"name"`
	Message string          `json:"message"`
	Code    *int            `json:"code"`
	Data    json.RawMessage `json:"data"`
	Cause   *string         `json:"cause"`
}

// step is one step of tasks.mjs: its result, or the error it threw.
type step[T any] struct {
	Result T            `json:"result"`
	Error  *clientError `json:"error"`
}

func (s step[T]) String() string { b, _ := json.Marshal(s); return string(b) }

// text is the text of a CallToolResult's first content block, and its
// isError.
func text(t *testing.T, raw json.RawMessage) (string, bool) {
	t.Helper()
	var r struct {
		Content []struct {
			Text string `json:"text"`
		} `json:"content"`
		IsError bool `json:"isError"`
	}
	if err := json.Unmarshal(raw, &r); err != nil || len(r.Content) == 0 {
		t.Fatalf("not a CallToolResult with content: %v, %s", err, raw)
	}
	return r.Content[0].Text, r.IsError
}

// completedWith checks an execution that was a task and completed with
// the text want.
func completedWith(t *testing.T, s step[execution], want string) {
	t.Helper()
	e := s.Result
	if s.Error != nil || e.Kind != "task" || e.TaskID == "" || e.Outcome.Status != "completed" {
		t.Fatalf("%v", s)
	}
	if got, isErr := text(t, e.Outcome.Result); got != want || isErr {
		t.Fatalf("result %q (isError %v), want %q: %v", got, isErr, want, s)
	}
}

func TestExtTasksClientDrivesCtokenTasks(t *testing.T) {
	for _, sdk := range []struct {
		name  string
		serve func(t *testing.T) *taskServer
	}{
		{"go-sdk", newGoSDKTaskServer},
		{"mcp-go", newMCPGoTaskServer},
	} {
		t.Run(sdk.name, func(t *testing.T) {
			f := sdk.serve(t)
			obs := runScript(t, "tasks.mjs", f.url)
			checkTasks(t, f, obs)
		})
	}
}

func checkTasks(t *testing.T, f *taskServer, obs map[string]json.RawMessage) {
	if e, ok := obs["fatal"]; ok {
		t.Fatalf("tasks.mjs stopped: %s", e)
	}
	t.Run("versions", func(t *testing.T) {
		v := get[map[string]string](t, obs, "versions")
		if v["client"] != "2.4.0" || v["extTasks"] != "0.2.2" || v["protocol"] != "2026-07-28" || v["era"] != "modern" || !strings.HasPrefix(v["node"], "v22.") {
			t.Fatalf("%v", v)
		}
	})

	t.Run("a task is polled to completed and its result read without a schema error", func(t *testing.T) {
		s := get[step[execution]](t, obs, "complete")
		completedWith(t, s, "computed one")
		if st := s.Result.Statuses; len(st) == 0 || st[0] != "working" || st[len(st)-1] != "completed" {
			t.Fatalf("statuses %v", st)
		}
		u := get[step[json.RawMessage]](t, obs, "completeUnwrapped")
		if u.Error != nil {
			t.Fatalf("resultFromTaskOutcome: %v", u)
		}
		if got, _ := text(t, u.Result); got != "computed two" || f.computed.Load() != 2 {
			t.Fatalf("%q, %d runs", got, f.computed.Load())
		}
	})

	t.Run("an input round: input_required, answered by tasks/update, then completed", func(t *testing.T) {
		s := get[step[execution]](t, obs, "input")
		completedWith(t, s, "deleted a.txt")
		if !contains(s.Result.Statuses, "input_required") {
			t.Fatalf("no input_required among %v", s.Result.Statuses)
		}
		var asked []struct {
			Request struct {
				Kind   string         `json:"kind"`
				Params map[string]any `json:"params"`
			} `json:"request"`
			Context struct {
				Delivery string `json:"delivery"`
				TaskID   string `json:"taskId"`
				InputID  string `json:"inputId"`
			} `json:"context"`
		}
		json.Unmarshal(obs["inputs"], &asked)
		if len(asked) != 1 || asked[0].Request.Kind != "elicitation" || asked[0].Request.Params["message"] != confirmAsk ||
			asked[0].Context.Delivery != "task-update" || asked[0].Context.TaskID != s.Result.TaskID || asked[0].Context.InputID != "confirm" {
			t.Fatalf("the client was asked %s", obs["inputs"])
		}
		if !answeredBy(f, s.Result.TaskID, "tasks/update") || f.confirmed.Load() != 1 {
			t.Fatalf("no tasks/update for the task, or %d runs found the answer", f.confirmed.Load())
		}
	})

	t.Run("a cancelled running task ends cancelled, and its tool's context is done", func(t *testing.T) {
		type cancelStep struct {
			Kind     string         `json:"kind"`
			TaskID   string         `json:"taskId"`
			Ack      step[any]      `json:"ack"`
			Local    settled        `json:"local"`
			AfterAck step[taskView] `json:"afterAck"`
			Server   step[settled]  `json:"server"`
		}
		s := get[step[cancelStep]](t, obs, "cancel")
		c := s.Result
		if s.Error != nil || c.Kind != "task" || c.Ack.Error != nil {
			t.Fatalf("%v", s)
		}
		if c.Local.Status != "cancelled" || c.Server.Error != nil || c.Server.Result.Status != "cancelled" || c.Server.Result.Task == nil || c.Server.Result.Task.Status != "cancelled" {
			t.Fatalf("the client's view %v; the server's %v", c.Local, c.Server)
		}
		if !answeredBy(f, c.TaskID, "tasks/cancel") {
			t.Fatal("no tasks/cancel reached the server")
		}
		select {
		case end := <-f.slowEnded:
			if end != "context done" {
				t.Fatalf("the slow tool %s", end)
			}
		case <-time.After(time.Minute): // its 30 s run would have ended long before
			t.Fatal("the slow tool has not ended")
		}
	})

	t.Run("a fresh client of the same caller resumes the task by its ID", func(t *testing.T) {
		type resumeStep struct {
			Ref struct {
				EndpointID string `json:"endpointId"`
				Generation string `json:"generation"`
				TaskID     string `json:"taskId"`
			} `json:"ref"`
			HandedOff settled        `json:"handedOff"`
			Before    step[taskView] `json:"before"`
			Resumed   execution      `json:"resumed"`
		}
		s := get[step[resumeStep]](t, obs, "resume")
		r := s.Result
		if s.Error != nil || r.Ref.Generation != "v2" || r.Ref.TaskID == "" || r.Before.Error != nil || r.Before.Result.Status != "working" {
			t.Fatalf("%v", s)
		}
		completedWith(t, step[execution]{Result: r.Resumed}, "released resume")
		if r.Resumed.TaskID != r.Ref.TaskID || f.gateEnd("resume") != "released" {
			t.Fatalf("resumed %q, handed off %q; the tool %s", r.Resumed.TaskID, r.Ref.TaskID, f.gateEnd("resume"))
		}
	})

	t.Run("another caller with the task's ID is refused, and the task goes on", func(t *testing.T) {
		type foreignStep struct {
			TaskID     string         `json:"taskId"`
			Get        step[taskView] `json:"get"`
			Cancel     step[any]      `json:"cancel"`
			Update     step[any]      `json:"update"`
			OwnerAfter step[taskView] `json:"ownerAfter"`
			Owner      execution      `json:"owner"`
		}
		s := get[step[foreignStep]](t, obs, "foreign")
		r := s.Result
		if s.Error != nil {
			t.Fatalf("%v", s)
		}
		for name, o := range map[string]*clientError{"tasks/get": r.Get.Error, "tasks/cancel": r.Cancel.Error, "tasks/update": r.Update.Error} {
			if o == nil || o.Name != "JsonRpcResponseError" || o.Code == nil || *o.Code != -32602 {
				t.Errorf("%s by another caller: %v", name, s)
			}
		}
		refused := 0
		for _, q := range f.seenRequests() {
			if q.user == "bob" && q.taskID == r.TaskID {
				var resp struct {
					Error *struct {
						Code int `json:"code"`
					} `json:"error"`
				}
				if json.Unmarshal(q.response, &resp) != nil || resp.Error == nil || resp.Error.Code != -32602 {
					t.Fatalf("%s by bob answered %s", q.method, q.response)
				}
				refused++
			}
		}
		if refused != 3 {
			t.Fatalf("%d of bob's requests named the task, want 3", refused)
		}
		if r.OwnerAfter.Error != nil || r.OwnerAfter.Result.Status != "working" {
			t.Fatalf("the owner's view after the refusals: %v", r.OwnerAfter)
		}
		completedWith(t, step[execution]{Result: r.Owner}, "released foreign")
		if f.gateEnd("foreign") != "released" {
			t.Fatalf("the tool %s", f.gateEnd("foreign"))
		}
	})

	t.Run("a failing tool ends failed with an error the client surfaces", func(t *testing.T) {
		s := get[step[execution]](t, obs, "failing")
		e := s.Result
		if s.Error != nil || e.Kind != "task" || e.Outcome.Status != "failed" || e.Outcome.Error == nil || e.Outcome.Error.Code == nil || *e.Outcome.Error.Code != -32603 {
			t.Fatalf("%v", s)
		}
		if e.Outcome.Task == nil || e.Outcome.Task.Status != "failed" || e.Outcome.Task.StatusMessage == "" {
			t.Fatalf("the terminal task %v", e.Outcome.Task)
		}
		u := get[step[json.RawMessage]](t, obs, "failingUnwrapped")
		if u.Error == nil || u.Error.Name != "TaskFailedError" || u.Error.Code == nil || *u.Error.Code != -32603 {
			t.Fatalf("resultFromTaskOutcome: %v", u)
		}
	})

	t.Run("a tool error (isError) is a completed task", func(t *testing.T) {
		s := get[step[execution]](t, obs, "toolError")
		if s.Error != nil || s.Result.Outcome.Status != "completed" {
			t.Fatalf("%v", s)
		}
		if got, isErr := text(t, s.Result.Outcome.Result); got != toolErrorMsg || !isErr {
			t.Fatalf("%q, isError %v", got, isErr)
		}
	})

	t.Run("every task request names its task in Mcp-Name", func(t *testing.T) {
		n := 0
		for _, s := range f.seenRequests() {
			if strings.HasPrefix(s.method, "tasks/") {
				n++
				if s.header.Get("Mcp-Name") != s.taskID || s.header.Get("Mcp-Method") != s.method {
					t.Fatalf("%s: Mcp-Method %q, Mcp-Name %q", s.method, s.header.Get("Mcp-Method"), s.header.Get("Mcp-Name"))
				}
			}
		}
		if n == 0 {
			t.Fatal("no task request")
		}
	})

	if e := obs["backgroundErrors"]; string(e) != "[]" {
		t.Errorf("the session reported background errors: %s", e)
	}
	// The failing tool's failure is logged at ERROR, as it should be; a
	// cancelled tool's context error is not a failure.
	for _, line := range strings.Split(f.logged(), "\n") {
		if strings.Contains(line, "level=ERROR") && !strings.Contains(line, "tool=failing") {
			t.Errorf("server logged an error: %s", line)
		}
	}
	logPolls(t, f)
	logHeaders(t, f)
}

// logHeaders logs, for the record, the headers of the first request of
// each method from the SDK client itself and from the package (through
// tasks.mjs's rawDispatch).
func logHeaders(t *testing.T, f *taskServer) {
	done := map[string]bool{}
	var b strings.Builder
	for _, s := range f.seenRequests() {
		from := "SDK client"
		if s.raw {
			from = "ext-tasks via rawDispatch"
		}
		if done[from+s.method] {
			continue
		}
		done[from+s.method] = true
		fmt.Fprintf(&b, "\n  %s %s:", from, s.method)
		for _, k := range []string{"Mcp-Protocol-Version", "Mcp-Method", "Mcp-Name", "Mcp-Session-Id", "Accept", "User-Agent"} {
			if v := s.header.Get(k); v != "" {
				fmt.Fprintf(&b, " %s=%.40q", k, v)
			}
		}
	}
	t.Logf("headers:%s", b.String())
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// answeredBy reports whether the server answered method for the task id
// with a result.
func answeredBy(f *taskServer, id, method string) bool {
	for _, s := range f.seenRequests() {
		if s.method == method && s.taskID == id && bytes.Contains(s.response, []byte(`"result"`)) {
			return true
		}
	}
	return false
}

// logPolls logs, for the record and without asserting on it, how long the
// client waited before each tasks/get of a task after the answer before
// (the task's creation, or the last tasks/get), and the pollIntervalMs
// that answer suggested. Some gets are the script's own (a snapshot, a
// resume), not the package's polling.
func logPolls(t *testing.T, f *taskServer) {
	tool := map[string]string{}
	last := map[string]seen{}
	var b strings.Builder
	for _, s := range f.seenRequests() {
		switch {
		case s.method == "tools/call" && s.taskID != "":
			tool[s.taskID], last[s.taskID] = s.tool, s
			fmt.Fprintf(&b, "\n  %s:", s.tool)
		case s.method == "tasks/get":
			if l, ok := last[s.taskID]; ok {
				fmt.Fprintf(&b, " %dms(%d)", s.at.Sub(l.done).Milliseconds(), l.poll)
				last[s.taskID] = s
			}
		}
	}
	t.Logf("each tasks/get, in ms after the answer before (its pollIntervalMs):%s", b.String())
}

// newGoSDKTaskServer serves the tools on a go-sdk server (stateless
// streamable HTTP, JSON responses) behind Tasks.Handler, every tool but
// release a task tool (ctokenmcp.TaskTool).
func newGoSDKTaskServer(t *testing.T) *taskServer {
	f, tasks := newTaskServer(t)
	caps := &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{}}
	caps.AddExtension(mcptoken.TasksExtension, nil)
	s := mcp.NewServer(&mcp.Implementation{Name: "ts-tasks-gosdk", Version: "v0"}, &mcp.ServerOptions{Capabilities: caps})
	type args struct {
		Label   string  `json:"label"`
		Gate    string  `json:"gate"`
		File    string  `json:"file"`
		Seconds float64 `json:"seconds"`
	}
	argsOf := func(req *mcp.CallToolRequest) (a args) {
		json.Unmarshal(req.Params.Arguments, &a)
		return a
	}
	result := func(text string, err error) (*mcp.CallToolResult, error) {
		if err != nil {
			return nil, err
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}}, nil
	}
	tools := map[string]mcp.ToolHandler{
		"compute": func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return result(f.compute(argsOf(req).Label), nil)
		},
		"confirm": func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			if r, _ := req.Params.InputResponses["confirm"].(*mcp.ElicitResult); r != nil && r.Action == "accept" {
				if ok, _ := r.Content["confirm"].(bool); ok {
					f.confirmed.Add(1)
					return result("deleted "+argsOf(req).File, nil)
				}
			}
			return &mcp.CallToolResult{InputRequests: mcp.InputRequestMap{"confirm": &mcp.ElicitParams{Message: confirmAsk, RequestedSchema: confirmSchema}}}, nil
		},
		"gated": func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return result(f.gated(ctx, argsOf(req).Gate))
		},
		"slow": func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return result(f.slow(ctx, argsOf(req).Seconds))
		},
		"failing": func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return result("", errJobFailed)
		},
		"tool_error": func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: toolErrorMsg}}, IsError: true}, nil
		},
	}
	obj := json.RawMessage(`{"type":"object"}`)
	for name, h := range tools {
		s.AddTool(&mcp.Tool{Name: name, InputSchema: obj}, h)
		if err := tasks.Add(ctokenmcp.TaskTool(name, h, false)); err != nil {
			t.Fatal(err)
		}
	}
	s.AddTool(&mcp.Tool{Name: "release", InputSchema: obj}, func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		f.release(argsOf(req).Gate)
		return result("released", nil)
	})
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, &mcp.StreamableHTTPOptions{Stateless: true, JSONResponse: true})
	f.serve(t, tasks.Handler(h))
	return f
}

// newMCPGoTaskServer serves the same tools on an mcp-go server (stateless
// streamable HTTP) behind Tasks.Handler (ctokenmcpgo.TaskTool).
func newMCPGoTaskServer(t *testing.T) *taskServer {
	f, tasks := newTaskServer(t)
	s := server.NewMCPServer("ts-tasks-mcpgo", "v0",
		server.WithToolCapabilities(false),
		server.WithExtensions(map[string]any{mcptoken.TasksExtension: map[string]any{}}))
	result := func(text string, err error) (*mcpgo.CallToolResult, error) {
		if err != nil {
			return nil, err
		}
		return mcpgo.NewToolResultText(text), nil
	}
	tools := map[string]server.ToolHandlerFunc{
		"compute": func(_ context.Context, req mcpgo.CallToolRequest) (*mcpgo.CallToolResult, error) {
			return result(f.compute(req.GetString("label", "")), nil)
		},
		"confirm": func(_ context.Context, req mcpgo.CallToolRequest) (*mcpgo.CallToolResult, error) {
			if r := server.ElicitationResponse(req.Params.InputResponses, "confirm"); r != nil && r.Action == mcpgo.ElicitationResponseActionAccept {
				if c, _ := r.Content.(map[string]any); c["confirm"] == true {
					f.confirmed.Add(1)
					return result("deleted "+req.GetString("file", ""), nil)
				}
			}
			return server.NewInputRequestBuilder("").Elicit("confirm", mcpgo.ElicitationParams{Message: confirmAsk, RequestedSchema: confirmSchema}).ToolResult(), nil
		},
		"gated": func(ctx context.Context, req mcpgo.CallToolRequest) (*mcpgo.CallToolResult, error) {
			return result(f.gated(ctx, req.GetString("gate", "")))
		},
		"slow": func(ctx context.Context, req mcpgo.CallToolRequest) (*mcpgo.CallToolResult, error) {
			return result(f.slow(ctx, req.GetFloat("seconds", 0)))
		},
		"failing": func(context.Context, mcpgo.CallToolRequest) (*mcpgo.CallToolResult, error) {
			return result("", errJobFailed)
		},
		"tool_error": func(context.Context, mcpgo.CallToolRequest) (*mcpgo.CallToolResult, error) {
			return mcpgo.NewToolResultError(toolErrorMsg), nil
		},
	}
	for name, h := range tools {
		s.AddTool(mcpgo.NewTool(name), h)
		if err := tasks.Add(ctokenmcpgo.TaskTool(name, h, false)); err != nil {
			t.Fatal(err)
		}
	}
	s.AddTool(mcpgo.NewTool("release"), func(_ context.Context, req mcpgo.CallToolRequest) (*mcpgo.CallToolResult, error) {
		f.release(req.GetString("gate", ""))
		return result("released", nil)
	})
	f.serve(t, tasks.Handler(server.NewStreamableHTTPServer(s, server.WithStateLess(true))))
	return f
}
