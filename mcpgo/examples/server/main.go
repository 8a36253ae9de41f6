// Command server is a runnable example of ctoken with mark3labs/mcp-go.
//
// It serves two tools over mcp-go's streamable HTTP transport on 127.0.0.1,
// behind bearer-token authentication, and drives them with mcp-go clients:
//
//   - search pages through a catalog; its nextCursor is a ctoken cursor bound
//     to the tool, the authenticated caller and the query. A cursor replayed
//     by another user, with another query, or edited is refused with a tool
//     error carrying its ctokenCode.
//   - deploy asks the user to confirm with a multi round-trip request
//     (SEP-2322). Its handler keeps its state in plaintext; one server
//     option, ctokenmcpgo.SecureRequestState, seals every requestState on
//     the way out (AES-256-GCM, bound to the caller, the tool and the
//     arguments) and opens it on the way back. An edited state, or one
//     presented by another user or for other arguments, is refused with a
//     JSON-RPC error (-32603, its message carrying the ctokenCode).
//   - a client on protocol 2025-11-25 that cannot elicit is told so.
//
// Run it with "go run ./examples/server" from the mcpgo module. Keys come
// from CTOKEN_KEYS (see "ctoken keygen"); without it a random key is used.
// With -listen ADDR it serves until interrupted instead of running the demo
// (the bearer tokens "alice-token" and "bob-token" are accepted).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"time"

	"github.com/ctoken/ctoken"
	ctokenmcpgo "github.com/ctoken/ctoken/mcpgo"
	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
)

// users is a toy bearer-token table. A real server verifies OAuth access
// tokens or JWTs here; what matters to ctoken is the caller's stable ID.
var users = map[string]string{"alice-token": "alice", "bob-token": "bob", "dave-token": "dave"}

// handler returns the MCP endpoint: mcp-go's streamable HTTP server,
// stateless (no session affinity: every piece of state a client carries
// between calls is a ctoken token), behind bearer authentication, which
// names the caller with ctokenmcpgo.WithCaller.
func handler(a *app) http.Handler {
	mcpHandler := server.NewStreamableHTTPServer(a.newServer(),
		server.WithStateLess(true),
		server.WithHTTPContextFunc(func(ctx context.Context, r *http.Request) context.Context {
			if id, err := ctokenmcpgo.ContextCaller(r.Context()); err == nil {
				return ctokenmcpgo.WithCaller(ctx, id)
			}
			return ctx
		}))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		token, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		user, ok := users[token]
		if !ok {
			w.Header().Set("WWW-Authenticate", "Bearer")
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		mcpHandler.ServeHTTP(w, r.WithContext(ctokenmcpgo.WithCaller(r.Context(), user)))
	})
}

func main() {
	listen := flag.String("listen", "", "serve on this address (e.g. 127.0.0.1:8080) instead of running the demo")
	flag.Parse()
	keys, ephemeral, err := ctoken.KeyringFromEnvOrRandom("CTOKEN_KEYS")
	if err != nil {
		log.Fatal(err)
	}
	if ephemeral {
		log.Print("CTOKEN_KEYS is not set: using a random key; tokens die with this process")
	}
	// A fixed session lets every instance of a fleet accept each other's
	// cursors; rotate it to revoke all outstanding cursors at once.
	session := []byte("example-fleet-1")
	if *listen != "" {
		a, err := newApp(keys, session, slog.Default())
		if err != nil {
			log.Fatal(err)
		}
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
		defer stop()
		srv := &http.Server{Addr: *listen, Handler: handler(a), ReadHeaderTimeout: 10 * time.Second}
		go func() { <-ctx.Done(); srv.Close() }()
		log.Printf("serving MCP on http://%s/mcp", *listen)
		if err := srv.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
			log.Fatal(err)
		}
		return
	}
	out := &syncWriter{w: os.Stdout}
	a, err := newApp(keys, session, demoLogger(out))
	if err != nil {
		log.Fatal(err)
	}
	if err := demo(context.Background(), a, out); err != nil {
		log.Fatal(err)
	}
}

