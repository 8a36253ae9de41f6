package ctokenmcpgo

import (
	"bytes"
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

	"io"
	"log/slog"

	"github.com/ctoken/ctoken"
	"github.com/ctoken/ctoken/replay"
	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
)

// clock is a settable test clock, safe for concurrent use.
type clock struct{ unix atomic.Int64 }

func (c *clock) now() time.Time          { return time.Unix(c.unix.Load(), 0) }
func (c *clock) advance(d time.Duration) { c.unix.Add(int64(d / time.Second)) }

func keyring(t testing.TB, b byte) *ctoken.Keyring {
	t.Helper()
	kr, err := ctoken.NewKeyring(bytes.Repeat([]byte{b}, 32))
	if err != nil {
		t.Fatal(err)
	}
	return kr
}

// syncBuffer is a bytes.Buffer safe for concurrent writes.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// fleet is what every server instance of one deployment shares.
type fleet struct {
	clock  *clock
	issuer *ctoken.CursorIssuer
	codec  *ctoken.RequestStateCodec
	log    *syncBuffer
}

func newFleet(t testing.TB, key byte, session string, store replay.Store) *fleet {
	t.Helper()
	f := &fleet{clock: &clock{}, log: &syncBuffer{}}
	f.clock.unix.Store(time.Now().Unix())
	var err error
	f.issuer, err = ctoken.NewCursorIssuer(ctoken.CursorConfig{Keys: keyring(t, key), Session: []byte(session), Now: f.clock.now})
	if err != nil {
		t.Fatal(err)
	}
	f.codec, err = ctoken.NewRequestStateCodec(ctoken.RequestStateSecurity{
		Keys: keyring(t, key), Mode: ctoken.Encrypted, Binding: ctoken.BindSubjectAndTool, Now: f.clock.now, Replay: store,
	})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

const testPageSize = 5

var testItems = []string{"a1", "a2", "a3", "a4", "a5", "a6", "a7", "b1", "b2", "b3", "b4", "b5"}

var confirmSchema = map[string]any{"type": "object", "properties": map[string]any{"ok": map[string]any{"type": "boolean"}}}

func accepted(res *mcp.ElicitationResult) bool {
	if res == nil || res.Action != mcp.ElicitationResponseActionAccept {
		return false
	}
	m, _ := res.Content.(map[string]any)
	return m["ok"] == true
}

// server returns an mcp-go server secured with SecureRequestState, with
// paginated tools "list" and "list2", tools "ask" and "ask2" that need two
// rounds of input and are written against plaintext state, a prompt "greet"
// that needs one round, and a tool "sealer" that seals its state itself.
func (f *fleet) server(t testing.TB, who CallerFunc, sopts *StateOptions) *server.MCPServer {
	t.Helper()
	logger := newTextLogger(f.log)
	cursors, err := NewCursors(f.issuer, &CursorOptions{Caller: who, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	if sopts == nil {
		sopts = &StateOptions{}
	}
	sopts.Caller, sopts.Logger = who, logger
	states, err := NewStates(f.codec, sopts)
	if err != nil {
		t.Fatal(err)
	}
	list := func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		prefix := req.GetString("prefix", "")
		bound := map[string]any{"prefix": prefix}
		p, err := cursors.Resume(ctx, req, bound, req.GetString("cursor", ""))
		if err != nil {
			return ToolResult(err)
		}
		var match []string
		for _, it := range testItems {
			if strings.HasPrefix(it, prefix) {
				match = append(match, it)
			}
		}
		start := min(int(p.Page)*testPageSize, len(match))
		end := min(start+testPageSize, len(match))
		out := map[string]any{"items": append([]string{}, match[start:end]...)}
		if end < len(match) {
			next, err := cursors.Next(ctx, req, bound, p.Page+1, nil)
			if err != nil {
				return nil, err
			}
			out["next"] = next
		}
		return mcp.NewToolResultStructuredOnly(out), nil
	}
	ask := func(_ context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		target := req.GetString("target", "")
		elicit := func(id, msg string) mcp.ElicitationParams {
			return mcp.ElicitationParams{Message: msg, RequestedSchema: confirmSchema}
		}
		switch st := req.Params.RequestState; st {
		case "":
			return server.NewInputRequestBuilder("round1:"+target).Elicit("ok", elicit("ok", "proceed with "+target+"?")).ToolResult(), nil
		case "round1:" + target:
			if !accepted(server.ElicitationResponse(req.Params.InputResponses, "ok")) {
				return mcp.NewToolResultText("cancelled"), nil
			}
			return server.NewInputRequestBuilder("round2:"+target).Elicit("ok", elicit("ok", "really "+target+"?")).ToolResult(), nil
		case "round2:" + target:
			if !accepted(server.ElicitationResponse(req.Params.InputResponses, "ok")) {
				return mcp.NewToolResultText("cancelled"), nil
			}
			return mcp.NewToolResultText("done " + target), nil
		default:
			return mcp.NewToolResultError("handler saw an unexpected state"), nil
		}
	}
	sealer := func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return server.NewInputRequestBuilder("v1e.already-sealed").Elicit("ok", mcp.ElicitationParams{Message: "?", RequestedSchema: confirmSchema}).ToolResult(), nil
	}
	// askOnce asks without keeping a state: its retry carries only the
	// answer.
	askOnce := func(_ context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		if _, answered := server.InputResponse(req.Params.InputResponses, "ok"); !answered {
			return server.NewInputRequestBuilder("").Elicit("ok", mcp.ElicitationParams{Message: "proceed?", RequestedSchema: confirmSchema}).ToolResult(), nil
		}
		if req.Params.RequestState != "" {
			return mcp.NewToolResultError("handler saw a state"), nil
		}
		return mcp.NewToolResultText("done once"), nil
	}
	greet := func(_ context.Context, req mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
		who := req.Params.Arguments["who"]
		switch req.Params.RequestState {
		case "":
			return server.NewInputRequestBuilder("greet:"+who).Elicit("ok", mcp.ElicitationParams{Message: "greet " + who + "?", RequestedSchema: confirmSchema}).PromptResult(), nil
		case "greet:" + who:
			text := "no greeting"
			if accepted(server.ElicitationResponse(req.Params.InputResponses, "ok")) {
				text = "hello " + who
			}
			return mcp.NewGetPromptResult("greeting", []mcp.PromptMessage{mcp.NewPromptMessage(mcp.RoleUser, mcp.NewTextContent(text))}), nil
		default:
			return nil, errUnexpected
		}
	}
	s := server.NewMCPServer("test", "v0", SecureRequestState(states),
		server.WithToolCapabilities(false), server.WithPromptCapabilities(false), server.WithElicitation())
	s.AddTool(mcp.NewTool("list"), list)
	s.AddTool(mcp.NewTool("list2"), list)
	s.AddTool(mcp.NewTool("ask"), ask)
	s.AddTool(mcp.NewTool("ask2"), ask)
	s.AddTool(mcp.NewTool("sealer"), sealer)
	s.AddTool(mcp.NewTool("askonce"), askOnce)
	s.AddPrompt(mcp.NewPrompt("greet"), greet)
	return s
}

// wire wraps a client transport: it records the requestState of every
// result and every request, can replace the requestState a request sends,
// and keeps the last JSON-RPC error as it came over the wire.
type wire struct {
	transport.Interface
	mu      sync.Mutex
	results []string // requestState of results, in order
	sent    []string // requestState of requests, in order
	swap    func(string) string
	lastErr *mcp.JSONRPCErrorDetails
}

func (w *wire) SetRequestHandler(h transport.RequestHandler) {
	if b, ok := w.Interface.(transport.BidirectionalInterface); ok {
		b.SetRequestHandler(h)
	}
}

func (w *wire) SendRequest(ctx context.Context, req transport.JSONRPCRequest) (*transport.JSONRPCResponse, error) {
	w.mu.Lock()
	swap := w.swap
	w.mu.Unlock()
	var sent string
	if req.Method == "tools/call" || req.Method == "prompts/get" {
		b, err := json.Marshal(req.Params)
		if err != nil {
			return nil, err
		}
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			return nil, err
		}
		if st, _ := m["requestState"].(string); st != "" {
			if swap != nil {
				st = swap(st)
				m["requestState"] = st
				req.Params = m
			}
			sent = st
		}
	}
	resp, err := w.Interface.SendRequest(ctx, req)
	w.mu.Lock()
	defer w.mu.Unlock()
	if sent != "" {
		w.sent = append(w.sent, sent)
	}
	if resp != nil && resp.Error != nil {
		e := *resp.Error
		w.lastErr = &e
	}
	if resp != nil && len(resp.Result) > 0 {
		var r struct {
			RequestState string `json:"requestState"`
		}
		if json.Unmarshal(resp.Result, &r) == nil && r.RequestState != "" {
			w.results = append(w.results, r.RequestState)
		}
	}
	return resp, err
}

