package ctokenmcp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ctoken/ctoken"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// clock is a settable test clock, safe for concurrent use.
type clock struct{ unix atomic.Int64 }

func newClock() *clock {
	c := &clock{}
	c.unix.Store(time.Now().Unix())
	return c
}
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

// syncBuffer is a bytes.Buffer safe for the concurrent writes of several
// servers' loggers.
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

// fleet is what every server instance of one deployment shares: keys,
// cursor session, clock, and so one issuer and one codec.
type fleet struct {
	clock  *clock
	issuer *ctoken.CursorIssuer
	codec  *ctoken.RequestStateCodec
	log    *syncBuffer
}

func newFleet(t testing.TB, key byte, session string) *fleet {
	t.Helper()
	f := &fleet{clock: newClock(), log: &syncBuffer{}}
	var err error
	f.issuer, err = ctoken.NewCursorIssuer(ctoken.CursorConfig{Keys: keyring(t, key), Session: []byte(session), Now: f.clock.now})
	if err != nil {
		t.Fatal(err)
	}
	f.codec, err = ctoken.NewRequestStateCodec(ctoken.RequestStateSecurity{
		Keys: keyring(t, key), Mode: ctoken.Encrypted, Binding: ctoken.BindSubjectAndTool, Now: f.clock.now,
	})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// Test tools.

const testPageSize = 5

var testItems = []string{"a1", "a2", "a3", "a4", "a5", "a6", "a7", "b1", "b2", "b3", "b4", "b5"}

type listIn struct {
	Prefix string `json:"prefix"`
	Cursor string `json:"cursor,omitempty"`
}

type listOut struct {
	Items []string `json:"items"`
	Next  string   `json:"next,omitempty"`
}

type askIn struct {
	Target string `json:"target"`
}

type askOut struct {
	Done string `json:"done"`
	Plan int    `json:"plan"`
}

type askState struct {
	Target string `json:"target"`
	Plan   int    `json:"plan"`
}

// server returns a server with paginated tools "list" and "list2" and
// input-asking tools "ask" and "ask2", whose tokens are bound to who.
func (f *fleet) server(t testing.TB, who CallerFunc, sopts *StateOptions) *mcp.Server {
	t.Helper()
	logger := slog.New(slog.NewTextHandler(f.log, nil))
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
	list := func(ctx context.Context, req *mcp.CallToolRequest, in listIn) (*mcp.CallToolResult, listOut, error) {
		bound := in
		bound.Cursor = ""
		p, err := cursors.Resume(ctx, req, bound, in.Cursor)
		if err != nil {
			return nil, listOut{}, err
		}
		var match []string
		for _, it := range testItems {
			if strings.HasPrefix(it, in.Prefix) {
				match = append(match, it)
			}
		}
		start := min(int(p.Page)*testPageSize, len(match))
		end := min(start+testPageSize, len(match))
		out := listOut{Items: append([]string{}, match[start:end]...)}
		if end < len(match) {
			if out.Next, err = cursors.Next(ctx, req, bound, p.Page+1, nil); err != nil {
				return nil, listOut{}, err
			}
		}
		return nil, out, nil
	}
	ask := func(ctx context.Context, req *mcp.CallToolRequest, in askIn) (*mcp.CallToolResult, askOut, error) {
		st, ok, err := OpenJSON[askState](ctx, states, req)
		if err != nil {
			return nil, askOut{}, err
		}
		if !ok {
			state, err := SealJSON(ctx, states, req, askState{Target: in.Target, Plan: 42})
			if err != nil {
				return nil, askOut{}, err
			}
			return &mcp.CallToolResult{
				InputRequests: mcp.InputRequestMap{"ok": &mcp.ElicitParams{
					Message:         "proceed with " + in.Target + "?",
					RequestedSchema: map[string]any{"type": "object", "properties": map[string]any{"ok": map[string]any{"type": "boolean"}}},
				}},
				RequestState: state,
			}, askOut{}, nil
		}
		answer, _ := req.Params.InputResponses["ok"].(*mcp.ElicitResult)
		if answer == nil || answer.Content["ok"] != true {
			return nil, askOut{Done: "cancelled", Plan: st.Plan}, nil
		}
		return nil, askOut{Done: st.Target, Plan: st.Plan}, nil
	}
	s := mcp.NewServer(&mcp.Implementation{Name: "test", Version: "v0"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "list"}, list)
	mcp.AddTool(s, &mcp.Tool{Name: "list2"}, list)
	mcp.AddTool(s, &mcp.Tool{Name: "ask"}, ask)
	mcp.AddTool(s, &mcp.Tool{Name: "ask2"}, ask)
	return s
}

// connect joins a client to s over in-memory transports. A nil opts is a
// client that answers every elicitation with {"ok": true} and lets the SDK
// retry on its own.
func connect(t testing.TB, s *mcp.Server, opts *mcp.ClientOptions) *mcp.ClientSession {
	t.Helper()
	ctx := context.Background()
	st, ct := mcp.NewInMemoryTransports()
	ss, err := s.Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ss.Close() })
	if opts == nil {
		opts = &mcp.ClientOptions{ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"ok": true}}, nil
		}}
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test-client", Version: "v0"}, opts).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// manual is client options that leave the multi round trip to the test.
var manual = &mcp.ClientOptions{MultiRoundTrip: &mcp.MultiRoundTripOptions{Disabled: true}}

func callList(t testing.TB, cs *mcp.ClientSession, tool string, in listIn) (listOut, error) {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: tool, Arguments: in})
	if err != nil {
		return listOut{}, err
	}
	if res.IsError {
		t.Fatalf("tool error: %v", res.Content)
	}
	var out listOut
	b, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out, nil
}

// wantRPCError checks that err is a JSON-RPC error with code and, when
// tokenCode is non-zero, that ctoken code in its data.
func wantRPCError(t testing.TB, err error, code int64, tokenCode int) {
	t.Helper()
	var we *jsonrpc.Error
	if !errors.As(err, &we) {
		t.Fatalf("error %v (%T) is not a JSON-RPC error", err, err)
	}
	if we.Code != code {
		t.Errorf("JSON-RPC code %d (%q), want %d", we.Code, we.Message, code)
	}
	if got := TokenErrorCode(err); got != tokenCode {
		t.Errorf("TokenErrorCode = %d, want %d", got, tokenCode)
	}
}