// syncWriter serialises the writes of the demo's clients and of the
// server's logger, which run on different goroutines.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// demoLogger prints the server's rejection records in the demo's output:
// "  [server log] message key=value ...", without time or level.
func demoLogger(w io.Writer) *slog.Logger { return slog.New(&lineHandler{w: w}) }

type lineHandler struct{ w io.Writer }

func (h *lineHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *lineHandler) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *lineHandler) WithGroup(string) slog.Handler            { return h }

func (h *lineHandler) Handle(_ context.Context, r slog.Record) error {
	line := "  [server log] " + r.Message
	r.Attrs(func(a slog.Attr) bool {
		line += fmt.Sprintf(" %s=%q", a.Key, a.Value.String())
		return true
	})
	_, err := fmt.Fprintln(h.w, line)
	return err
}

// editor is a client transport that lets the demo act as a client that
// edits or swaps the requestState it echoes, and shows the states it got.
// mcp-go's client echoes states itself, so this is the only place to do it.
type editor struct {
	transport.Interface
	mu   sync.Mutex
	edit func(string) string
	got  []string
}

func (e *editor) SetProtocolVersion(v string) {
	e.Interface.(transport.HTTPConnection).SetProtocolVersion(v)
}

func (e *editor) SendRequest(ctx context.Context, req transport.JSONRPCRequest) (*transport.JSONRPCResponse, error) {
	e.mu.Lock()
	edit := e.edit
	e.mu.Unlock()
	if edit != nil && req.Method == "tools/call" {
		b, err := json.Marshal(req.Params)
		if err != nil {
			return nil, err
		}
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			return nil, err
		}
		if st, _ := m["requestState"].(string); st != "" {
			m["requestState"] = edit(st)
			req.Params = m
		}
	}
	resp, err := e.Interface.SendRequest(ctx, req)
	if resp != nil && len(resp.Result) > 0 {
		var r struct {
			RequestState string `json:"requestState"`
		}
		if json.Unmarshal(resp.Result, &r) == nil && r.RequestState != "" {
			e.mu.Lock()
			e.got = append(e.got, r.RequestState)
			e.mu.Unlock()
		}
	}
	return resp, err
}

func (e *editor) setEdit(f func(string) string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.edit = f
}

func (e *editor) states() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.got...)
}

// answer is an elicitation handler that answers every confirmation with yes
// (or no), and prints the question.
type answer struct {
	who string
	yes bool
	w   io.Writer
}

func (a answer) Elicit(_ context.Context, req mcp.ElicitationRequest) (*mcp.ElicitationResult, error) {
	word := map[bool]string{true: "yes", false: "no"}[a.yes]
	fmt.Fprintf(a.w, "  (%s is asked: %s -> %s)\n", a.who, req.Params.Message, word)
	return &mcp.ElicitationResult{ElicitationResponse: mcp.ElicitationResponse{
		Action: mcp.ElicitationResponseActionAccept, Content: map[string]any{"confirm": a.yes},
	}}, nil
}

// user is a connected demo client.
type user struct {
	name string
	c    *client.Client
	tr   *editor
}

// connect opens a client to endpoint with the bearer token of name.
func connect(ctx context.Context, endpoint, name string, opts ...client.ClientOption) (*user, error) {
	tr, err := transport.NewStreamableHTTP(endpoint, transport.WithHTTPHeaders(map[string]string{"Authorization": "Bearer " + name + "-token"}))
	if err != nil {
		return nil, err
	}
	ed := &editor{Interface: tr}
	c := client.NewClient(ed, opts...)
	if err := c.Start(ctx); err != nil {
		return nil, err
	}
	init := mcp.InitializeRequest{}
	init.Params.ClientInfo = mcp.Implementation{Name: "example-client", Version: "v0.1.0"}
	if _, err := c.Initialize(ctx, init); err != nil {
		c.Close()
		return nil, err
	}
	return &user{name: name, c: c, tr: ed}, nil
}

