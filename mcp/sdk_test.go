package ctokenmcp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ctoken/ctoken"
	"github.com/ctoken/ctoken/mcptoken"
	"github.com/ctoken/ctoken/replay"
	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The tests of sdk.go: each provokes, from the go-sdk in go.mod, a
// behaviour the package mirrors, and checks that the mirror still reads
// it. A go-sdk upgrade that changes one fails here.

// TestClassifyReadsWhatGoSDKReturns: each error go-sdk's client returns
// over streamable HTTP, the ones matched by their text included, gets its
// verdict.
func TestClassifyReadsWhatGoSDKReturns(t *testing.T) {
	stateful, stateless := &mcp.StreamableHTTPOptions{}, &mcp.StreamableHTTPOptions{Stateless: true, JSONResponse: true}
	callOnce := func(t *testing.T, opts *mcp.StreamableHTTPOptions, mode dropMode, rt http.RoundTripper) error {
		url, _ := serveDropping(t, idemDeployServer(t, &deployTool{}, true), opts, func(int) dropMode { return mode })
		_, err := clientFor(t, url, nil, rt).CallTool(context.Background(), deployParams("api"))
		if err == nil {
			t.Fatal("the call succeeded")
		}
		return err
	}
	for _, c := range []struct {
		name  string
		opts  *mcp.StreamableHTTPOptions
		mode  dropMode
		match func(error) bool
		want  verdict
	}{
		{"an SSE stream cut after its headers: request terminated without response", stateful, cutAfterHeaders, sdkStreamEnded, verdict{Retry: true, Reached: true}},
		{"a JSON response cut after its headers: failed to read body", stateless, cutAfterHeaders, sdkBodyCut, verdict{Reached: true, Closed: true}},
		{"a 400 without a JSON-RPC body: its status text", stateless, refusedWith(http.StatusBadRequest), sdkHTTPRefused, verdict{Closed: true}},
		{"a 401 without a JSON-RPC body: its status text", stateless, refusedWith(http.StatusUnauthorized), sdkHTTPRefused, verdict{Closed: true}},
		{"a 403 without a JSON-RPC body: its status text", stateless, refusedWith(http.StatusForbidden), sdkHTTPRefused, verdict{Closed: true}},
		{"a connection closed before the answer: rejected by transport", stateless, dropBefore, rejected, verdict{Retry: true, Reached: true}},
		{"a proxy's 502 after its upstream ran: rejected by transport", stateless, ranThen(http.StatusBadGateway), rejected, verdict{Retry: true, Reached: true}},
		{"a 429: rejected by transport", stateless, refusedWith(http.StatusTooManyRequests), rejected, verdict{Retry: true, Reached: true}},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := callOnce(t, c.opts, c.mode, nil)
			if !c.match(err) {
				t.Fatalf("go-sdk now returns %v (%T); revisit sdk.go", err, err)
			}
			if got := classify(err); got != c.want {
				t.Fatalf("classify(%v) = %+v, want %+v", err, got, c.want)
			}
		})
	}
	t.Run("a refused dial: rejected by transport, not sent", func(t *testing.T) {
		var refuse atomic.Bool
		rt := &http.Transport{DisableKeepAlives: true, DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if refuse.Load() {
				return nil, &net.OpError{Op: "dial", Net: network, Err: syscall.ECONNREFUSED}
			}
			return (&net.Dialer{}).DialContext(ctx, network, addr)
		}}
		url, _ := serveDropping(t, idemDeployServer(t, &deployTool{}, true), nil, nil)
		cs := clientFor(t, url, nil, rt)
		refuse.Store(true)
		_, err := cs.CallTool(context.Background(), deployParams("api"))
		if !rejected(err) {
			t.Fatalf("go-sdk now returns %v (%T); revisit sdk.go", err, err)
		}
		if got := classify(err); got != (verdict{Retry: true}) {
			t.Fatalf("classify(%v) = %+v", err, got)
		}
	})
}

// rejected reports err to carry go-sdk's jsonrpc2.ErrRejected (codeRejected).
func rejected(err error) bool {
	var we *jsonrpc.Error
	return errors.As(err, &we) && we.Code == codeRejected
}

