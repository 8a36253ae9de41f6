// Command server is a runnable example of ctoken with the Go MCP SDK.
//
// It serves two tools over streamable HTTP on 127.0.0.1, behind bearer-token
// authentication, and drives them with in-process clients:
//
//   - search pages through a catalog; its nextCursor is a ctoken cursor bound
//     to the tool, the authenticated caller and the query. A cursor replayed
//     by another user, with another query, or edited is answered with
//     JSON-RPC error -32602.
//   - deploy asks the user to confirm with a multi round-trip request
//     (SEP-2322). The handler keeps its plan in requestState as plain JSON;
//     one line, ctokenmcp.SecureRequestState(server, codec, opts), seals it
//     in dispatch (AES-256-GCM, bound to the caller, the tool and the
//     arguments) before the client sees it, and opens it when the client
//     echoes it on the retry. An edited state, one presented by another
//     user, or one replayed with other arguments is answered with -32602.
//     A client on protocol 2025-11-25 over this stateless endpoint cannot
//     be asked; it gets JSON-RPC error -32021 saying so.
//
// Run it with "go run ./examples/server" from the mcp module. Keys come
// from CTOKEN_KEYS (see "ctoken keygen"); without it a random key is used.
// With -listen ADDR it serves until interrupted instead of running the
// demo (the bearer tokens "alice-token" and "bob-token" are accepted).
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
	"sync"
	"time"

	"github.com/ctoken/ctoken"
	ctokenmcp "github.com/ctoken/ctoken/mcp"
	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// users is a toy bearer-token table. A real server verifies OAuth access
// tokens or JWTs here; what matters to ctoken is TokenInfo.UserID.
var users = map[string]string{"alice-token": "alice", "bob-token": "bob"}

func verifyToken(_ context.Context, token string, _ *http.Request) (*auth.TokenInfo, error) {
	user, ok := users[token]
	if !ok {
		return nil, auth.ErrInvalidToken
	}
	return &auth.TokenInfo{UserID: user, Expiration: time.Now().Add(time.Hour)}, nil
}

// handler returns the MCP endpoint: the SDK's streamable HTTP handler
// behind bearer authentication, which puts the caller in TokenInfo. It is
// stateless, the mode that speaks protocol 2026-07-28 (where tools ask for
// input with multi round-trip requests) and that needs no session affinity:
// every piece of state a client carries between calls is a ctoken token.
func handler(a *app) (http.Handler, error) {
	srv, err := a.newServer()
	if err != nil {
		return nil, err
	}
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv },
		&mcp.StreamableHTTPOptions{Stateless: true})
	return auth.RequireBearerToken(verifyToken, nil)(h), nil
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
		a, err := newApp(keys, session, ctokenmcp.TokenUserID, slog.Default())
		if err != nil {
			log.Fatal(err)
		}
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
		defer stop()
		h, err := handler(a)
		if err != nil {
			log.Fatal(err)
		}
		srv := &http.Server{Addr: *listen, Handler: h, ReadHeaderTimeout: 10 * time.Second}
		go func() { <-ctx.Done(); srv.Close() }()
		log.Printf("serving MCP on http://%s", *listen)
		if err := srv.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
			log.Fatal(err)
		}
		return
	}
	out := &syncWriter{w: os.Stdout}
	a, err := newApp(keys, session, ctokenmcp.TokenUserID, demoLogger(out))
	if err != nil {
		log.Fatal(err)
	}
	if err := demo(context.Background(), a, out); err != nil {
		log.Fatal(err)
	}
}

// syncWriter serialises the writes of the demo's client and of the server's
// logger, which run on different goroutines.
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

// bearer adds an Authorization header to every request.
type bearer struct {
	token string
	next  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(r)
}

// connect opens a client session to endpoint as the user of token, on
// protocol version (empty: the latest both sides speak).
func connect(ctx context.Context, endpoint, token, version string, opts *mcp.ClientOptions) (*mcp.ClientSession, error) {
	c := mcp.NewClient(&mcp.Implementation{Name: "example-client", Version: "v0.1.0"}, opts)
	return c.Connect(ctx, &mcp.StreamableClientTransport{
		Endpoint:   endpoint,
		HTTPClient: &http.Client{Transport: bearer{token: token, next: http.DefaultTransport}},
		MaxRetries: -1,
	}, &mcp.ClientSessionOptions{ProtocolVersion: version})
}

// describe renders a tool-call outcome in one line.
func describe(res *mcp.CallToolResult, err error) string {
	var we *jsonrpc.Error
	switch {
	case errors.As(err, &we):
		return fmt.Sprintf("JSON-RPC error %d %q (ctokenCode %d)", we.Code, we.Message, ctokenmcp.TokenErrorCode(err))
	case err != nil:
		return "error: " + err.Error()
	case res.NeedsInput():
		return fmt.Sprintf("input required (%d request(s), requestState of %d bytes)", len(res.InputRequests), len(res.RequestState))
	}
	var out map[string]any
	b, _ := json.Marshal(res.StructuredContent)
	json.Unmarshal(b, &out)
	if c, ok := out["nextCursor"].(string); ok {
		out["nextCursor"] = fmt.Sprintf("(ctoken cursor, %d bytes)", len(c))
	}
	b, _ = json.Marshal(out)
	return string(b)
}

