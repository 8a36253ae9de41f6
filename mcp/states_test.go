package ctokenmcp

import (
	"context"
	"errors"
	"log/slog"
	"testing"

	"github.com/ctoken/ctoken"
	"github.com/ctoken/ctoken/mcptoken"
	"github.com/ctoken/ctoken/replay"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

type deleteIn struct {
	ID int `json:"id"`
}

type deleteOut struct {
	Deleted int `json:"deleted"`
}

// deleteServer returns a server whose tools preview_delete and delete_now
// both ask for confirmation and delete on a state that opens, with states
// resolving the caller as who.
func deleteServer(t testing.TB, states *States) *mcp.Server {
	t.Helper()
	handler := func(ctx context.Context, req *mcp.CallToolRequest, in deleteIn) (*mcp.CallToolResult, deleteOut, error) {
		st, ok, err := states.Open(ctx, req)
		if err != nil {
			return nil, deleteOut{}, err
		}
		if ok && st == `{"confirmed":true}` {
			return nil, deleteOut{Deleted: in.ID}, nil
		}
		state, err := states.Seal(ctx, req, `{"confirmed":true}`)
		if err != nil {
			return nil, deleteOut{}, err
		}
		return &mcp.CallToolResult{
			InputRequests: mcp.InputRequestMap{"ok": &mcp.ElicitParams{Message: "delete?", RequestedSchema: map[string]any{"type": "object"}}},
			RequestState:  state,
		}, deleteOut{}, nil
	}
	s := mcp.NewServer(&mcp.Implementation{Name: "test", Version: "v0"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "preview_delete"}, handler)
	mcp.AddTool(s, &mcp.Tool{Name: "delete_now"}, handler)
	return s
}

func callDelete(cs *mcp.ClientSession, tool string, id int, state string) (*mcp.CallToolResult, error) {
	return cs.CallTool(context.Background(), &mcp.CallToolParams{Name: tool, Arguments: deleteIn{ID: id}, RequestState: state,
		InputResponses: mcp.InputResponseMap{"ok": &mcp.ElicitResult{Action: "accept"}}})
}

// The case, through a real go-sdk client: under the default
// configuration a state sealed by preview_delete with {"id":5} never opens
// for delete_now with {"id":5}. NewStates refuses the zero Binding
// (ctoken.BindSubject), under which it would.
func TestStatesStateOfOneToolNeverOpensForAnother(t *testing.T) {
	f := newFleet(t, 1, "s1")
	zero, err := ctoken.NewRequestStateCodec(ctoken.RequestStateSecurity{Keys: keyring(t, 1)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewStates(zero, nil); !errors.Is(err, mcptoken.ErrTargetUnbound) || !errors.Is(err, ctoken.ErrConfig) {
		t.Fatalf("NewStates with the zero Binding: %v; want ErrTargetUnbound and ErrConfig", err)
	}
	states, err := NewStates(f.codec, &StateOptions{Caller: FixedCaller("alice")})
	if err != nil {
		t.Fatal(err)
	}
	cs := connect(t, deleteServer(t, states), manual)
	first, err := callDelete(cs, "preview_delete", 5, "")
	if err != nil || first.RequestState == "" {
		t.Fatalf("round one: %v", err)
	}
	res, err := callDelete(cs, "delete_now", 5, first.RequestState)
	if err == nil {
		t.Fatalf("delete_now ran on preview_delete's state: %+v", res.StructuredContent)
	}
	wantRPCError(t, err, jsonrpc.CodeInvalidParams, StateInvalid)
}

// No refusal consumes a single-use state: refused for its caller, its tool,
// its arguments or its audience, it then opens for the right request
// exactly once, through a real go-sdk client.
func TestStatesNoRefusalConsumesASingleUseState(t *testing.T) {
	store := replay.NewMemoryStore(0)
	states := func(caller, aud string) *States {
		c, err := ctoken.NewRequestStateCodec(ctoken.RequestStateSecurity{
			Keys: keyring(t, 1), Mode: ctoken.Encrypted, Binding: ctoken.BindSubjectAndTool, Audience: aud, Replay: store,
		})
		if err != nil {
			t.Fatal(err)
		}
		s, err := NewStates(c, &StateOptions{Caller: FixedCaller(caller), Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	alice := connect(t, deleteServer(t, states("alice", "a")), manual)
	bob := connect(t, deleteServer(t, states("bob", "a")), manual)
	otherAudience := connect(t, deleteServer(t, states("alice", "b")), manual)
	first, err := callDelete(alice, "preview_delete", 5, "")
	if err != nil || first.RequestState == "" {
		t.Fatalf("round one: %v", err)
	}
	st := first.RequestState
	for _, r := range []struct {
		name string
		cs   *mcp.ClientSession
		tool string
		id   int
	}{
		{"caller", bob, "preview_delete", 5},
		{"tool", alice, "delete_now", 5},
		{"arguments", alice, "preview_delete", 6},
		{"audience", otherAudience, "preview_delete", 5},
	} {
		t.Run(r.name, func(t *testing.T) {
			_, err := callDelete(r.cs, r.tool, r.id, st)
			wantRPCError(t, err, jsonrpc.CodeInvalidParams, StateInvalid)
			if store.Len() != 0 {
				t.Fatal("the refused state was claimed")
			}
		})
	}
	res, err := callDelete(alice, "preview_delete", 5, st)
	if err != nil || res.IsError || res.NeedsInput() {
		t.Fatalf("the right request after the refusals: %v", err)
	}
	_, err = callDelete(alice, "preview_delete", 5, st)
	wantRPCError(t, err, jsonrpc.CodeInvalidParams, StateInvalid)
}

// A codec or issuer not made by its constructor has no key: NewStates and
// NewCursors refuse it with ctoken.ErrConfig.
func TestConstructorsRefuseKeylessCodecAndIssuer(t *testing.T) {
	if _, err := NewStates(&ctoken.RequestStateCodec{}, nil); !errors.Is(err, ctoken.ErrConfig) {
		t.Errorf("NewStates(zero codec): %v; want ErrConfig", err)
	}
	if _, err := NewCursors(&ctoken.CursorIssuer{}, nil); !errors.Is(err, ctoken.ErrConfig) {
		t.Errorf("NewCursors(zero issuer): %v; want ErrConfig", err)
	}
}
