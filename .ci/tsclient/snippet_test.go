package tsclient

// The TypeScript program of docs/mcp.md ("The official TypeScript
// client"), run as written against the page's own Go tools: "pay"
// (idempotency_key, to, cents) and the two-round "deploy" (service,
// version; it asks "confirm"), each wrapped by ctokenmcp.Idempotency, its
// request state sealed single use with AnswerRetries. Each tool must act
// once however the program's calls fail: a first answer lost (a proxy's
// 502 after pay ran; deploy's round two cut off), the program killed while
// pay runs and run again, the server restarted while pay runs and down
// past the old program's give-up point.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ctoken/ctoken"
	ctokenmcp "github.com/ctoken/ctoken/mcp"
	"github.com/ctoken/ctoken/mcptoken"
	"github.com/ctoken/ctoken/replay"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// failsafe bounds every wait for an event that must come.
const failsafe = 60 * time.Second

// docSnippet returns the first ```js block after heading in the page at
// path.
func docSnippet(t *testing.T, path, heading string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(b), "\n"+heading+"\n")
	if !ok {
		t.Fatalf("%s has no heading %q", path, heading)
	}
	_, code, ok := strings.Cut(after, "\n```js\n")
	if !ok {
		t.Fatalf("%s has no js block after %q", path, heading)
	}
	code, _, ok = strings.Cut(code, "\n```\n")
	if !ok {
		t.Fatalf("%s: the js block after %q does not end", path, heading)
	}
	return code
}

// The page's deploy tool: its input and output.
type docDeployIn struct {
	Service string `json:"service"`
	Version string `json:"version"`
}

type docDeployOut struct {
	Status string `json:"status"`
	Plan   string `json:"plan,omitempty"`
	Deploy int32  `json:"deploy,omitempty"`
}

// docTools are the page's tools, counted, over stores that outlive a
// server: each call of server builds what a restarted process would.
type docTools struct {
	t                 *testing.T
	payments, deploys atomic.Int32
	records, states   *replay.MemoryStore
	payStarted        chan struct{} // when set, closed as the first payment is made
	payGate           chan struct{} // when set, every payment waits for it after it is made: opened by open
	gateOnce          sync.Once
	payRecorded       chan struct{} // closed as the first pay call returns: its result is recorded
	once              sync.Once
	mu                sync.Mutex
	payKeys           []string // the idempotency_key of every payment
}

func newDocTools(t *testing.T) *docTools {
	return &docTools{t: t, records: replay.NewMemoryStore(1 << 10), states: replay.NewMemoryStore(1 << 10), payRecorded: make(chan struct{})}
}

func (d *docTools) server() *mcp.Server {
	t := d.t
	s := mcp.NewServer(&mcp.Implementation{Name: "docs", Version: "v0"}, nil)
	idem, err := ctokenmcp.NewIdempotency(ctokenmcp.IdempotencyOptions{
		IdempotencyConfig: mcptoken.IdempotencyConfig{Keys: keyring(t, 4), Store: d.records, KeyArgument: "idempotency_key", KeyFromMeta: true},
		Caller:            ctokenmcp.FixedCaller("agent"),
	})
	if err != nil {
		t.Fatal(err)
	}
	// pay, as the page declares it.
	pay := idem.Wrap(func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		var in struct {
			Key   string `json:"idempotency_key"`
			To    string `json:"to"`
			Cents int    `json:"cents"`
		}
		if err := json.Unmarshal(req.Params.Arguments, &in); err != nil || in.To == "" || in.Cents <= 0 {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "to and a positive cents are required"}
		}
		n := d.payments.Add(1)
		d.mu.Lock()
		d.payKeys = append(d.payKeys, in.Key)
		d.mu.Unlock()
		if d.payStarted != nil && n == 1 {
			close(d.payStarted)
		}
		if d.payGate != nil {
			<-d.payGate
		}
		return &mcp.CallToolResult{
			Content:           []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf("paid %d cents to %s", in.Cents, in.To)}},
			StructuredContent: map[string]any{"payment": n, "to": in.To, "cents": in.Cents},
		}, nil
	})
	s.AddTool(&mcp.Tool{Name: "pay", InputSchema: json.RawMessage(`{"type":"object",
	"properties":{"idempotency_key":{"type":"string","description":"a fresh UUID per payment; the same on every retry of it"},
	"to":{"type":"string"},"cents":{"type":"integer"}},"required":["idempotency_key","to","cents"]}`)},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			defer d.once.Do(func() { close(d.payRecorded) })
			return pay(ctx, req)
		})
	// deploy, as the page writes it, wrapped by the same Idempotency.
	mcp.AddTool(s, &mcp.Tool{Name: "deploy"}, ctokenmcp.WrapFor(idem, func(ctx context.Context, req *mcp.CallToolRequest, in docDeployIn) (*mcp.CallToolResult, docDeployOut, error) {
		if req.Params.RequestState == "" { // round one: ask, and remember the plan
			return &mcp.CallToolResult{
				InputRequests: mcp.InputRequestMap{"confirm": &mcp.ElicitParams{Message: "Deploy " + in.Service + " " + in.Version + "?",
					RequestedSchema: map[string]any{"type": "object", "properties": map[string]any{"ok": map[string]any{"type": "boolean"}}}}},
				RequestState: "plan: 3 steps",
			}, docDeployOut{}, nil
		}
		if c := req.Params.InputResponses["confirm"]; c == nil {
			return nil, docDeployOut{}, errors.New("no confirmation")
		}
		return nil, docDeployOut{Status: "deployed", Plan: req.Params.RequestState, Deploy: d.deploys.Add(1)}, nil
	}))
	codec, err := ctoken.NewRequestStateCodec(ctoken.RequestStateSecurity{
		Keys: keyring(t, 5), Mode: ctoken.Encrypted, Binding: ctoken.BindSubjectAndTool, Replay: d.states,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := ctokenmcp.SecureRequestState(s, codec, &ctokenmcp.StateOptions{Caller: ctokenmcp.FixedCaller("agent"), AnswerRetries: true}); err != nil {
		t.Fatal(err)
	}
	return s
}

// gate makes every payment wait for open after it is made. Called before
// any server starts; a test opens it in a cleanup registered after its
// server's, so that no handler outlives the test.
func (d *docTools) gate() { d.payStarted, d.payGate = make(chan struct{}), make(chan struct{}) }

func (d *docTools) open() { d.gateOnce.Do(func() { close(d.payGate) }) }

// handler serves a new server over streamable HTTP with opts.
func (d *docTools) handler(opts *mcp.StreamableHTTPOptions) http.Handler {
	s := d.server()
	return mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, opts)
}

