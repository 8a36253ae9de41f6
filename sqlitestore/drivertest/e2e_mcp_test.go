package drivertest

// An MCP flow end to end, driven by go-sdk's own client: a two-round
// deploy tool secured by ctokenmcp.SecureRequestState with a single-use
// request state recorded in the file, its server stopped during round two
// and another started on the same file and keys.

import (
	"context"
	"database/sql"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/ctoken/ctoken"
	ctokenmcp "github.com/ctoken/ctoken/mcp"
	"github.com/ctoken/ctoken/sqlitestore"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

type deployIn struct {
	Service string `json:"service"`
}

type deployOut struct {
	Deployed string `json:"deployed"`
}

// mcpServer is one run of the tool server.
type mcpServer struct {
	srv   *httptest.Server
	store *sqlitestore.Store
	db    *sql.DB
	// gate, when set, holds round two before its deploy until it is
	// closed; entered is closed as round two enters it.
	gate, entered chan struct{}
}

// stop stops the server as a deploy does: the listener, the store, the
// pool.
func (m *mcpServer) stop() {
	m.srv.Close()
	m.store.Close()
	m.db.Close()
}

// startMCP starts the tool server on the database at path with keys:
// single-use states recorded in a sqlitestore on the file, deploys
// written to the file's deploys table; StateOptions.AnswerRetries.
func startMCP(t *testing.T, d Driver, path string, keys *ctoken.Keyring) *mcpServer {
	t.Helper()
	ctx := context.Background()
	m := &mcpServer{db: d.Open(t, path)}
	var err error
	if m.store, err = sqlitestore.New(ctx, m.db, sqlitestore.Options{}); err != nil {
		t.Fatalf("New after the restart: %v", err)
	}
	codec, err := ctoken.NewRequestStateCodec(ctoken.RequestStateSecurity{
		Keys: keys, Mode: ctoken.Encrypted, Binding: ctoken.BindSubjectAndTool, Replay: m.store,
	})
	must(t, err)
	s := mcp.NewServer(&mcp.Implementation{Name: "deployer", Version: "v0"}, nil)
	must(t, ctokenmcp.SecureRequestState(s, codec, &ctokenmcp.StateOptions{Caller: ctokenmcp.FixedCaller("alice"), AnswerRetries: true}))
	mcp.AddTool(s, &mcp.Tool{Name: "deploy"}, func(ctx context.Context, req *mcp.CallToolRequest, in deployIn) (*mcp.CallToolResult, deployOut, error) {
		if req.Params.RequestState == "" { // round one: ask, and remember the plan
			return &mcp.CallToolResult{
				InputRequests: mcp.InputRequestMap{"ok": &mcp.ElicitParams{
					Message:         "Deploy " + in.Service + "?",
					RequestedSchema: map[string]any{"type": "object", "properties": map[string]any{"ok": map[string]any{"type": "boolean"}}},
				}},
				RequestState: "plan: " + in.Service + " in 3 steps",
			}, deployOut{}, nil
		}
		if r, _ := req.Params.InputResponses["ok"].(*mcp.ElicitResult); r == nil || r.Content["ok"] != true {
			return nil, deployOut{Deployed: "nothing"}, nil
		}
		if m.gate != nil {
			close(m.entered)
			<-m.gate
		}
		if _, err := m.db.ExecContext(ctx, `INSERT INTO deploys (service, plan) VALUES (?, ?)`, in.Service, req.Params.RequestState); err != nil {
			return nil, deployOut{}, err
		}
		return nil, deployOut{Deployed: in.Service}, nil
	})
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, &mcp.StreamableHTTPOptions{Stateless: true, JSONResponse: true})
	m.srv = loopback(t, h)
	t.Cleanup(m.stop)
	return m
}

// connectMCP joins go-sdk's client to the server, leaving the rounds of
// a multi round-trip call to the test.
func connectMCP(t *testing.T, m *mcpServer) *mcp.ClientSession {
	t.Helper()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "v0"}, &mcp.ClientOptions{
		MultiRoundTrip: &mcp.MultiRoundTripOptions{Disabled: true},
	}).Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: m.srv.URL, MaxRetries: -1}, nil)
	must(t, err)
	t.Cleanup(func() { cs.Close() })
	return cs
}

