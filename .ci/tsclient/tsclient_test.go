package tsclient

// The official TypeScript MCP client (testdata/client.mjs, run with the
// Node of CTOKEN_TSCLIENT_NODE and the packages of CTOKEN_TSCLIENT_MODULES)
// drives a go-sdk server secured by ctoken over streamable HTTP on
// 127.0.0.1. The server loses, once each, the response of a tools/call
// that ran (the idempotent tool's first call, and the second round of the
// two-round tool): it runs the handler, then closes the connection instead
// of answering. The script prints what the client saw as one JSON object;
// the Go test asserts on it and on the server's effect counters.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ctoken/ctoken"
	ctokenmcp "github.com/ctoken/ctoken/mcp"
	"github.com/ctoken/ctoken/mcptoken"
	"github.com/ctoken/ctoken/replay"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// userHeader names the caller (a stand-in for a bearer token's user); the
// script sends it on every request.
const userHeader = "X-Test-User"

func caller(_ context.Context, req mcp.Request) (string, error) {
	if e := req.GetExtra(); e != nil && e.Header.Get(userHeader) != "" {
		return e.Header.Get(userHeader), nil
	}
	return "", ctokenmcp.ErrNoCaller
}

// slogTo is a text logger writing to w.
func slogTo(w *fixture) *slog.Logger { return slog.New(slog.NewTextHandler(w, nil)) }

func keyring(t testing.TB, b byte) *ctoken.Keyring {
	t.Helper()
	kr, err := ctoken.NewKeyring(bytes.Repeat([]byte{b}, 32))
	if err != nil {
		t.Fatal(err)
	}
	return kr
}

// loseOnce makes the server lose the response of the first request that
// match accepts: the handler runs to the end, then the connection is
// closed without an answer, as a network failure after the work would.
type loseOnce struct {
	match func(method, tool string, params map[string]json.RawMessage) bool
	done  atomic.Bool

	mu   sync.Mutex
	lost []byte // the body of the response lost
}

// lostResult is the structuredContent of the lost JSON-RPC response.
func (l *loseOnce) lostResult(t *testing.T) map[string]any {
	t.Helper()
	var resp struct {
		Result struct {
			S map[string]any `json:"structuredContent"`
		} `json:"result"`
	}
	l.mu.Lock()
	lost := l.lost
	l.mu.Unlock()
	if err := json.Unmarshal(lost, &resp); err != nil || resp.Result.S == nil {
		t.Fatalf("the lost response is not a result with structured content: %v, %s", err, lost)
	}
	return resp.Result.S
}

// lossy serves next, losing the response of each rule's first match.
func lossy(next http.Handler, rules ...*loseOnce) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body []byte
		if r.Body != nil {
			var buf bytes.Buffer
			buf.ReadFrom(r.Body)
			body = buf.Bytes()
			r.Body = readCloser{bytes.NewReader(body)}
		}
		var msg struct {
			Method string                     `json:"method"`
			Params map[string]json.RawMessage `json:"params"`
		}
		json.Unmarshal(body, &msg)
		var name string
		json.Unmarshal(msg.Params["name"], &name)
		for _, rule := range rules {
			if rule.done.Load() || !rule.match(msg.Method, name, msg.Params) || !rule.done.CompareAndSwap(false, true) {
				continue
			}
			rec := httptest.NewRecorder()
			next.ServeHTTP(rec, r) // the work is done; the answer goes nowhere
			rule.mu.Lock()
			rule.lost = rec.Body.Bytes()
			rule.mu.Unlock()
			if c, _, err := http.NewResponseController(w).Hijack(); err == nil {
				c.Close()
			}
			return
		}
		next.ServeHTTP(w, r)
	})
}

type readCloser struct{ *bytes.Reader }

func (readCloser) Close() error { return nil }

// argString is params.arguments[key] as a string, "" when absent.
func argString(params map[string]json.RawMessage, key string) string {
	var args map[string]any
	json.Unmarshal(params["arguments"], &args)
	s, _ := args[key].(string)
	return s
}

// deployIn and deployOut are the two-round tool's input and output; the
// typed tool "deploy" has deployOut as its output schema, "deploy_raw" has
// none.
type deployIn struct {
	Target string `json:"target"`
}