// snippet is the page's program, written beside node_modules so that its
// import resolves, with the node that runs it.
type snippet struct {
	node, script, keys string
}

func docProgram(t *testing.T) *snippet {
	node, modules := os.Getenv("CTOKEN_TSCLIENT_NODE"), os.Getenv("CTOKEN_TSCLIENT_MODULES")
	if node == "" || modules == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("CTOKEN_TSCLIENT_NODE and CTOKEN_TSCLIENT_MODULES are not set, but CI=true: run .ci/mcp-tsclient.sh")
		}
		t.Skip("CTOKEN_TSCLIENT_NODE and CTOKEN_TSCLIENT_MODULES not set: run .ci/mcp-tsclient.sh")
	}
	code := docSnippet(t, "../../docs/mcp.md", "## The official TypeScript client")
	script := filepath.Join(filepath.Dir(modules), fmt.Sprintf("docs-snippet-%d-%s.mjs", os.Getpid(), strings.ReplaceAll(t.Name(), "/", "-")))
	if err := os.WriteFile(script, []byte(code), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(script) })
	return &snippet{node: node, script: script, keys: filepath.Join(t.TempDir(), "pending-keys.json")}
}

// run is one run of the program.
type run struct {
	cmd            *exec.Cmd
	stdout, stderr bytes.Buffer
	done           chan struct{} // closed as it ends, err set
	err            error
}

// start runs the program against url.
func (p *snippet) start(t *testing.T, url string) *run {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*failsafe)
	t.Cleanup(cancel)
	r := &run{cmd: exec.CommandContext(ctx, p.node, p.script, url, p.keys), done: make(chan struct{})}
	r.cmd.Dir = filepath.Dir(p.keys)
	r.cmd.Stdout, r.cmd.Stderr = &r.stdout, &r.stderr
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { r.err = r.cmd.Wait(); close(r.done) }()
	return r
}

// docOutput is what the program prints.
type docOutput struct {
	Paid     map[string]any `json:"paid"`
	Deployed docDeployOut   `json:"deployed"`
}

// wait waits for r to end well, and returns what it printed.
func (p *snippet) wait(t *testing.T, r *run) docOutput {
	t.Helper()
	waitFor(t, r.done, "the program's end")
	if r.err != nil {
		t.Fatalf("the program of docs/mcp.md: %v\nstdout:\n%s\nstderr:\n%s", r.err, &r.stdout, &r.stderr)
	}
	var got docOutput
	if err := json.Unmarshal(bytes.TrimSpace(r.stdout.Bytes()), &got); err != nil {
		t.Fatalf("the program printed %q: %v", &r.stdout, err)
	}
	if _, err := os.Stat(p.keys); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the keys file is left after every call was answered: %v", err)
	}
	return got
}

