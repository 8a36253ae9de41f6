package drivertest

// The MCP flow of issue 53, end to end: a tool server secured by
// ctokenmcp.SecureRequestState with a single-use request state
// (ctoken.RequestStateSecurity.Replay), served over streamable HTTP on
// 127.0.0.1 and driven by go-sdk's own client. The tool needs two rounds:
// the first asks for a confirmation and returns a sealed state, the
// second, with the state, deploys (a row in the database file). The
// server is then restarted on the same file with the same keys (the
// store closed, the pool closed and opened again, a new Store, a new MCP
// server on a new listener), and the client replays the used state.

import (
	"context"
	"database/sql"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/ctoken/ctoken"
	ctokenmcp "github.com/ctoken/ctoken/mcp"
	"github.com/ctoken/ctoken/replay"
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
	store *sqlitestore.Store // nil for a MemoryStore
	db    *sql.DB
}

// stop stops the server as a deploy does: the listener, the store, the
// pool.
func (m *mcpServer) stop() {
	m.srv.Close()
	if m.store != nil {
		m.store.Close()
	}
	m.db.Close()
}

// startMCP starts the tool server on the database at path with keys:
// single-use states recorded in a sqlitestore on the file (store
// "sqlite") or in a new replay.MemoryStore ("memory"), deploys written to
// the file's deploys table.
func startMCP(t *testing.T, d Driver, path, store string, keys *ctoken.Keyring) *mcpServer {
	t.Helper()
	ctx := context.Background()
	m := &mcpServer{db: d.Open(t, path)}
	var states replay.Store
	switch store {
	case "sqlite":
		s, err := sqlitestore.New(ctx, m.db, sqlitestore.Options{})
		if err != nil {
			t.Fatalf("New after the restart: %v", err)
		}
		m.store, states = s, s
	case "memory":
		states = replay.NewMemoryStore(0)
	}
	codec, err := ctoken.NewRequestStateCodec(ctoken.RequestStateSecurity{
		Keys: keys, Mode: ctoken.Encrypted, Binding: ctoken.BindSubjectAndTool, Replay: states,
	})
	if err != nil {
		t.Fatal(err)
	}
	s := mcp.NewServer(&mcp.Implementation{Name: "deployer", Version: "v0"}, nil)
	if err := ctokenmcp.SecureRequestState(s, codec, &ctokenmcp.StateOptions{Caller: ctokenmcp.FixedCaller("alice")}); err != nil {
		t.Fatal(err)
	}
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
		if _, err := m.db.ExecContext(ctx, `INSERT INTO deploys (service, plan) VALUES (?, ?)`, in.Service, req.Params.RequestState); err != nil {
			return nil, deployOut{}, err
		}
		return nil, deployOut{Deployed: in.Service}, nil
	})
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, &mcp.StreamableHTTPOptions{Stateless: true})
	m.srv = loopback(t, h, nil)
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
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

func deploys(t *testing.T, db *sql.DB) int {
	t.Helper()
	var n int
	if err := db.QueryRowContext(context.Background(), `SELECT count(*) FROM deploys`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestMCPSingleUseStateAcrossARestart: go-sdk's client runs the two
// rounds of the deploy tool (one deploy), the server restarts on the
// same file with the same keys, and the client sends the used state
// again. On the SQLite store it is refused as invalid (-32602, ctoken
// code 1023) and nothing is deployed again; on a MemoryStore (the
// contrast, the finding) the restarted server has forgotten it
// and deploys a second time.
func TestMCPSingleUseStateAcrossARestart(t *testing.T) {
	tests := []struct {
		name, store string
		refused     bool
		deploys     int
	}{
		{"sqlitestore: the used state is refused, one deploy", "sqlite", true, 1},
		{"MemoryStore: the used state deploys again", "memory", false, 2},
	}
	for _, d := range Drivers() {
		t.Run(d.Name, func(t *testing.T) {
			t.Parallel()
			for _, tc := range tests {
				t.Run(tc.name, func(t *testing.T) {
					t.Parallel()
					ctx := context.Background()
					db, path := openMigrated(t, d)
					if _, err := db.ExecContext(ctx, `CREATE TABLE deploys (service TEXT NOT NULL, plan TEXT NOT NULL)`); err != nil {
						t.Fatal(err)
					}
					db.Close()
					keys, err := ctoken.NewKeyring(ctoken.RandomKey())
					if err != nil {
						t.Fatal(err)
					}

					before := startMCP(t, d, path, tc.store, keys)
					cs := connectMCP(t, before)
					first, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "deploy", Arguments: deployIn{Service: "api"}})
					if err != nil || !first.NeedsInput() || first.RequestState == "" {
						t.Fatalf("round one: %v, %+v; want an input-required result with a state", err, first)
					}
					use := &mcp.CallToolParams{
						Name: "deploy", Arguments: deployIn{Service: "api"}, RequestState: first.RequestState,
						InputResponses: mcp.InputResponseMap{"ok": &mcp.ElicitResult{Action: "accept", Content: map[string]any{"ok": true}}},
					}
					second, err := cs.CallTool(ctx, use)
					if err != nil || second.IsError || second.StructuredContent.(map[string]any)["deployed"] != "api" {
						t.Fatalf("round two: %v, %+v; want api deployed", err, second)
					}
					if n := deploys(t, before.db); n != 1 {
						t.Fatalf("%d deploys after round two; want 1", n)
					}
					cs.Close()
					before.stop()

					after := startMCP(t, d, path, tc.store, keys)
					replayed, err := connectMCP(t, after).CallTool(ctx, use)
					if tc.refused {
						var we *jsonrpc.Error
						if !errors.As(err, &we) || we.Code != jsonrpc.CodeInvalidParams || ctokenmcp.TokenErrorCode(err) != ctokenmcp.StateInvalid {
							t.Fatalf("the used state after the restart: %v, %+v; want -32602 with ctoken code %d", err, replayed, ctokenmcp.StateInvalid)
						}
					} else if err != nil || replayed.StructuredContent.(map[string]any)["deployed"] != "api" {
						t.Fatalf("the used state after the restart: %v, %+v; want api deployed again", err, replayed)
					}
					if n := deploys(t, after.db); n != tc.deploys {
						t.Fatalf("%d deploys after the replay; want %d", n, tc.deploys)
					}
				})
			}
		})
	}
}