// describe renders a tool-call outcome in one line.
func describe(res *mcp.CallToolResult, err error) string {
	switch {
	case err != nil:
		return "error: " + err.Error()
	case res.IsError:
		var text string
		for _, c := range res.Content {
			if tc, ok := c.(mcp.TextContent); ok {
				text += tc.Text
			}
		}
		return fmt.Sprintf("tool error %q (ctokenCode %d)", text, ctokenmcpgo.TokenCode(res))
	}
	out := map[string]any{}
	if m, ok := res.StructuredContent.(map[string]any); ok {
		for k, v := range m {
			out[k] = v
		}
	}
	if c, ok := out["nextCursor"].(string); ok {
		out["nextCursor"] = fmt.Sprintf("(ctoken cursor, %d bytes)", len(c))
	}
	b, _ := json.Marshal(out)
	return string(b)
}

// demo runs the whole flow against a loopback server and prints it to w.
func demo(ctx context.Context, a *app, w io.Writer) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: handler(a), ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	defer srv.Close()
	endpoint := "http://" + ln.Addr().String() + "/mcp"

	alice, err := connect(ctx, endpoint, "alice", client.WithElicitationHandler(answer{"alice", true, w}))
	if err != nil {
		return err
	}
	defer alice.c.Close()
	bob, err := connect(ctx, endpoint, "bob", client.WithElicitationHandler(answer{"bob", false, w}))
	if err != nil {
		return err
	}
	defer bob.c.Close()
	// Dave's client speaks 2025-11-25 and cannot elicit.
	dave, err := connect(ctx, endpoint, "dave", client.WithProtocolVersion(mcp.ProtocolVersion20251125))
	if err != nil {
		return err
	}
	defer dave.c.Close()

	call := func(u *user, what, tool string, args map[string]any) (*mcp.CallToolResult, error) {
		req := mcp.CallToolRequest{}
		req.Params.Name, req.Params.Arguments = tool, args
		res, err := u.c.CallTool(ctx, req)
		fmt.Fprintf(w, "%-5s %-7s %s\n      -> %s\n", u.name, tool, what, describe(res, err))
		return res, err
	}
	search := func(query, cursor string) map[string]any {
		return map[string]any{"query": query, "cursor": cursor}
	}

	fmt.Fprintln(w, "== paginated tool with ctoken cursors")
	res, err := call(alice, `query "s", first page (Page 0, no cursor)`, "search", search("s", ""))
	if err != nil {
		return err
	}
	out, _ := res.StructuredContent.(map[string]any)
	cursor, _ := out["nextCursor"].(string)
	if _, err := call(alice, `query "s", her cursor (Page 1)`, "search", search("s", cursor)); err != nil {
		return err
	}
	call(bob, `query "s", alice's cursor`, "search", search("s", cursor))
	call(alice, `query "hat", cursor of query "s"`, "search", search("hat", cursor))
	call(alice, `query "s", edited cursor`, "search", search("s", tamper(cursor)))

	fmt.Fprintln(w, "== multi round-trip tool; SecureRequestState seals its plaintext state")
	api := map[string]any{"service": "api", "version": "v2"}
	if _, err := call(alice, "api v2 (her client answers and retries)", "deploy", api); err != nil {
		return err
	}
	for _, st := range alice.tr.states() {
		fmt.Fprintf(w, "      (requestState on the wire: %s... of %d bytes)\n", st[:4], len(st))
	}
	web := map[string]any{"service": "web", "version": "v9"}
	call(bob, "web v9 (his client answers no)", "deploy", web)
	bobState := bob.tr.states()[0]
	alice.tr.setEdit(tamper)
	call(alice, "web v9, her client edits the state", "deploy", web)
	alice.tr.setEdit(func(string) string { return bobState })
	call(alice, "web v9 with bob's state", "deploy", web)
	bob.tr.setEdit(func(string) string { return bobState })
	call(bob, "db v9 with the state of web v9", "deploy", map[string]any{"service": "db", "version": "v9"})

	fmt.Fprintln(w, "== a 2025-11-25 client without elicitation")
	call(dave, "api v3", "deploy", map[string]any{"service": "api", "version": "v3"})
	return nil
}

// tamper flips one character in the middle of a token, as a client editing
// it would.
func tamper(tok string) string {
	i := len(tok) / 2
	c := byte('A')
	if tok[i] == 'A' {
		c = 'B'
	}
	return tok[:i] + string(c) + tok[i+1:]
}
