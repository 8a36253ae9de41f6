package ctokenmcpgo

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"

	"github.com/ctoken/ctoken"
	"github.com/ctoken/ctoken/mcptoken"
	"github.com/ctoken/ctoken/replay"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
)

// swapOnce returns a swap that replaces the first requestState sent with
// st and passes the later ones through.
func swapOnce(st string) func(string) string {
	var once sync.Once
	return func(s string) string {
		once.Do(func() { s = st })
		return s
	}
}

// The case, through a real mcp-go client: under the default
// configuration a state sealed by preview_delete with {"id":5} never opens
// for delete_now with {"id":5}. NewStates refuses the zero Binding
// (ctoken.BindSubject), under which it would.
func TestStatesStateOfOneToolNeverOpensForAnother(t *testing.T) {
	f := newFleet(t, 1, "s1", nil)
	zero, err := ctoken.NewRequestStateCodec(ctoken.RequestStateSecurity{Keys: keyring(t, 1)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewStates(zero, nil); !errors.Is(err, mcptoken.ErrTargetUnbound) || !errors.Is(err, ctoken.ErrConfig) {
		t.Fatalf("NewStates with the zero Binding: %v; want ErrTargetUnbound and ErrConfig", err)
	}
	states, err := NewStates(f.codec, &StateOptions{Logger: newTextLogger(f.log)})
	if err != nil {
		t.Fatal(err)
	}
	var ran []string
	var mu sync.Mutex
	confirm := func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		id := strconv.Itoa(req.GetInt("id", 0))
		if req.Params.RequestState == "confirm:"+id {
			mu.Lock()
			ran = append(ran, req.Params.Name+" "+id)
			mu.Unlock()
			return mcp.NewToolResultText("deleted " + id), nil
		}
		return server.NewInputRequestBuilder("confirm:"+id).Elicit("ok", mcp.ElicitationParams{Message: "delete " + id + "?", RequestedSchema: confirmSchema}).ToolResult(), nil
	}
	s := server.NewMCPServer("test", "v0", SecureRequestState(states), server.WithToolCapabilities(false), server.WithElicitation())
	s.AddTool(mcp.NewTool("preview_delete"), confirm)
	s.AddTool(mcp.NewTool("delete_now"), confirm)
	p := inProcess(t, s, "alice", &elicitor{answer: true})
	if res, err := p.call("preview_delete", map[string]any{"id": 5}); err != nil || text(res) != "deleted 5" {
		t.Fatalf("preview_delete: %v, %q", err, text(res))
	}
	results, _ := p.wire.states()
	p.wire.setSwap(swapOnce(results[0]))
	res, err := p.call("delete_now", map[string]any{"id": 5})
	refused(t, res, err, StateInvalid)
	if len(ran) != 1 || ran[0] != "preview_delete 5" {
		t.Fatalf("handlers that ran on a confirmed state: %q", ran)
	}
}

// No refusal consumes a single-use state: refused for its caller, its tool,
// its arguments or its audience, it then opens for the right request
// exactly once, through a real mcp-go client and SecureRequestState.
func TestStatesNoRefusalConsumesASingleUseState(t *testing.T) {
	store := replay.NewMemoryStore(0)
	f := newFleet(t, 1, "s1", store)
	s := f.server(t, ContextCaller, nil)
	other := newFleet(t, 1, "s1", store)
	var err error
	other.codec, err = ctoken.NewRequestStateCodec(ctoken.RequestStateSecurity{
		Keys: keyring(t, 1), Mode: ctoken.Encrypted, Binding: ctoken.BindSubjectAndTool, Now: other.clock.now, Replay: store, Audience: "other-server",
	})
	if err != nil {
		t.Fatal(err)
	}
	sOther := other.server(t, ContextCaller, nil)
	yes := func() *elicitor { return &elicitor{answer: true} }

	// alice's first-round state for ask(prod), taken from a call whose
	// second round sent something else.
	alice := inProcess(t, s, "alice", yes())
	alice.wire.setSwap(swapOnce("v1e.not-a-state"))
	res, err := alice.call("ask", map[string]any{"target": "prod"})
	refused(t, res, err, StateInvalid)
	results, _ := alice.wire.states()
	st := results[0]

	for _, r := range []struct {
		name, tool, target string
		p                  *peer
	}{
		{"caller", "ask", "prod", inProcess(t, s, "bob", yes())},
		{"tool", "ask2", "prod", inProcess(t, s, "alice", yes())},
		{"arguments", "ask", "staging", inProcess(t, s, "alice", yes())},
		{"audience", "ask", "prod", inProcess(t, sOther, "alice", yes())},
	} {
		t.Run(r.name, func(t *testing.T) {
			r.p.wire.setSwap(swapOnce(st))
			res, err := r.p.call(r.tool, map[string]any{"target": r.target})
			refused(t, res, err, StateInvalid)
			if store.Len() != 0 {
				t.Fatal("the refused state was claimed")
			}
		})
	}
	right := inProcess(t, s, "alice", yes())
	right.wire.setSwap(swapOnce(st))
	if res, err := right.call("ask", map[string]any{"target": "prod"}); err != nil || text(res) != "done prod" {
		t.Fatalf("the right request after the refusals: %v, %q", err, text(res))
	}
	again := inProcess(t, s, "alice", yes())
	again.wire.setSwap(swapOnce(st))
	res, err = again.call("ask", map[string]any{"target": "prod"})
	refused(t, res, err, StateInvalid)
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