type deployOut struct {
	Target string `json:"target"`
	Answer string `json:"answer"`
	Deploy int32  `json:"deploy"`
}

// fixture is the server under test and its effect counters.
type fixture struct {
	url      string
	payments atomic.Int32 // pay and pay_held
	deploys  atomic.Int32 // deploy and deploy_raw
	tools    []string     // every tool's name
	lostPay  *loseOnce
	lostRnd2 *loseOnce
	log      bytes.Buffer
	logMu    sync.Mutex
}

func (f *fixture) Write(p []byte) (int, error) {
	f.logMu.Lock()
	defer f.logMu.Unlock()
	return f.log.Write(p)
}

// logged is what the server logged so far.
func (f *fixture) logged() string {
	f.logMu.Lock()
	defer f.logMu.Unlock()
	return f.log.String()
}

// question asks the client to confirm, as an elicitation.
func question() mcp.InputRequestMap {
	return mcp.InputRequestMap{"confirm": &mcp.ElicitParams{
		Message:         "deploy?",
		RequestedSchema: map[string]any{"type": "object", "properties": map[string]any{"answer": map[string]any{"type": "string"}}},
	}}
}

func answerOf(resp mcp.InputResponseMap) string {
	r, _ := resp["confirm"].(*mcp.ElicitResult)
	if r == nil {
		return ""
	}
	a, _ := r.Content["answer"].(string)
	return a
}