// httpWire is a wire over an HTTP transport, which the client tells the
// negotiated protocol version.
type httpWire struct{ *wire }

func (w httpWire) SetProtocolVersion(v string) {
	w.Interface.(transport.HTTPConnection).SetProtocolVersion(v)
}

func (w *wire) setSwap(f func(string) string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.swap = f
}

func (w *wire) states() (results, sent []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.results...), append([]string(nil), w.sent...)
}

// elicitor answers every elicitation with ok = answer and counts them.
type elicitor struct {
	answer bool
	asked  atomic.Int32
}

func (e *elicitor) Elicit(context.Context, mcp.ElicitationRequest) (*mcp.ElicitationResult, error) {
	e.asked.Add(1)
	return &mcp.ElicitationResult{ElicitationResponse: mcp.ElicitationResponse{
		Action: mcp.ElicitationResponseActionAccept, Content: map[string]any{"ok": e.answer},
	}}, nil
}

// peer is a connected mcp-go client, the wire under it, and the context
// its calls use.
type peer struct {
	c    *client.Client
	wire *wire
	ctx  context.Context
}

func start(t testing.TB, tr transport.Interface, ctx context.Context, e *elicitor, opts ...client.ClientOption) *peer {
	t.Helper()
	w := &wire{Interface: tr}
	if e != nil {
		opts = append(opts, client.WithElicitationHandler(e))
	}
	var wrapped transport.Interface = w
	if _, ok := tr.(transport.HTTPConnection); ok {
		wrapped = httpWire{w}
	}
	c := client.NewClient(wrapped, opts...)
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	init := mcp.InitializeRequest{}
	init.Params.ClientInfo = mcp.Implementation{Name: "test-client", Version: "v0"}
	if _, err := c.Initialize(ctx, init); err != nil {
		t.Fatal(err)
	}
	return &peer{c: c, wire: w, ctx: ctx}
}

