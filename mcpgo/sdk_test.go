package ctokenmcpgo

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
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ctoken/ctoken/mcptoken"
	"github.com/ctoken/ctoken/replay"
	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
)

// The tests of sdk.go: each provokes, from the mcp-go in go.mod, a
// behaviour the package mirrors, and checks that the mirror still reads
// it. An mcp-go upgrade that changes one fails here.

// errNilResponse is the text of mcp-go's error, without a type, of a
// response stream (SSE) that ended before the call's response; classify
// retries it as any transport error it does not know.
const errNilResponse = "unexpected nil response"

// TestClassifyReadsWhatMcpGoReturns: each error mcp-go's client returns,
// the ones matched or cut by their text included, gets its verdict.
func TestClassifyReadsWhatMcpGoReturns(t *testing.T) {
	cases := []struct {
		name   string
		mode   dropMode
		sse    bool
		legacy bool
		is     error // err matches it, when set
		suffix string
		want   verdict
	}{
		{"connection closed before the server answered", dropBefore, false, false, io.EOF, "EOF", verdict{Retry: true, Reached: true}},
		{"connection closed after the server answered", dropAfter, true, false, io.EOF, "EOF", verdict{Retry: true, Reached: true}},
		{"connection reset after the server answered", resetAfter, false, false, nil, "", verdict{Retry: true, Reached: true}},
		{"JSON response cut midway by a reset", cutThenReset, false, false, nil, "", verdict{Retry: true, Reached: true}},
		{"JSON response cut midway", cutMidway, false, false, io.ErrUnexpectedEOF, "failed to decode response: unexpected EOF", verdict{Retry: true, Reached: true}},
		{"SSE stream cut before the response", cutMidway, true, false, nil, "transport error: " + errNilResponse, verdict{Retry: true, Reached: true}},
		{"SSE stream cut before the response, 2025-11-25", cutMidway, true, true, nil, "transport error: " + errNilResponse, verdict{Retry: true, Reached: true}},
		{"session the server no longer has", notFound, false, true, transport.ErrSessionTerminated, "", verdict{Closed: true}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			url, _ := serveDropping(t, idemDeployServer(t, &deployTool{notify: c.sse}, true, nil), once(c.mode))
			var opts []client.ClientOption
			if c.legacy {
				opts = append(opts, client.WithProtocolVersion(legacyVersion))
			}
			_, err := clientFor(t, url, nil, opts...).CallTool(context.Background(), deployRequest("api"))
			var te *transport.Error
			if !errors.As(err, &te) || c.is != nil && !errors.Is(err, c.is) || !strings.HasSuffix(fmt.Sprint(err), c.suffix) {
				t.Fatalf("mcp-go returned %v", err)
			}
			if got := classify(err); got != c.want {
				t.Fatalf("classify(%v) = %+v, want %+v", err, got, c.want)
			}
		})
	}
	t.Run("dial refused", func(t *testing.T) {
		url, _ := serveDropping(t, idemDeployServer(t, &deployTool{}, true, nil), nil)
		var refuse atomic.Bool
		c := clientFor(t, url, &http.Client{Transport: &http.Transport{DisableKeepAlives: true, DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if refuse.Load() {
				return nil, &net.OpError{Op: "dial", Net: network, Err: syscall.ECONNREFUSED}
			}
			return (&net.Dialer{}).DialContext(ctx, network, addr)
		}}})
		refuse.Store(true)
		_, err := c.CallTool(context.Background(), deployRequest("api"))
		if got := classify(err); got != (verdict{Retry: true}) {
			t.Fatalf("classify(%v) = %+v", err, got)
		}
	})
	t.Run("an HTTP 4xx other than 401 and 404: request failed with status N", func(t *testing.T) {
		for _, status := range []int{http.StatusBadRequest, http.StatusForbidden, http.StatusUnprocessableEntity} {
			url, _ := serveDropping(t, idemDeployServer(t, &deployTool{}, true, nil), once(refusedWith(status)))
			_, err := clientFor(t, url, nil).CallTool(context.Background(), deployRequest("api"))
			if got := sdkHTTPStatus(err); got != status {
				t.Fatalf("mcp-go returned %v for a %d; revisit sdkHTTPStatus", err, status)
			}
			if got := classify(err); got != (verdict{}) {
				t.Fatalf("classify(%v) = %+v", err, got)
			}
		}
	})
	t.Run("a call before initialize: client not initialized", func(t *testing.T) {
		url, _ := serveDropping(t, idemDeployServer(t, &deployTool{}, true, nil), nil)
		tr, err := transport.NewStreamableHTTP(url)
		if err != nil {
			t.Fatal(err)
		}
		c := client.NewClient(tr)
		if err := c.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		_, err = c.CallTool(context.Background(), deployRequest("api"))
		if err == nil || !sdkNotInitialized(err) {
			t.Fatalf("mcp-go returned %v; revisit sdkNotInitialized", err)
		}
		if got := classify(err); got != (verdict{}) {
			t.Fatalf("classify(%v) = %+v", err, got)
		}
	})
	t.Run("a handler's error: internal error, then its text", func(t *testing.T) {
		var calls atomic.Int32
		p := inProcess(t, refusingServer(1, nil, ErrIdempotencyStore, &calls), "alice", nil)
		_, err := p.c.CallTool(p.ctx, deployRequest("api"))
		if err == nil || !errors.Is(err, mcp.ErrInternalError) || sdkInternalMessage(err) != ErrIdempotencyStore.Error() {
			t.Fatalf("mcp-go returned %v; revisit sdkInternalMessage", err)
		}
		if got := classify(err); got != (verdict{Retry: true, Reached: true}) {
			t.Fatalf("classify(%v) = %+v", err, got)
		}
	})
	t.Run("a busy refusal: its hint at the end of the text", func(t *testing.T) {
		busy := mcptoken.RefuseState(mcptoken.ErrStateBusy)
		busy.RetryAfter = 5 * time.Millisecond
		var calls atomic.Int32
		p := inProcess(t, refusingServer(1, nil, newRejection(busy), &calls), "alice", nil)
		_, err := p.c.CallTool(p.ctx, deployRequest("api"))
		if errors.As(err, new(*Rejection)) {
			t.Fatalf("the client got the server's Rejection itself: %v", err)
		}
		if d, ok := StateRetryAfter(err); !ok || d != 5*time.Millisecond {
			t.Fatalf("mcp-go returned %v, read as %v, %v; revisit sdkCutMessageEnd", err, d, ok)
		}
		if got := classify(err); got != (verdict{Retry: true, Reached: true, Hint: 5 * time.Millisecond}) {
			t.Fatalf("classify(%v) = %+v", err, got)
		}
	})
}

