//go:build !ncruces && !mattn

package drivertest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"sync/atomic"

	"github.com/ctoken/ctoken"
	ctokenmcp "github.com/ctoken/ctoken/mcp"
	"github.com/ctoken/ctoken/mcptoken"
	"github.com/ctoken/ctoken/sqlitestore"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// An MCP server on one machine, its claims, records and the tools' own
// rows in one SQLite file: "pay" writes a payment, and "deploy" asks for
// a confirmation (a round of SEP-2322, its requestState sealed and single
// use) before it writes a deploy. Both tools are idempotent and
// transactional: a tool's row commits with the record of its result. The
// client calls each tool once as a logical call (ctokenmcp.CallTool, one
// key per call): the answer to the first attempt of each is lost after the
// tool ran — for deploy, the answer to round two, which go-sdk's client
// drives itself — and the retry gets the first result. One payment and
// one deploy are written, and the user is asked once.
func Example_mcpServer() {
	ctx := context.Background()
	db, store, done := exampleStore(`CREATE TABLE effects (kind TEXT NOT NULL, what TEXT NOT NULL)`)
	defer done()

	keys, err := ctoken.NewKeyring(ctoken.RandomKey()) // in production: from a keyfile (ctoken keygen)
	if err != nil {
		log.Fatal(err)
	}
	server := mcp.NewServer(&mcp.Implementation{Name: "ops", Version: "v1"}, nil)
	caller := ctokenmcp.FixedCaller("alice") // one local user; over HTTP: the bearer token's user (the default)

	// Sealed, single-use request states, kept in the same file.
	codec, err := ctoken.NewRequestStateCodec(ctoken.RequestStateSecurity{
		Keys: keys, Mode: ctoken.Encrypted, Binding: ctoken.BindSubjectAndTool, Replay: store,
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := ctokenmcp.SecureRequestState(server, codec, &ctokenmcp.StateOptions{Caller: caller, AnswerRetries: true}); err != nil {
		log.Fatal(err)
	}
	// Idempotent, transactional tool calls; the key comes in _meta, where
	// ctokenmcp.CallTool puts it.
	idem, err := ctokenmcp.NewIdempotency(ctokenmcp.IdempotencyOptions{
		IdempotencyConfig: mcptoken.IdempotencyConfig{Keys: keys, Store: store, KeyFromMeta: true, Transactional: true},
		Caller:            caller,
	})
	if err != nil {
		log.Fatal(err)
	}
	write := func(ctx context.Context, kind, what string) error {
		tx, err := sqlitestore.TxFrom(ctx) // the call's transaction
		if err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO effects (kind, what) VALUES (?, ?)`, kind, what)
		return err
	}
	text := func(s string) *mcp.CallToolResult {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: s}}}
	}
	var asked atomic.Int32
	server.AddTool(&mcp.Tool{Name: "pay", InputSchema: json.RawMessage(`{"type":"object","properties":{"to":{"type":"string"}},"required":["to"]}`)},
		idem.Wrap(func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			var in struct{ To string }
			json.Unmarshal(req.Params.Arguments, &in)
			if err := write(ctx, "payment", in.To); err != nil {
				return nil, err
			}
			return text("paid " + in.To), nil
		}))
	server.AddTool(&mcp.Tool{Name: "deploy", InputSchema: json.RawMessage(`{"type":"object","properties":{"service":{"type":"string"}},"required":["service"]}`)},
		idem.Wrap(func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			var in struct{ Service string }
			json.Unmarshal(req.Params.Arguments, &in)
			if req.Params.RequestState == "" { // round one: ask, and keep the plan in the state
				asked.Add(1)
				return &mcp.CallToolResult{
					InputRequests: mcp.InputRequestMap{"ok": &mcp.ElicitParams{
						Message:         "Deploy " + in.Service + "?",
						RequestedSchema: map[string]any{"type": "object", "properties": map[string]any{"ok": map[string]any{"type": "boolean"}}},
					}},
					RequestState: "plan: " + in.Service,
				}, nil
			}
			// Round two: the state was opened and checked before this ran.
			if err := write(ctx, "deploy", req.Params.RequestState); err != nil {
				return nil, err
			}
			return text("deployed (" + req.Params.RequestState + ")"), nil
		}))
	srv := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, &mcp.StreamableHTTPOptions{Stateless: true}))
	defer srv.Close()

	// The client: go-sdk's, answering the confirmation itself, over a
	// network that loses the answers to tools/call POSTs 1 (pay) and 4
	// (deploy's round two; 3 was its round one).
	client := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "v1"}, &mcp.ClientOptions{
		ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"ok": true}}, nil
		},
	})
	network := &losesAnswers{lose: map[int]bool{1: true, 4: true}}
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{
		Endpoint: srv.URL, HTTPClient: &http.Client{Transport: network}, MaxRetries: -1,
	}, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer cs.Close()
	for _, params := range []*mcp.CallToolParams{
		{Name: "pay", Arguments: map[string]any{"to": "bob"}},
		{Name: "deploy", Arguments: map[string]any{"service": "api"}},
	} {
		res, err := ctokenmcp.CallTool(ctx, cs, params, ctokenmcp.CallOptions{}) // one key per logical call
		if errors.Is(err, ctokenmcp.ErrOutcomeUnknown) {
			key, _ := ctokenmcp.RetryKey(err) // keep it, and call again with CallOptions{Key: key}
			_ = key
		}
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(params.Name+":", res.Content[0].(*mcp.TextContent).Text)
	}
	var payments, deploys int
	db.QueryRowContext(ctx, `SELECT count(*) FILTER (WHERE kind = 'payment'), count(*) FILTER (WHERE kind = 'deploy') FROM effects`).Scan(&payments, &deploys)
	fmt.Printf("%d tools/call sent, %d answers lost\n", network.calls.Load(), network.lost.Load())
	fmt.Printf("%d payment, %d deploy; asked %d time\n", payments, deploys, asked.Load())
	// Output:
	// pay: paid bob
	// deploy: deployed (plan: api)
	// 5 tools/call sent, 2 answers lost
	// 1 payment, 1 deploy; asked 1 time
}

// losesAnswers is an http.RoundTripper that lets the tools/call POSTs
// numbered in lose (from 1) reach the server, reads the whole answer, and
// reports a broken connection instead, as a network that fails after the
// server answered.
type losesAnswers struct {
	calls, lost atomic.Int32
	lose        map[int]bool
}

func (l *losesAnswers) RoundTrip(r *http.Request) (*http.Response, error) {
	var body []byte
	if r.Body != nil {
		body, _ = io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
	}
	resp, err := http.DefaultTransport.RoundTrip(r)
	if err != nil || !bytes.Contains(body, []byte(`"tools/call"`)) || !l.lose[int(l.calls.Add(1))] {
		return resp, err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	l.lost.Add(1)
	return nil, errors.New("connection reset after the server answered")
}