// newFixture serves, on 127.0.0.1, a go-sdk server (stateless streamable
// HTTP, JSON responses, tools/list pages of 3) with: the idempotent tools
// "pay" and "pay_held" (ctokenmcp.Idempotency on a memory store, key
// argument "key", no Wait; pay_held holds its first call until a
// duplicate has been refused with 1025), the two-round tools "deploy"
// (typed, with an output schema) and "deploy_raw" (untyped) whose
// requestState ctokenmcp.SecureRequestState seals single use with
// AnswerRetries, filler tools, and ctoken's sealed list cursors
// (ctokenmcp.SecureListCursors). Every token is bound to the caller of
// userHeader.
func newFixture(t *testing.T) *fixture {
	t.Helper()
	f := &fixture{}
	logger := slogTo(f)
	s := mcp.NewServer(&mcp.Implementation{Name: "ts-fixture", Version: "v0"}, &mcp.ServerOptions{PageSize: 3})

	store := replay.NewMemoryStore(1 << 12)
	idem, err := ctokenmcp.NewIdempotency(ctokenmcp.IdempotencyOptions{
		IdempotencyConfig: mcptoken.IdempotencyConfig{Keys: keyring(t, 1), Store: store, KeyArgument: "key", Lease: 30 * time.Second},
		Caller:            caller,
		Logger:            logger,
	})
	if err != nil {
		t.Fatal(err)
	}
	paySchema := json.RawMessage(`{"type":"object","properties":{"key":{"type":"string"},"amount":{"type":"integer"}},"required":["key","amount"]}`)
	pay := func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		n := f.payments.Add(1)
		return &mcp.CallToolResult{
			Content:           []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf("payment %d", n)}},
			StructuredContent: map[string]any{"payment": n, "at": time.Now().UnixNano()},
		}, nil
	}
	release := make(chan struct{})
	var releaseOnce sync.Once
	t.Cleanup(func() { releaseOnce.Do(func() { close(release) }) })
	s.AddTool(&mcp.Tool{Name: "pay", InputSchema: paySchema}, idem.Wrap(pay))
	s.AddTool(&mcp.Tool{Name: "pay_held", InputSchema: paySchema}, idem.Wrap(func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		select {
		case <-release:
		case <-time.After(30 * time.Second): // the script's duplicate never came: its assertion fails
		}
		return pay(ctx, req)
	}))
	// A duplicate of pay_held refused with 1025 releases the held first call.
	s.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			res, err := next(ctx, method, req)
			if ctokenmcp.TokenErrorCode(err) == ctokenmcp.InProgress {
				releaseOnce.Do(func() { close(release) })
			}
			return res, err
		}
	})

	tool := func(ctx context.Context, req *mcp.CallToolRequest, in deployIn) (*mcp.CallToolResult, deployOut, error) {
		switch req.Params.RequestState {
		case "":
			return &mcp.CallToolResult{InputRequests: question(), RequestState: "confirm|" + in.Target}, deployOut{}, nil
		case "confirm|" + in.Target:
			return nil, deployOut{Target: in.Target, Answer: answerOf(req.Params.InputResponses), Deploy: f.deploys.Add(1)}, nil
		}
		return nil, deployOut{}, errors.New("unexpected state")
	}
	mcp.AddTool(s, &mcp.Tool{Name: "deploy"}, tool)
	s.AddTool(&mcp.Tool{Name: "deploy_raw", InputSchema: json.RawMessage(`{"type":"object","properties":{"target":{"type":"string"}},"required":["target"]}`)},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			var in deployIn
			if err := json.Unmarshal(req.Params.Arguments, &in); err != nil {
				return nil, err
			}
			res, out, err := tool(ctx, req, in)
			if res == nil && err == nil {
				res = &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "deployed"}}, StructuredContent: out}
			}
			return res, err
		})
	codec, err := ctoken.NewRequestStateCodec(ctoken.RequestStateSecurity{
		Keys: keyring(t, 2), Mode: ctoken.Encrypted, Binding: ctoken.BindSubjectAndTool, Replay: replay.NewMemoryStore(1 << 12),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := ctokenmcp.SecureRequestState(s, codec, &ctokenmcp.StateOptions{Caller: caller, AnswerRetries: true, Logger: logger}); err != nil {
		t.Fatal(err)
	}

	for i := 1; i <= 7; i++ {
		s.AddTool(&mcp.Tool{Name: fmt.Sprintf("filler_%d", i), InputSchema: json.RawMessage(`{"type":"object"}`)},
			func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				return &mcp.CallToolResult{}, nil
			})
	}
	issuer, err := ctoken.NewCursorIssuer(ctoken.CursorConfig{Keys: keyring(t, 3), Session: []byte("ts-fixture"), Seal: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := ctokenmcp.SecureListCursors(s, issuer, &ctokenmcp.CursorOptions{Caller: caller, Logger: logger}); err != nil {
		t.Fatal(err)
	}
	f.tools = []string{"deploy", "deploy_raw", "pay", "pay_held"}
	for i := 1; i <= 7; i++ {
		f.tools = append(f.tools, fmt.Sprintf("filler_%d", i))
	}
	sort.Strings(f.tools)

	f.lostPay = &loseOnce{match: func(method, tool string, p map[string]json.RawMessage) bool {
		return method == "tools/call" && tool == "pay" && argString(p, "key") == "lost-1"
	}}
	f.lostRnd2 = &loseOnce{match: func(method, tool string, p map[string]json.RawMessage) bool {
		return method == "tools/call" && tool == "deploy_raw" && len(p["requestState"]) > 2 && argString(p, "target") == "lost"
	}}
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, &mcp.StreamableHTTPOptions{Stateless: true, JSONResponse: true})
	srv := httptest.NewServer(lossy(h, f.lostPay, f.lostRnd2))
	t.Cleanup(srv.Close)
	f.url = srv.URL
	return f
}

// runScript runs testdata/<script> against url and returns what it
// printed last: one JSON object of observations.
func runScript(t *testing.T, script, url string) map[string]json.RawMessage {
	t.Helper()
	node, modules := os.Getenv("CTOKEN_TSCLIENT_NODE"), os.Getenv("CTOKEN_TSCLIENT_MODULES")
	if node == "" || modules == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("CTOKEN_TSCLIENT_NODE and CTOKEN_TSCLIENT_MODULES are not set, but CI=true: run .ci/mcp-tsclient.sh")
		}
		t.Skip("CTOKEN_TSCLIENT_NODE and CTOKEN_TSCLIENT_MODULES not set: run .ci/mcp-tsclient.sh")
	}
	path, err := filepath.Abs(filepath.Join("testdata", script))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, path, url, modules)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s: %v\nstdout:\n%s\nstderr:\n%s", script, err, out, stderr.String())
	}
	var last string
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); l != "" {
			last = l
		}
	}
	var obs map[string]json.RawMessage
	if err := json.Unmarshal([]byte(last), &obs); err != nil {
		t.Fatalf("%s printed no JSON object (%v):\n%s\nstderr:\n%s", script, err, out, stderr.String())
	}
	t.Logf("%s:\n%s", script, out)
	return obs
}

