package drivertest

// Idempotent MCP tool calls (ctokenmcp.Idempotency) on the SQLite store,
// end to end: a pay tool served over streamable HTTP on 127.0.0.1,
// driven by go-sdk's own client through an HTTP transport that loses the
// first tools/call response after the server sent it. The tool runs in
// the transactional mode, writing through sqlitestore.TxFrom: the
// client's retry gets the first result, the payments table holds one
// row, and a tool that fails after its write keeps neither the write nor
// a record. (The plain mode: mcptokentest.RunContract, in TestStore.)

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/ctoken/ctoken"

	ctokenmcp "github.com/ctoken/ctoken/mcp"
	"github.com/ctoken/ctoken/mcptoken"
	"github.com/ctoken/ctoken/sqlitestore"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// idemKeys seal the recorded results of the tests' idempotent tools (the
// same in every process).
var idemKeys = func() *ctoken.Keyring {
	kr, err := ctoken.NewKeyring([]byte("0123456789abcdef0123456789abcdef"))
	if err != nil {
		panic(err)
	}
	return kr
}()

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

func mcpIdempotentToolOnSQLite(t *testing.T) {
	for _, d := range Drivers() {
		t.Run(d.Name, func(t *testing.T) {
			ctx := context.Background()
			db, _ := openMigrated(t, d)
			if _, err := db.ExecContext(ctx, `CREATE TABLE payments (amount INTEGER NOT NULL)`); err != nil {
				t.Fatal(err)
			}
			store := mustStore(t, db, sqlitestore.Options{})
			idem, err := ctokenmcp.NewIdempotency(ctokenmcp.IdempotencyOptions{
				IdempotencyConfig: mcptoken.IdempotencyConfig{Keys: idemKeys, Store: store, KeyArgument: "key", Transactional: true},
				Caller:            ctokenmcp.FixedCaller("alice"),
			})
			if err != nil {
				t.Fatal(err)
			}
			var runs atomic.Int32
			var fail atomic.Bool
			s := mcp.NewServer(&mcp.Implementation{Name: "payer", Version: "v0"}, nil)
			s.AddTool(&mcp.Tool{Name: "pay", InputSchema: json.RawMessage(`{"type":"object","properties":{"key":{"type":"string"},"amount":{"type":"integer"}},"required":["key","amount"]}`)},
				idem.Wrap(func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
					n := runs.Add(1)
					tx, err := sqlitestore.TxFrom(ctx)
					if err == nil {
						_, err = tx.ExecContext(ctx, `INSERT INTO payments (amount) VALUES (5)`)
					}
					if err != nil {
						return nil, err
					}
					if fail.Load() {
						return nil, errors.New("the tool failed after its write")
					}
					return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf("payment %d", n)}}}, nil
				}))
			srv := loopback(t, mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, &mcp.StreamableHTTPOptions{Stateless: true}), nil)
			cs, err := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "v0"}, nil).Connect(ctx,
				&mcp.StreamableClientTransport{Endpoint: srv.URL, HTTPClient: &http.Client{Transport: &losesAnswers{lose: map[int]bool{1: true}}}, MaxRetries: -1}, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer cs.Close()
			rows := func() int { return countRows(t, db, `SELECT count(*) FROM payments`) }
			call := &mcp.CallToolParams{Name: "pay", Arguments: map[string]any{"key": "pay-1", "amount": 5}}
			if _, err := cs.CallTool(ctx, call); err == nil {
				t.Fatal("the first response was not lost")
			}
			res, err := cs.CallTool(ctx, call)
			if err != nil {
				t.Fatal(err)
			}
			if tc, ok := res.Content[0].(*mcp.TextContent); !ok || tc.Text != "payment 1" || runs.Load() != 1 || rows() != 1 {
				t.Fatalf("retry got %+v; %d runs, %d rows", res.Content, runs.Load(), rows())
			}
			fail.Store(true)
			again := &mcp.CallToolParams{Name: "pay", Arguments: map[string]any{"key": "pay-2", "amount": 5}}
			if _, err := cs.CallTool(ctx, again); err == nil {
				t.Fatal("the tool's failure was not sent")
			}
			if rows() != 1 {
				t.Fatal("the failed tool's write was kept")
			}
			fail.Store(false)
			if _, err := cs.CallTool(ctx, again); err != nil || rows() != 2 {
				t.Fatalf("the released key: %v, %d rows", err, rows())
			}
		})
	}
}