// demo runs the whole flow against a loopback server and prints it to w.
func demo(ctx context.Context, a *app, w io.Writer) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	h, err := handler(a)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	defer srv.Close()
	endpoint := "http://" + ln.Addr().String()

	// Alice accepts confirmations; her client drives the MRTR retry itself.
	alice, err := connect(ctx, endpoint, "alice-token", "", &mcp.ClientOptions{
		ElicitationHandler: func(_ context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			fmt.Fprintf(w, "  (alice is asked: %s -> yes)\n", req.Params.Message)
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"confirm": true}}, nil
		},
	})
	if err != nil {
		return err
	}
	defer alice.Close()
	// Bob's client does not retry on its own, to show the raw round trip.
	bob, err := connect(ctx, endpoint, "bob-token", "", &mcp.ClientOptions{
		MultiRoundTrip: &mcp.MultiRoundTripOptions{Disabled: true},
	})
	if err != nil {
		return err
	}
	defer bob.Close()

	call := func(who, what string, cs *mcp.ClientSession, params *mcp.CallToolParams) (*mcp.CallToolResult, error) {
		res, err := cs.CallTool(ctx, params)
		fmt.Fprintf(w, "%-5s %-7s %s\n      -> %s\n", who, params.Name, what, describe(res, err))
		return res, err
	}
	next := func(res *mcp.CallToolResult) string {
		var out SearchOut
		b, _ := json.Marshal(res.StructuredContent)
		json.Unmarshal(b, &out)
		return out.NextCursor
	}
	s := SearchIn{Query: "s"}
	withCursor := func(in SearchIn, c string) *mcp.CallToolParams {
		in.Cursor = c
		return &mcp.CallToolParams{Name: "search", Arguments: in}
	}

	fmt.Fprintln(w, "== paginated tool with ctoken cursors")
	res, err := call("alice", `query "s", first page (Page 0, no cursor)`, alice, withCursor(s, ""))
	if err != nil {
		return err
	}
	cursor := next(res)
	if _, err = call("alice", `query "s", her cursor (Page 1)`, alice, withCursor(s, cursor)); err != nil {
		return err
	}
	call("bob", `query "s", alice's cursor`, bob, withCursor(s, cursor))
	call("alice", `query "hat", cursor of query "s"`, alice, withCursor(SearchIn{Query: "hat"}, cursor))
	call("alice", `query "s", edited cursor`, alice, withCursor(s, tamper(cursor)))

	fmt.Fprintln(w, "== multi round-trip tool with a sealed requestState")
	api := DeployIn{Service: "api", Version: "v2"}
	if _, err := call("alice", "api v2 (her client answers and retries)", alice, &mcp.CallToolParams{Name: "deploy", Arguments: api}); err != nil {
		return err
	}
	web := DeployIn{Service: "web", Version: "v9"}
	first, err := call("bob", "web v9, round one", bob, &mcp.CallToolParams{Name: "deploy", Arguments: web})
	if err != nil {
		return err
	}
	yes := mcp.InputResponseMap{"confirm": &mcp.ElicitResult{Action: "accept", Content: map[string]any{"confirm": true}}}
	retry := func(state string, in DeployIn) *mcp.CallToolParams {
		return &mcp.CallToolParams{Name: "deploy", Arguments: in, InputResponses: yes, RequestState: state}
	}
	call("bob", "web v9, edited requestState", bob, retry(tamper(first.RequestState), web))
	call("bob", "db v9 with the state of web v9", bob, retry(first.RequestState, DeployIn{Service: "db", Version: "v9"}))
	call("alice", "web v9 with bob's state", alice, retry(first.RequestState, web))
	if _, err = call("bob", "web v9, round two", bob, retry(first.RequestState, web)); err != nil {
		return err
	}

	fmt.Fprintln(w, "== a client on protocol 2025-11-25 cannot be asked over stateless HTTP")
	old, err := connect(ctx, endpoint, "alice-token", "2025-11-25", &mcp.ClientOptions{
		ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			return nil, errors.New("never asked: stateless HTTP carries no server-to-client request")
		},
	})
	if err != nil {
		return err
	}
	defer old.Close()
	call("alice", "api v3 from a 2025-11-25 client", old, &mcp.CallToolParams{Name: "deploy", Arguments: DeployIn{Service: "api", Version: "v3"}})
	_, err = call("alice", `query "hat" from that client (no input needed)`, old, withCursor(SearchIn{Query: "hat"}, ""))
	return err
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