// outcome is one client call as the script reports it: a result, or an
// error with the JSON-RPC code and data the client surfaced.
type outcome struct {
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Name    string          `json:"name"`
		Code    any             `json:"code"`
		Message string          `json:"message"`
		Data    json.RawMessage `json:"data"`
	} `json:"error"`
}

func (o outcome) String() string { b, _ := json.Marshal(o); return string(b) }

// code is the JSON-RPC code of a refusal, 0 for a result or another error.
func (o outcome) code() int {
	if o.Error == nil {
		return 0
	}
	c, _ := o.Error.Code.(float64)
	return int(c)
}

// ctokenCode is data.ctokenCode of a refusal, 0 when absent.
func (o outcome) ctokenCode() int {
	if o.Error == nil {
		return 0
	}
	var d struct {
		C int `json:"ctokenCode"`
	}
	json.Unmarshal(o.Error.Data, &d)
	return d.C
}

func get[T any](t *testing.T, obs map[string]json.RawMessage, name string) T {
	t.Helper()
	var v T
	raw, ok := obs[name]
	if !ok {
		t.Fatalf("the script reported no %q", name)
	}
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatalf("%s: %v in %s", name, err, raw)
	}
	return v
}

// structured is the structuredContent of a call's result.
func structured(t *testing.T, o outcome) map[string]any {
	t.Helper()
	var r struct {
		S map[string]any `json:"structuredContent"`
	}
	if o.Error != nil || json.Unmarshal(o.Result, &r) != nil || r.S == nil {
		t.Fatalf("not a result with structured content: %v", o)
	}
	return r.S
}

// isInputRequired reports whether o is an input_required result with a
// ctoken-sealed state.
func isInputRequired(o outcome) bool {
	var r struct {
		Type  string `json:"resultType"`
		State string `json:"requestState"`
	}
	return o.Error == nil && json.Unmarshal(o.Result, &r) == nil && r.Type == "input_required" && strings.HasPrefix(r.State, "v1e.")
}

// A quick self-check that the lossy server really loses a response that
// ran, so the script's "lost" calls mean what they say.
func TestLossyServerRunsTheHandlerAndAnswersNothing(t *testing.T) {
	var ran atomic.Int32
	rule := &loseOnce{match: func(method, _ string, _ map[string]json.RawMessage) bool { return method == "x" }}
	srv := httptest.NewServer(lossy(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		ran.Add(1)
		w.Write([]byte("ok"))
	}), rule))
	defer srv.Close()
	for i, want := range []struct {
		lost bool
		ran  int32
	}{{true, 1}, {false, 2}} {
		t.Run(fmt.Sprintf("call %d", i+1), func(t *testing.T) {
			resp, err := http.Post(srv.URL, "application/json", strings.NewReader(`{"method":"x"}`))
			if resp != nil {
				resp.Body.Close()
			}
			var ne net.Error
			lost := err != nil && (errors.As(err, &ne) || strings.Contains(err.Error(), "EOF"))
			if lost != want.lost || ran.Load() != want.ran {
				t.Fatalf("lost %v (%v), ran %d; want lost %v, ran %d", lost, err, ran.Load(), want.lost, want.ran)
			}
		})
	}
}

