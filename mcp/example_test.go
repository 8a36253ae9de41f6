package ctokenmcp_test

import (
	"context"
	"fmt"
	"log"

	"github.com/ctoken/ctoken"
	ctokenmcp "github.com/ctoken/ctoken/mcp"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// connect joins a client with opts to s over in-memory transports.
func connect(s *mcp.Server, opts *mcp.ClientOptions) *mcp.ClientSession {
	ctx := context.Background()
	st, ct := mcp.NewInMemoryTransports()
	if _, err := s.Connect(ctx, st, nil); err != nil {
		log.Fatal(err)
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "client", Version: "v0"}, opts).Connect(ctx, ct, nil)
	if err != nil {
		log.Fatal(err)
	}
	return cs
}

type ListIn struct {
	Cursor string `json:"cursor,omitempty"`
}

type ListOut struct {
	Items      []int  `json:"items"`
	NextCursor string `json:"nextCursor,omitempty"`
}

// A paginated tool whose cursor is bound to the tool, the caller and the
// arguments. Over streamable HTTP with auth.RequireBearerToken, leave
// CursorOptions.Caller nil to bind to the bearer token's user.
func ExampleCursors() {
	kr, _ := ctoken.NewKeyring(ctoken.RandomKey()) // random: this process only; a fleet shares ctoken.KeyringFromEnv
	issuer, _ := ctoken.NewCursorIssuer(ctoken.CursorConfig{Keys: kr})
	cursors, _ := ctokenmcp.NewCursors(issuer, &ctokenmcp.CursorOptions{Caller: ctokenmcp.FixedCaller("alice")})

	s := mcp.NewServer(&mcp.Implementation{Name: "server", Version: "v0"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "count"}, func(ctx context.Context, req *mcp.CallToolRequest, in ListIn) (*mcp.CallToolResult, ListOut, error) {
		bound := in
		bound.Cursor = ""                                     // bind to the arguments, not to the cursor itself
		turn, err := cursors.Turn(ctx, req, bound, in.Cursor) // no cursor: the first page, Page 0
		if err != nil {
			return nil, ListOut{}, err // -32602, returned unwrapped
		}
		p := turn.Payload
		out := ListOut{Items: []int{int(p.Page)*2 + 1, int(p.Page)*2 + 2}}
		if p.Page < 2 {
			out.NextCursor, err = turn.Next(p.Page+1, nil) // the scope of Turn: no second fingerprint
		}
		return nil, out, err
	})

	cs := connect(s, nil)
	defer cs.Close()
	cursor := ""
	for {
		res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "count", Arguments: ListIn{Cursor: cursor}})
		if err != nil {
			log.Fatal(err)
		}
		page := res.StructuredContent.(map[string]any)
		fmt.Println(page["items"])
		next, _ := page["nextCursor"].(string)
		if next == "" {
			break
		}
		cursor = next
	}
	_, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "count", Arguments: ListIn{Cursor: "forged"}})
	fmt.Println(err, ctokenmcp.TokenErrorCode(err))
	// Output:
	// [1 2]
	// [3 4]
	// [5 6]
	// calling "tools/call": invalid cursor 1021
}

type DeployIn struct {
	Service string `json:"service"`
}

type DeployOut struct {
	Deployed string `json:"deployed"`
}

// A tool that asks the user to confirm with a multi round-trip request; its
// requestState is sealed by ctoken, bound to the caller, the tool and the
// arguments.
func ExampleStates() {
	kr, _ := ctoken.NewKeyring(ctoken.RandomKey()) // random: this process only; a fleet shares ctoken.KeyringFromEnv
	codec, _ := ctoken.NewRequestStateCodec(ctoken.RequestStateSecurity{
		Keys: kr, Mode: ctoken.Encrypted, Binding: ctoken.BindSubjectAndTool,
	})
	states, _ := ctokenmcp.NewStates(codec, &ctokenmcp.StateOptions{Caller: ctokenmcp.FixedCaller("alice")})

	type plan struct{ Steps int }
	s := mcp.NewServer(&mcp.Implementation{Name: "server", Version: "v0"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "deploy"}, func(ctx context.Context, req *mcp.CallToolRequest, in DeployIn) (*mcp.CallToolResult, DeployOut, error) {
		p, resumed, err := ctokenmcp.OpenJSON[plan](ctx, states, req)
		if err != nil {
			return nil, DeployOut{}, err // -32602, returned unwrapped
		}
		if !resumed {
			state, err := ctokenmcp.SealJSON(ctx, states, req, plan{Steps: 3})
			if err != nil {
				return nil, DeployOut{}, err
			}
			return &mcp.CallToolResult{
				InputRequests: mcp.InputRequestMap{"ok": &mcp.ElicitParams{
					Message:         "Deploy " + in.Service + "?",
					RequestedSchema: map[string]any{"type": "object", "properties": map[string]any{"ok": map[string]any{"type": "boolean"}}},
				}},
				RequestState: state,
			}, DeployOut{}, nil
		}
		if r, _ := req.Params.InputResponses["ok"].(*mcp.ElicitResult); r == nil || r.Content["ok"] != true {
			return nil, DeployOut{Deployed: "nothing"}, nil
		}
		return nil, DeployOut{Deployed: fmt.Sprintf("%s in %d steps", in.Service, p.Steps)}, nil
	})

	// The SDK client answers the elicitation and retries with the state.
	cs := connect(s, &mcp.ClientOptions{ElicitationHandler: func(_ context.Context, r *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
		fmt.Println("asked:", r.Params.Message)
		return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"ok": true}}, nil
	}})
	defer cs.Close()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "deploy", Arguments: DeployIn{Service: "api"}})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(res.StructuredContent.(map[string]any)["deployed"])
	// Output:
	// asked: Deploy api?
	// api in 3 steps
}

