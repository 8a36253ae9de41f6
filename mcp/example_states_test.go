package ctokenmcp_test

import (
	"context"
	"fmt"
	"log"

	"github.com/ctoken/ctoken"
	ctokenmcp "github.com/ctoken/ctoken/mcp"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

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