func TestTypeScriptClientDrivesCtokenMCP(t *testing.T) {
	f := newFixture(t)
	obs := runScript(t, "client.mjs", f.url)

	t.Run("versions", func(t *testing.T) {
		v := get[map[string]string](t, obs, "versions")
		// The client's default (versionNegotiation absent, 'legacy')
		// speaks 2025-11-25; mode 'auto' negotiates 2026-07-28 with
		// go-sdk v1.8.0.
		if v["client"] != "2.4.0" || v["legacyProtocol"] != "2025-11-25" || v["autoProtocol"] != "2026-07-28" || !strings.HasPrefix(v["node"], "v22.") {
			t.Fatalf("%v", v)
		}
	})

	t.Run("idempotent tool", func(t *testing.T) {
		lost := get[outcome](t, obs, "payLost")
		retry := get[outcome](t, obs, "payRetry")
		again := get[outcome](t, obs, "payRetryAgain")
		cases := []struct {
			name  string
			check func(t *testing.T)
		}{
			{"the first call's response was lost after the tool ran", func(t *testing.T) {
				if lost.Error == nil || lost.code() != 0 || !f.lostPay.done.Load() {
					t.Fatalf("%v", lost)
				}
			}},
			{"the client's retry of the same call gets the first result, one effect", func(t *testing.T) {
				s := structured(t, retry)
				if s["payment"] != float64(1) || !reflect.DeepEqual(s, f.lostPay.lostResult(t)) || !bytes.Equal(retry.Result, again.Result) {
					t.Fatalf("retry %v, again %v", retry, again)
				}
			}},
			{"a changed argument under the same key is -32602 with ctokenCode 1024", func(t *testing.T) {
				o := get[outcome](t, obs, "payChanged")
				if o.code() != -32602 || o.ctokenCode() != ctokenmcp.KeyReused {
					t.Fatalf("%v", o)
				}
			}},
			{"another caller's same key is its own call", func(t *testing.T) {
				s := structured(t, get[outcome](t, obs, "payOtherCaller"))
				if s["payment"] != float64(2) {
					t.Fatalf("%v", s)
				}
			}},
			{"a concurrent duplicate is -32603 with ctokenCode 1025 and retryAfterMs, the first call's result stands", func(t *testing.T) {
				d := get[[]outcome](t, obs, "payConcurrent")
				if len(d) != 2 {
					t.Fatalf("%v", d)
				}
				ok, busy := d[0], d[1]
				if ok.Error != nil {
					ok, busy = busy, ok
				}
				var data struct {
					RetryAfterMs int `json:"retryAfterMs"`
				}
				if busy.Error != nil {
					json.Unmarshal(busy.Error.Data, &data)
				}
				s := structured(t, ok)
				if busy.code() != -32603 || busy.ctokenCode() != ctokenmcp.InProgress || data.RetryAfterMs <= 0 || s["payment"] != float64(3) {
					t.Fatalf("%v; %v", ok, busy)
				}
			}},
			{"the tools ran once per call that did work", func(t *testing.T) {
				if n := f.payments.Load(); n != 3 {
					t.Fatalf("%d payments, want 3 (lost-then-retried, other caller, concurrent)", n)
				}
			}},
		}
		for _, c := range cases {
			t.Run(c.name, c.check)
		}
	})

	t.Run("two-round tool with a single-use state that answers its retry", func(t *testing.T) {
		cases := []struct {
			name  string
			check func(t *testing.T)
		}{
			{"auto-fulfilment completes both rounds with the sealed state", func(t *testing.T) {
				s := structured(t, get[outcome](t, obs, "deployAuto"))
				if s["answer"] != "yes" || s["target"] != "auto" {
					t.Fatalf("%v", s)
				}
			}},
			{"the state on the wire is ctoken's (v1e.)", func(t *testing.T) {
				if st := get[string](t, obs, "deployState"); !strings.HasPrefix(st, "v1e.") {
					t.Fatalf("%q", st)
				}
			}},
			{"the round-two response was lost after the deploy ran", func(t *testing.T) {
				o := get[outcome](t, obs, "deployLost")
				if o.Error == nil || o.code() != 0 || !f.lostRnd2.done.Load() {
					t.Fatalf("%v", o)
				}
			}},
			{"the client's retry of round two gets the recorded result, byte for byte", func(t *testing.T) {
				retry := get[outcome](t, obs, "deployRetry")
				again := get[outcome](t, obs, "deployRetryAgain")
				s := structured(t, retry)
				if s["target"] != "lost" || s["answer"] != "yes" || !reflect.DeepEqual(s, f.lostRnd2.lostResult(t)) || !bytes.Equal(retry.Result, again.Result) {
					t.Fatalf("retry %v, again %v", retry, again)
				}
			}},
			{"the state with a changed argument is refused -32602 1023", func(t *testing.T) {
				o := get[outcome](t, obs, "deployChanged")
				if o.code() != -32602 || o.ctokenCode() != ctokenmcp.StateInvalid {
					t.Fatalf("%v", o)
				}
			}},
			{"another caller's replay of the state is refused -32602 1023", func(t *testing.T) {
				o := get[outcome](t, obs, "deployOtherCaller")
				if o.code() != -32602 || o.ctokenCode() != ctokenmcp.StateInvalid {
					t.Fatalf("%v", o)
				}
			}},
			{"one deploy per completed call", func(t *testing.T) {
				if n := f.deploys.Load(); n != 3 {
					t.Fatalf("%d deploys, want 3 (auto, lost-then-retried, typed auto)", n)
				}
			}},
			{"a 2025-11-25 client over stateless HTTP is told it cannot answer: -32021", func(t *testing.T) {
				o := get[outcome](t, obs, "deployLegacy")
				if o.code() != -32021 || !strings.Contains(o.Error.Message, "input required") {
					t.Fatalf("%v", o)
				}
			}},
			{"the typed callTool of a tool with an output schema rejects input_required with -32600", func(t *testing.T) {
				o := get[outcome](t, obs, "typedManualWithOutputSchema")
				if o.code() != -32600 || !strings.Contains(o.Error.Message, "output schema but did not return structured content") {
					t.Fatalf("%v", o)
				}
			}},
			{"the same typed callTool before listTools has cached the output schema returns input_required", func(t *testing.T) {
				o := get[outcome](t, obs, "typedManualNoListTools")
				if !isInputRequired(o) {
					t.Fatalf("%v", o)
				}
			}},
			{"an untyped request of the same tool returns input_required", func(t *testing.T) {
				o := get[outcome](t, obs, "typedManualViaRequest")
				if !isInputRequired(o) {
					t.Fatalf("%v", o)
				}
			}},
			{"the same tool completes under auto-fulfilment", func(t *testing.T) {
				s := structured(t, get[outcome](t, obs, "typedAutoWithOutputSchema"))
				if s["target"] != "typed" || s["answer"] != "yes" {
					t.Fatalf("%v", s)
				}
			}},
		}
		for _, c := range cases {
			t.Run(c.name, c.check)
		}
	})

	t.Run("list cursors", func(t *testing.T) {
		cases := []struct {
			name  string
			check func(t *testing.T)
		}{
			{"listTools pages through every tool, unchanged", func(t *testing.T) {
				for _, k := range []string{"listAll", "listPaged"} {
					names := get[[]string](t, obs, k)
					sort.Strings(names)
					if !reflect.DeepEqual(names, f.tools) {
						t.Fatalf("%s: %v, want %v", k, names, f.tools)
					}
				}
				if p := get[int](t, obs, "listPages"); p != (len(f.tools)+2)/3 {
					t.Fatalf("%d pages", p)
				}
			}},
			{"every cursor is ctoken's, sealed: no tool name shows through", func(t *testing.T) {
				cursors := get[[]string](t, obs, "listCursors")
				if len(cursors) != (len(f.tools)+2)/3-1 {
					t.Fatalf("%d cursors", len(cursors))
				}
				for _, c := range cursors {
					raw, err := base64.RawURLEncoding.DecodeString(c)
					if err != nil {
						t.Fatalf("%q: %v", c, err)
					}
					for _, name := range f.tools {
						if strings.Contains(c, name) || bytes.Contains(raw, []byte(name)) {
							t.Fatalf("%q shows %q", c, name)
						}
					}
				}
			}},
			{"a tampered cursor is -32602 with ctokenCode 1021", func(t *testing.T) {
				o := get[outcome](t, obs, "listTampered")
				if o.code() != -32602 || o.ctokenCode() != ctoken.CodeCursorInvalid {
					t.Fatalf("%v", o)
				}
			}},
			{"another caller's cursor is -32602 with ctokenCode 1021", func(t *testing.T) {
				o := get[outcome](t, obs, "listOtherCaller")
				if o.code() != -32602 || o.ctokenCode() != ctoken.CodeCursorInvalid {
					t.Fatalf("%v", o)
				}
			}},
		}
		for _, c := range cases {
			t.Run(c.name, c.check)
		}
	})

	if log := f.logged(); strings.Contains(log, "level=ERROR") {
		t.Errorf("server logged an error:\n%s", log)
	}
}