// One call secures every tool, prompt and resource of a server that asks
// for input: the handler keeps its state in RequestState as plaintext, and
// the client only ever holds it sealed (encrypted, bound to the caller,
// the tool and the arguments).
func ExampleSecureRequestState() {
	kr, _ := ctoken.NewKeyring(ctoken.RandomKey()) // random: this process only; a fleet shares ctoken.KeyringFromEnv
	codec, _ := ctoken.NewRequestStateCodec(ctoken.RequestStateSecurity{
		Keys: kr, Mode: ctoken.Encrypted, Binding: ctoken.BindSubjectAndTool,
	})
	s := mcp.NewServer(&mcp.Implementation{Name: "server", Version: "v0"}, nil)
	// Over streamable HTTP with auth.RequireBearerToken, leave Caller nil
	// to bind to the bearer token's user.
	if err := ctokenmcp.SecureRequestState(s, codec, &ctokenmcp.StateOptions{Caller: ctokenmcp.FixedCaller("alice")}); err != nil {
		log.Fatal(err)
	}
	mcp.AddTool(s, &mcp.Tool{Name: "deploy"}, func(ctx context.Context, req *mcp.CallToolRequest, in DeployIn) (*mcp.CallToolResult, DeployOut, error) {
		if req.Params.RequestState == "" { // round one: ask, and remember the plan
			return &mcp.CallToolResult{
				InputRequests: mcp.InputRequestMap{"ok": &mcp.ElicitParams{
					Message:         "Deploy " + in.Service + "?",
					RequestedSchema: map[string]any{"type": "object", "properties": map[string]any{"ok": map[string]any{"type": "boolean"}}},
				}},
				RequestState: "plan: 3 steps",
			}, DeployOut{}, nil
		}
		// Round two: the state is the one returned above, opened and checked.
		return nil, DeployOut{Deployed: in.Service + " with " + req.Params.RequestState}, nil
	})

	cs := connect(s, &mcp.ClientOptions{MultiRoundTrip: &mcp.MultiRoundTripOptions{Disabled: true}})
	defer cs.Close()
	ctx := context.Background()
	first, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "deploy", Arguments: DeployIn{Service: "api"}})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("client holds:", first.RequestState[:4]+"...")
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{
		Name: "deploy", Arguments: DeployIn{Service: "api"}, RequestState: first.RequestState,
		InputResponses: mcp.InputResponseMap{"ok": &mcp.ElicitResult{Action: "accept", Content: map[string]any{"ok": true}}},
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(res.StructuredContent.(map[string]any)["deployed"])
	_, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "deploy", Arguments: DeployIn{Service: "db"}, RequestState: first.RequestState})
	fmt.Println(err, ctokenmcp.TokenErrorCode(err))
	// Output:
	// client holds: v1e....
	// api with plan: 3 steps
	// calling "tools/call": invalid requestState 1023
}

// Every list cursor of a server sealed by ctoken, with one call: the SDK
// pages as before, and a cursor works only for the caller (and session)
// it was handed to. Over streamable HTTP with auth.RequireBearerToken,
// leave CursorOptions.Caller nil to bind to the bearer token's user.
func ExampleSecureListCursors() {
	kr, _ := ctoken.NewKeyring(ctoken.RandomKey()) // random: this process only; a fleet shares ctoken.KeyringFromEnv
	issuer, _ := ctoken.NewCursorIssuer(ctoken.CursorConfig{Keys: kr, Seal: true})

	s := mcp.NewServer(&mcp.Implementation{Name: "server", Version: "v0"}, &mcp.ServerOptions{PageSize: 2})
	for _, name := range []string{"alpha", "beta", "gamma"} {
		s.AddPrompt(&mcp.Prompt{Name: name}, func(context.Context, *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
			return &mcp.GetPromptResult{}, nil
		})
	}
	if err := ctokenmcp.SecureListCursors(s, issuer, &ctokenmcp.CursorOptions{Caller: ctokenmcp.FixedCaller("alice")}); err != nil {
		log.Fatal(err)
	}

	cs := connect(s, nil)
	defer cs.Close()
	ctx := context.Background()
	for p, err := range cs.Prompts(ctx, nil) { // follows every cursor
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(p.Name)
	}
	_, err := cs.ListPrompts(ctx, &mcp.ListPromptsParams{Cursor: "forged"})
	fmt.Println(err, ctokenmcp.TokenErrorCode(err))
	// Output:
	// alpha
	// beta
	// gamma
	// calling "prompts/list": invalid cursor 1021
}