// TestGoSDKFailsOlderClientsInputWithCodeZero pins the go-sdk behaviour the
// middleware corrects: without it, a 2025-11-25 client without elicitation
// gets code 0 and a message beginning with sdkMRTRPrefix. If a go-sdk
// upgrade changes that, this test says the mapping needs another look.
func TestGoSDKFailsOlderClientsInputWithCodeZero(t *testing.T) {
	s := mcp.NewServer(&mcp.Implementation{Name: "bare", Version: "v0"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "ask"}, func(context.Context, *mcp.CallToolRequest, stepIn) (*mcp.CallToolResult, stepOut, error) {
		return &mcp.CallToolResult{InputRequests: question("q"), RequestState: "s"}, stepOut{}, nil
	})
	st, ct := mcp.NewInMemoryTransports()
	ss, err := s.Connect(context.Background(), st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ss.Close() })
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "old", Version: "v0"}, nil).Connect(context.Background(), ct, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	_, err = cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "ask", Arguments: stepIn{}})
	var we *jsonrpc.Error
	if !errors.As(err, &we) || we.Code != 0 || !sdkInputFailed(errors.New(we.Message)) {
		t.Errorf("go-sdk now answers %v; revisit olderClientError", err)
	}
}

// TestRequiredTaskToolBehindTheSDK: whatever the body, go-sdk behind
// Tasks.Handler never runs a required task tool synchronously for a client
// that did not declare the extension: the adapter must read each body as
// the SDK does (exact keys, the first JSON value, batches).
func TestRequiredTaskToolBehindTheSDK(t *testing.T) {
	ts := aliceTasks(t)
	var ran []string
	h := func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		ran = append(ran, req.Params.Name)
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "ran"}}}, nil
	}
	server := mcp.NewServer(&mcp.Implementation{Name: "t", Version: "1"}, nil)
	for _, name := range []string{"job", "plain"} {
		server.AddTool(&mcp.Tool{Name: name, InputSchema: &jsonschema.Schema{Type: "object"}}, h)
	}
	if err := ts.Add(TaskTool("job", h, true)); err != nil {
		t.Fatal(err)
	}
	handler := ts.Handler(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, &mcp.StreamableHTTPOptions{Stateless: true, JSONResponse: true, MaxRequestBodyBytes: 16 << 20}))
	post := func(version, body string) string {
		r := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set("Accept", "application/json, text/event-stream")
		r.Header.Set("Mcp-Protocol-Version", version)
		w := httptest.NewRecorder()
		handler.ServeHTTP(w, r)
		return w.Body.String()
	}
	// The harness reaches the SDK's handler: a plain tool runs.
	for _, v := range []string{"2025-03-26", "2025-11-25"} {
		ran = nil
		if out := post(v, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"plain","arguments":{}}}`); len(ran) != 1 {
			t.Fatalf("%s: the plain tool did not run: %s", v, out)
		}
	}
	call := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"job","arguments":{}}}`
	for _, body := range []string{
		call,
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"job","NAME":"plain","arguments":{}}}`,
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","METHOD":"ping","params":{"name":"job","arguments":{}}}`,
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"job","name":"plain","arguments":{}}}`,
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"plain","name":"job","arguments":{}}}`,
		call + ` {}`,
		call + `x`,
		`[` + call + `]`,
		`[` + call + `] x`,
		"\ufeff" + call,
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"job","arguments":{"pad":"` + strings.Repeat("a", 5<<20) + `"}}}`,
	} {
		for _, v := range []string{"2025-03-26", "2025-11-25"} {
			ran = nil
			if out := post(v, body); len(ran) != 0 {
				t.Errorf("%s %.200s: the SDK ran %q for a client without the extension: %s", v, body, ran, out)
			}
		}
	}
}

// TestTasksHandlerReadsAsMuchAsGoSDK: behind Tasks.Handler, go-sdk's
// handler with its default body cap runs the same calls as alone, at the
// cap and one byte over it.
func TestTasksHandlerReadsAsMuchAsGoSDK(t *testing.T) {
	ts := aliceTasks(t)
	var ran atomic.Int32
	server := mcp.NewServer(&mcp.Implementation{Name: "t", Version: "1"}, nil)
	server.AddTool(&mcp.Tool{Name: "plain", InputSchema: &jsonschema.Schema{Type: "object"}}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		ran.Add(1)
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "ran"}}}, nil
	})
	sdk := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, &mcp.StreamableHTTPOptions{Stateless: true, JSONResponse: true})
	runs := func(h http.Handler, body string) bool {
		ran.Store(0)
		r := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set("Accept", "application/json, text/event-stream")
		r.Header.Set("Mcp-Protocol-Version", "2025-11-25")
		h.ServeHTTP(httptest.NewRecorder(), r)
		return ran.Load() == 1
	}
	head, tail := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"plain","arguments":{"pad":"`, `"}}}`
	for _, size := range []int{mcp.DefaultMaxRequestBodyBytes, mcp.DefaultMaxRequestBodyBytes + 1} {
		body := head + strings.Repeat("a", size-len(head)-len(tail)) + tail
		alone, behind := runs(sdk, body), runs(ts.Handler(sdk), body)
		if alone != behind || size == mcp.DefaultMaxRequestBodyBytes && !alone {
			t.Errorf("a body of %d bytes: go-sdk alone ran it: %v, behind Tasks.Handler: %v; revisit maxTaskRequestBytes", size, alone, behind)
		}
	}
}