// inProcess connects an mcp-go in-process client to s as the caller who
// (put in the context of every call with WithCaller; "" for nobody).
func inProcess(t testing.TB, s *server.MCPServer, who string, e *elicitor, opts ...client.ClientOption) *peer {
	t.Helper()
	ctx := context.Background()
	if who != "" {
		ctx = WithCaller(ctx, who)
	}
	return start(t, transport.NewInProcessTransport(s), ctx, e, opts...)
}

// bearerCaller is the HTTP context function of the tests: "Bearer <user>"
// names the caller.
func bearerCaller(ctx context.Context, r *http.Request) context.Context {
	if u, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok && u != "" {
		return WithCaller(ctx, u)
	}
	return ctx
}

// serveHTTP serves s over mcp-go's streamable HTTP transport on 127.0.0.1
// and returns its endpoint.
func serveHTTP(t testing.TB, s *server.MCPServer, opts ...server.StreamableHTTPOption) string {
	t.Helper()
	h := server.NewStreamableHTTPServer(s, append([]server.StreamableHTTPOption{server.WithHTTPContextFunc(bearerCaller)}, opts...)...)
	ts := httptest.NewServer(h)
	t.Cleanup(ts.Close)
	return ts.URL + "/mcp"
}

// overHTTP connects an mcp-go streamable HTTP client to endpoint as user.
func overHTTP(t testing.TB, endpoint, user string, e *elicitor, opts ...client.ClientOption) *peer {
	t.Helper()
	var topts []transport.StreamableHTTPCOption
	if user != "" {
		topts = append(topts, transport.WithHTTPHeaders(map[string]string{"Authorization": "Bearer " + user}))
	}
	tr, err := transport.NewStreamableHTTP(endpoint, topts...)
	if err != nil {
		t.Fatal(err)
	}
	return start(t, tr, context.Background(), e, opts...)
}