// TestRequiredTaskToolBehindMcpGo: a Required task tool never runs through
// mcp-go for a client that did not declare the Tasks extension, however
// the request spells its keys: mcp-go decodes with encoding/json, which
// matches keys case-insensitively and keeps the last of duplicates.
func TestRequiredTaskToolBehindMcpGo(t *testing.T) {
	tasks, err := mcptoken.NewTasks(mcptoken.TasksConfig{Keys: keyring(t, 9), Store: replay.NewMemoryStore(0),
		Caller: func(*http.Request) (string, error) { return "alice", nil }})
	if err != nil {
		t.Fatal(err)
	}
	var ran []string
	h := func(_ context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		ran = append(ran, req.Params.Name)
		return mcp.NewToolResultText("ran"), nil
	}
	s := server.NewMCPServer("t", "v0", server.WithToolCapabilities(true))
	s.AddTool(mcp.NewTool("job"), h)
	s.AddTool(mcp.NewTool("plain"), h)
	if err := tasks.Add(TaskTool("job", h, true)); err != nil {
		t.Fatal(err)
	}
	handler := tasks.Handler(server.NewStreamableHTTPServer(s))
	// Stateless 2026-07-28 requests, each with the headers mcp-go checks
	// against the body as mcp-go reads the body.
	post := func(body string) string {
		body = strings.Replace(body, `"arguments":{}`, `"arguments":{},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}`, -1)
		r := httptest.NewRequest(http.MethodPost, "/mcp", strings.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set("Accept", "application/json, text/event-stream")
		r.Header.Set("Mcp-Protocol-Version", "2026-07-28")
		var m struct {
			Method string
			Params struct{ Name string }
		}
		json.Unmarshal([]byte(body), &m)
		r.Header.Set("Mcp-Method", m.Method)
		r.Header.Set("Mcp-Name", m.Params.Name)
		w := httptest.NewRecorder()
		handler.ServeHTTP(w, r)
		return w.Body.String()
	}
	if out := post(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"plain","arguments":{}}}`); len(ran) != 1 {
		t.Fatalf("the plain tool did not run: %s", out)
	}
	call := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"job","arguments":{}}}`
	for _, body := range []string{
		call,
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"NAME":"job","arguments":{}}}`,
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"Name":"job","arguments":{}}}`,
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"plain","Name":"job","arguments":{}}}`,
		`{"jsonrpc":"2.0","id":1,"METHOD":"tools/call","params":{"name":"job","arguments":{}}}`,
		`{"jsonrpc":"2.0","id":1,"method":"ping","Method":"tools/call","params":{"name":"job","arguments":{}}}`,
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","PARAMS":{"name":"job","arguments":{}}}`,
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"plain","arguments":{}},"Params":{"name":"job","arguments":{}}}`,
	} {
		ran = nil
		if out := post(body); len(ran) != 0 {
			t.Errorf("%s: mcp-go ran %q for a client without the extension: %.300s", body, ran, out)
		}
	}
}

// TestTasksHandlerRefusesAVersionOnlyInMetaAsMcpGo: a task request whose
// headers do not state the protocol version its _meta states (none of
// MCP-Protocol-Version, Mcp-Method, Mcp-Name; another version; the header's
// 2026-07-28 and no version in _meta) gets from Tasks.Handler, for a task
// tool's call and for each task method, the HTTP status and JSON-RPC error
// code mcp-go answers a plain tool's call with, and runs nothing.
func TestTasksHandlerRefusesAVersionOnlyInMetaAsMcpGo(t *testing.T) {
	tasks, err := mcptoken.NewTasks(mcptoken.TasksConfig{Keys: keyring(t, 9), Store: replay.NewMemoryStore(0),
		Caller: func(*http.Request) (string, error) { return "alice", nil }})
	if err != nil {
		t.Fatal(err)
	}
	var ran atomic.Int32
	h := func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		ran.Add(1)
		return mcp.NewToolResultText("ran"), nil
	}
	s := server.NewMCPServer("t", "v0", server.WithToolCapabilities(true))
	s.AddTool(mcp.NewTool("job"), h)
	s.AddTool(mcp.NewTool("plain"), h)
	if err := tasks.Add(TaskTool("job", h, false)); err != nil {
		t.Fatal(err)
	}
	handler := tasks.Handler(server.NewStreamableHTTPServer(s))
	for _, c := range sdkVersionCases {
		want := c.post(t, handler, "tools/call", "plain")
		if want.status != http.StatusBadRequest || want.code == 0 || want.id != "1" || ran.Load() != 0 {
			t.Fatalf("%s: mcp-go answered a plain tool's call %+v (the tool ran %d times): the case no longer provokes its refusal", c.name, want, ran.Load())
		}
		for _, m := range [...]string{"tools/call", "tasks/get", "tasks/update", "tasks/cancel"} {
			if got := c.post(t, handler, m, "job"); got.status != want.status || got.code != want.code || got.id != want.id || ran.Load() != 0 {
				t.Errorf("%s: %s answered %+v, mcp-go a plain tool's call %+v", c.name, m, got, want)
			}
		}
	}
}

// sdkVersionCase is a request whose headers and _meta disagree on its
// protocol version.
type sdkVersionCase struct {
	name    string
	meta    string // _meta's protocol version, or ""
	version string // the MCP-Protocol-Version header, or ""
	named   bool   // Mcp-Method and Mcp-Name sent, naming the body's
}

var sdkVersionCases = []sdkVersionCase{
	{"a version only in _meta", "2026-07-28", "", false},
	{"another version in the header", "2026-07-28", "2025-11-25", true},
	{"a version only in the header", "", "2026-07-28", true},
}

// sdkAnswer is what a refusal says.
type sdkAnswer struct {
	status int
	code   int64
	id     string
}

// post sends method (a tools/call of tool, or a task method for an ID) as
// c says, declaring the Tasks extension.
func (c sdkVersionCase) post(t *testing.T, h http.Handler, method, tool string) sdkAnswer {
	t.Helper()
	meta := map[string]any{"io.modelcontextprotocol/clientCapabilities": map[string]any{"extensions": map[string]any{mcptoken.TasksExtension: map[string]any{}}}}
	if c.meta != "" {
		meta["io.modelcontextprotocol/protocolVersion"] = c.meta
	}
	params, name := map[string]any{"taskId": "t1", "inputResponses": map[string]any{}, "_meta": meta}, "t1"
	if method == "tools/call" {
		params, name = map[string]any{"name": tool, "arguments": map[string]any{}, "_meta": meta}, tool
	}
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
	r := httptest.NewRequest(http.MethodPost, "/", bytes.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("Accept", "application/json, text/event-stream")
	if c.version != "" {
		r.Header.Set("Mcp-Protocol-Version", c.version)
	}
	if c.named {
		r.Header.Set("Mcp-Method", method)
		r.Header.Set("Mcp-Name", name)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	var out struct {
		ID    json.RawMessage
		Error struct{ Code int64 }
	}
	if err := json.Unmarshal(w.Body.Bytes(), &out); err != nil {
		t.Fatalf("%s %s: answer %d %q is not JSON", c.name, method, w.Code, w.Body.String())
	}
	return sdkAnswer{w.Code, out.Error.Code, string(out.ID)}
}
