package ctokenmcp_test

import (
	"context"
	"fmt"
	"log"

	"github.com/ctoken/ctoken"
	ctokenmcp "github.com/ctoken/ctoken/mcp"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

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