// deployFile makes a migrated database file with the deploys table and
// a keyring for the tool server's states.
func deployFile(t *testing.T, d Driver) (string, *ctoken.Keyring) {
	t.Helper()
	db, path := openMigrated(t, d)
	mustExec(t, context.Background(), db, `CREATE TABLE deploys (service TEXT NOT NULL, plan TEXT NOT NULL)`)
	db.Close()
	keys, err := ctoken.NewKeyring(ctoken.RandomKey())
	must(t, err)
	return path, keys
}

// roundOne runs round one of the deploy tool of service api and returns
// round two's call: its state, the confirmation accepted.
func roundOne(t *testing.T, cs *mcp.ClientSession) *mcp.CallToolParams {
	t.Helper()
	first, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "deploy", Arguments: deployIn{Service: "api"}})
	if err != nil || !first.NeedsInput() || first.RequestState == "" {
		t.Fatalf("round one: %v, %+v; want an input-required result with a state", err, first)
	}
	return &mcp.CallToolParams{
		Name: "deploy", Arguments: deployIn{Service: "api"}, RequestState: first.RequestState,
		InputResponses: mcp.InputResponseMap{"ok": &mcp.ElicitResult{Action: "accept", Content: map[string]any{"ok": true}}},
	}
}

// TestMCP pins an MCP server on the SQLite store end to end, driven by
// go-sdk's client: the deploy tool's request state when its server stops
// during round two. (The retry of a lost round, answered from the store:
// mcp/drivertest's TestAnswersTheRetryOfALostRound, its sqlite case;
// idempotent tools on every store, this one's transactional mode
// included: mcp/drivertest.)
func TestMCP(t *testing.T) {
	subtests(t, []subtest{
		{"a round whose server stopped", mcpRoundWhoseServerStopped},
	})
}

// mcpRoundWhoseServerStopped: round two of the deploy tool is running when
// its server stops (its store and pool closed under it: it can neither
// renew the round's hold nor record it), and a new server starts on the
// same file with the same keys. The client's retry of round two is busy
// (1027) until the round's hold ends, then told that the round was
// interrupted (1029: whether it acted is unknown), again on the next
// retry, and nothing is deployed: the round never runs again.
func mcpRoundWhoseServerStopped(t *testing.T) {
	eachDriver(t, func(t *testing.T, d Driver) {
		ctx := context.Background()
		path, keys := deployFile(t, d)
		before := startMCP(t, d, path, keys)
		cs := connectMCP(t, before)
		use := roundOne(t, cs)
		before.gate, before.entered = make(chan struct{}), make(chan struct{})
		go cs.CallTool(ctx, use) // its answer never comes: the server stops
		within(t, before.entered, 30*time.Second, "round two did not start within 30 s")
		before.store.Close() // the server stops: no renewal, no record, no deploy
		before.db.Close()
		defer close(before.gate)

		after := startMCP(t, d, path, keys)
		retry := connectMCP(t, after)
		var busy int
		var err error
		deadline := time.Now().Add(60 * time.Second) // a failsafe: the hold ends within 15 s
		for {
			_, err = retry.CallTool(ctx, use)
			if ctokenmcp.TokenErrorCode(err) != ctokenmcp.StateBusy || time.Now().After(deadline) {
				break
			}
			busy++
			wait, _ := ctokenmcp.RetryAfter(err)
			time.Sleep(wait)
		}
		var we *jsonrpc.Error
		if !errors.As(err, &we) || we.Code != jsonrpc.CodeInvalidParams || ctokenmcp.TokenErrorCode(err) != ctokenmcp.RoundInterrupted {
			t.Fatalf("after %d busy answers: %v; want -32602 with ctoken code %d (round interrupted)", busy, err, ctokenmcp.RoundInterrupted)
		}
		if _, err := retry.CallTool(ctx, use); ctokenmcp.TokenErrorCode(err) != ctokenmcp.RoundInterrupted {
			t.Fatalf("the next retry: %v; want code %d again", err, ctokenmcp.RoundInterrupted)
		}
		if n := countRows(t, after.db, `SELECT count(*) FROM deploys`); n != 0 {
			t.Fatalf("%d deploys; want 0: the interrupted round never ran again", n)
		}
		t.Logf("%s: %d busy answers, then round interrupted (1029)", d.Name, busy)
	})
}