// aliceTasks is a Tasks on a memory store whose every caller is alice.
func aliceTasks(t *testing.T) *mcptoken.Tasks {
	t.Helper()
	keys, err := ctoken.NewKeyring(ctoken.RandomKey())
	if err != nil {
		t.Fatal(err)
	}
	ts, err := mcptoken.NewTasks(mcptoken.TasksConfig{Keys: keys, Store: replay.NewMemoryStore(0), Hold: time.Second,
		Caller: func(*http.Request) (string, error) { return "alice", nil }})
	if err != nil {
		t.Fatal(err)
	}
	return ts
}

// TestTasksHandlerRefusesAVersionOnlyInMetaAsGoSDK: a task request whose
// headers do not state the protocol version its _meta states (none of
// MCP-Protocol-Version, Mcp-Method, Mcp-Name; another version; the header's
// 2026-07-28 and no version in _meta) gets from Tasks.Handler, for a task
// tool's call and for each task method, the HTTP status and JSON-RPC error
// code go-sdk answers a plain tool's call with, and runs nothing.
func TestTasksHandlerRefusesAVersionOnlyInMetaAsGoSDK(t *testing.T) {
	ts := aliceTasks(t)
	var ran atomic.Int32
	h := func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		ran.Add(1)
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "ran"}}}, nil
	}
	server := mcp.NewServer(&mcp.Implementation{Name: "t", Version: "1"}, nil)
	for _, name := range []string{"job", "plain"} {
		server.AddTool(&mcp.Tool{Name: name, InputSchema: &jsonschema.Schema{Type: "object"}}, h)
	}
	if err := ts.Add(TaskTool("job", h, false)); err != nil {
		t.Fatal(err)
	}
	handler := ts.Handler(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, &mcp.StreamableHTTPOptions{Stateless: true, JSONResponse: true}))
	for _, c := range sdkVersionCases {
		want := c.post(t, handler, "tools/call", "plain")
		if want.status != http.StatusBadRequest || want.code == 0 || want.id != "1" || ran.Load() != 0 {
			t.Fatalf("%s: go-sdk answered a plain tool's call %+v (the tool ran %d times): the case no longer provokes its refusal", c.name, want, ran.Load())
		}
		for _, m := range [...]string{"tools/call", "tasks/get", "tasks/update", "tasks/cancel"} {
			if got := c.post(t, handler, m, "job"); got.status != want.status || got.code != want.code || got.id != want.id || ran.Load() != 0 {
				t.Errorf("%s: %s answered %+v, go-sdk a plain tool's call %+v", c.name, m, got, want)
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