// wantOnce checks that each tool acted once and the program saw it.
func (d *docTools) wantOnce(t *testing.T, got docOutput) {
	t.Helper()
	if d.payments.Load() != 1 || d.deploys.Load() != 1 || got.Paid["payment"] != float64(1) || got.Paid["to"] != "bob" ||
		got.Deployed != (docDeployOut{Status: "deployed", Plan: "plan: 3 steps", Deploy: 1}) {
		t.Fatalf("%d payments, %d deploys; the program saw %+v", d.payments.Load(), d.deploys.Load(), got)
	}
}

func TestDocsSnippetRunsAsWritten(t *testing.T) {
	p := docProgram(t)
	d := newDocTools(t)
	// A proxy's 502 after pay ran; deploy's round two cut off after it ran.
	var lostPay atomic.Bool
	lostRound2 := &loseOnce{match: func(method, tool string, p map[string]json.RawMessage) bool {
		return method == "tools/call" && tool == "deploy" && len(p["requestState"]) > 2
	}}
	next := lossy(d.handler(&mcp.StreamableHTTPOptions{Stateless: true, JSONResponse: true}), lostRound2)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && d.payments.Load() == 0 {
			rec := httptest.NewRecorder()
			next.ServeHTTP(rec, r)
			if d.payments.Load() == 1 && lostPay.CompareAndSwap(false, true) {
				http.Error(w, "<html>502 Bad Gateway</html>", http.StatusBadGateway) // the upstream ran pay; its answer is lost
				return
			}
			for k, v := range rec.Header() {
				w.Header()[k] = v
			}
			w.WriteHeader(rec.Code)
			w.Write(rec.Body.Bytes())
			return
		}
		next.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)

	got := p.wait(t, p.start(t, srv.URL))
	if !lostPay.Load() || !lostRound2.done.Load() {
		t.Fatalf("a first answer was not lost: pay %v, round two %v", lostPay.Load(), lostRound2.done.Load())
	}
	d.wantOnce(t, got)
}

func TestDocsSnippetKeepsItsKeyAcrossItsExit(t *testing.T) {
	p := docProgram(t)
	d := newDocTools(t)
	d.gate()
	srv := httptest.NewServer(d.handler(&mcp.StreamableHTTPOptions{Stateless: true, JSONResponse: true}))
	t.Cleanup(srv.Close)
	t.Cleanup(d.open)

	// The first run is killed while pay runs: the key it saved before
	// sending is the one pay got.
	r := p.start(t, srv.URL)
	waitFor(t, d.payStarted, "the first payment")
	saved, err := os.ReadFile(p.keys)
	if err != nil {
		t.Fatal(err)
	}
	var keys map[string]string
	d.mu.Lock()
	got := d.payKeys[0]
	d.mu.Unlock()
	if err := json.Unmarshal(saved, &keys); err != nil || keys["pay"] == "" || keys["pay"] != got {
		t.Fatalf("saved keys %s (%v); pay got %q", saved, err, got)
	}
	r.cmd.Process.Kill()
	waitFor(t, r.done, "the first run's end")
	d.open()
	waitFor(t, d.payRecorded, "the first payment's record")

	// The next run pays under the same key: the first run's payment.
	d.wantOnce(t, p.wait(t, p.start(t, srv.URL)))
}

func TestDocsSnippetRidesOutARestart(t *testing.T) {
	p := docProgram(t)
	d := newDocTools(t)
	d.gate()
	t.Cleanup(d.open)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	stateless := &mcp.StreamableHTTPOptions{Stateless: true} // the mode that negotiates 2026-07-28, which deploy needs
	first := &http.Server{Handler: d.handler(stateless)}
	go first.Serve(ln)
	t.Cleanup(func() { first.Close() })

	r := p.start(t, "http://"+addr)
	// The server stops while pay runs; pay completes and is recorded.
	waitFor(t, d.payStarted, "the first payment")
	first.Close()
	stopped := time.Now()
	d.open()
	waitFor(t, d.payRecorded, "the first payment's record")
	// Down past where the page's program once gave up (10 attempts, about
	// 11 s): a port that takes connections and drops them, until an
	// attempt comes 13 s after the stop.
	down, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	late := make(chan struct{})
	go func() {
		for {
			c, err := down.Accept()
			if err != nil {
				return
			}
			c.Close()
			if time.Since(stopped) > 13*time.Second {
				close(late)
				return
			}
		}
	}()
	select {
	case <-late:
	case <-r.done:
		t.Fatalf("the program gave up while the server was down: %v\nstderr:\n%s", r.err, &r.stderr)
	case <-time.After(failsafe):
		t.Fatal("no attempt 13 s after the server stopped")
	}
	down.Close()
	// A new server on the same port.
	ln, err = net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	second := &http.Server{Handler: d.handler(stateless)}
	go second.Serve(ln)
	t.Cleanup(func() { second.Close() })

	d.wantOnce(t, p.wait(t, r))
}

func waitFor[T any](t testing.TB, ch <-chan T, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(failsafe):
		t.Fatalf("%s did not happen within %v", what, failsafe)
	}
}