func (p *peer) call(tool string, args map[string]any) (*mcp.CallToolResult, error) {
	req := mcp.CallToolRequest{}
	req.Params.Name = tool
	req.Params.Arguments = args
	return p.c.CallTool(p.ctx, req)
}

func (p *peer) prompt(name string, args map[string]string) (*mcp.GetPromptResult, error) {
	req := mcp.GetPromptRequest{}
	req.Params.Name = name
	req.Params.Arguments = args
	return p.c.GetPrompt(p.ctx, req)
}

func text(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

// alternate is a client transport that sends each request to the next of
// several in-process servers in turn, as a load balancer in front of a fleet
// (or a server restarted between two calls) would.
type alternate struct {
	ts []transport.Interface
	n  atomic.Int32
}

func (a *alternate) Start(ctx context.Context) error {
	for _, t := range a.ts {
		if err := t.Start(ctx); err != nil {
			return err
		}
	}
	return nil
}

func (a *alternate) SendRequest(ctx context.Context, req transport.JSONRPCRequest) (*transport.JSONRPCResponse, error) {
	return a.ts[int(a.n.Add(1))%len(a.ts)].SendRequest(ctx, req)
}

func (a *alternate) SendNotification(ctx context.Context, n mcp.JSONRPCNotification) error {
	for _, t := range a.ts {
		if err := t.SendNotification(ctx, n); err != nil {
			return err
		}
	}
	return nil
}

func (a *alternate) SetNotificationHandler(h func(mcp.JSONRPCNotification)) {
	for _, t := range a.ts {
		t.SetNotificationHandler(h)
	}
}

func (a *alternate) Close() error {
	for _, t := range a.ts {
		t.Close()
	}
	return nil
}

func (a *alternate) GetSessionId() string { return "" }

// transports runs f once with an in-process client and once with a client
// over streamable HTTP on 127.0.0.1; connect joins a client to a server as
// a user.
func transports(t *testing.T, f func(t *testing.T, connect func(s *server.MCPServer, user string, e *elicitor, opts ...client.ClientOption) *peer)) {
	t.Run("in-process", func(t *testing.T) {
		f(t, func(s *server.MCPServer, user string, e *elicitor, opts ...client.ClientOption) *peer {
			return inProcess(t, s, user, e, opts...)
		})
	})
	t.Run("streamable-http", func(t *testing.T) {
		f(t, func(s *server.MCPServer, user string, e *elicitor, opts ...client.ClientOption) *peer {
			return overHTTP(t, serveHTTP(t, s), user, e, opts...)
		})
	})
}

// page calls list and returns its items and next cursor.
func page(t *testing.T, p *peer, tool, prefix, cursor string) ([]string, string, *mcp.CallToolResult) {
	t.Helper()
	res, err := p.call(tool, map[string]any{"prefix": prefix, "cursor": cursor})
	if err != nil {
		t.Fatal(err)
	}
	if res.IsError {
		return nil, "", res
	}
	m, _ := res.StructuredContent.(map[string]any)
	var items []string
	for _, it := range m["items"].([]any) {
		items = append(items, it.(string))
	}
	next, _ := m["next"].(string)
	return items, next, res
}

// handleRaw sends s a tools/call of tool by caller carrying requestState
// state, as JSON-RPC, and returns the response as JSON text.
func handleRaw(s *server.MCPServer, caller, tool, state string) string {
	req, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": "tools/call",
		"params": map[string]any{"name": tool, "arguments": map[string]any{}, "requestState": state}})
	out, _ := json.Marshal(s.HandleMessage(WithCaller(context.Background(), caller), req))
	return string(out)
}

func newTextLogger(w io.Writer) *slog.Logger { return slog.New(slog.NewTextHandler(w, nil)) }

var errUnexpected = errors.New("handler saw an unexpected state")
