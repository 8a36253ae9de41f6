package main

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/ctoken/ctoken"
	ctokenmcpgo "github.com/ctoken/ctoken/mcpgo"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
)

// pageSize is the number of items per page of the search tool.
const pageSize = 5

// catalog is the data the search tool pages through.
var catalog = func() []string {
	var c []string
	for _, color := range []string{"red", "green", "blue", "black"} {
		for _, item := range []string{"shoes", "socks", "hat", "scarf", "gloves", "boots"} {
			c = append(c, color+" "+item)
		}
	}
	return c
}()

// app holds the ctoken helpers the server uses.
type app struct {
	cursors *ctokenmcpgo.Cursors
	states  *ctokenmcpgo.States
}

// newApp builds the helpers from one keyring: cursors signed for session,
// request states encrypted and bound to caller and tool. A fleet gives every
// instance the same keys and session. Rejections are logged to log (nil:
// discarded) with their reason, never the token.
func newApp(keys *ctoken.Keyring, session []byte, log *slog.Logger) (*app, error) {
	issuer, err := ctoken.NewCursorIssuer(ctoken.CursorConfig{Keys: keys, Session: session})
	if err != nil {
		return nil, err
	}
	codec, err := ctoken.NewRequestStateCodec(ctoken.RequestStateSecurity{
		Keys:    keys,
		Mode:    ctoken.Encrypted,
		Binding: ctoken.BindSubjectAndTool,
		TTL:     10 * time.Minute,
	})
	if err != nil {
		return nil, err
	}
	cursors, err := ctokenmcpgo.NewCursors(issuer, &ctokenmcpgo.CursorOptions{Logger: log})
	if err != nil {
		return nil, err
	}
	states, err := ctokenmcpgo.NewStates(codec, &ctokenmcpgo.StateOptions{Logger: log})
	if err != nil {
		return nil, err
	}
	return &app{cursors: cursors, states: states}, nil
}

// newServer returns an mcp-go server with the search and deploy tools. One
// option seals every requestState: the deploy handler works in plaintext.
func (a *app) newServer() *server.MCPServer {
	s := server.NewMCPServer("ctoken-example", "v0.1.0",
		ctokenmcpgo.SecureRequestState(a.states),
		server.WithToolCapabilities(false))
	s.AddTool(mcp.NewTool("search",
		mcp.WithDescription("Search the catalog, a page at a time."),
		mcp.WithString("query", mcp.Required(), mcp.Description("substring to look for")),
		mcp.WithString("cursor", mcp.Description("nextCursor of the previous page")),
	), a.search)
	s.AddTool(mcp.NewTool("deploy",
		mcp.WithDescription("Deploy a service version after the user confirms."),
		mcp.WithString("service", mcp.Required()),
		mcp.WithString("version", mcp.Required()),
	), a.deploy)
	return s
}

func (a *app) search(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	query := req.GetString("query", "")
	// The cursor is bound to the query, not to itself.
	bound := map[string]any{"query": query}
	// Turn verifies the cursor (none: the first page, Page 0) and keeps
	// the scope, so that turn.Next binds the next cursor without
	// fingerprinting the arguments again.
	turn, err := a.cursors.Turn(ctx, req, bound, req.GetString("cursor", ""))
	if err != nil {
		return ctokenmcpgo.ToolResult(err) // a refused cursor: a tool error with its ctokenCode
	}
	p := turn.Payload
	var matches []string
	for _, item := range catalog {
		if strings.Contains(item, query) {
			matches = append(matches, item)
		}
	}
	start := min(int(p.Page)*pageSize, len(matches))
	end := min(start+pageSize, len(matches))
	out := map[string]any{"items": append([]string{}, matches[start:end]...)}
	if end < len(matches) {
		next, err := turn.Next(p.Page+1, nil)
		if err != nil {
			return nil, err
		}
		out["nextCursor"] = next
	}
	return mcp.NewToolResultStructuredOnly(out), nil
}

// confirmPlan is deploy's one question, under the id "confirm": round one
// asks it, round two decodes the answer against it.
func confirmPlan(plan string) mcp.InputRequests {
	return mcp.InputRequests{"confirm": mcp.NewElicitationInputRequest(mcp.ElicitationParams{
		Message: "Confirm: " + plan + "?",
		RequestedSchema: map[string]any{
			"type":       "object",
			"properties": map[string]any{"confirm": map[string]any{"type": "boolean"}},
			"required":   []string{"confirm"},
		},
	})}
}

// deploy asks the user to confirm. Its state is plaintext here: the plan the
// user was shown. SecureRequestState seals it on the way out (the client can
// neither read nor change it) and opens it on the way back in.
func (a *app) deploy(_ context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	plan := fmt.Sprintf("roll %s to %s on 3 instances", req.GetString("service", ""), req.GetString("version", ""))
	if req.Params.RequestState == "" {
		// Round one: ask, and remember the plan shown (plaintext).
		return &mcp.CallToolResult{
			Result:               mcp.Result{ResultType: mcp.ResultTypeInputRequired},
			MultiRoundTripResult: mcp.MultiRoundTripResult{InputRequests: confirmPlan(plan), RequestState: "plan:" + plan},
		}, nil
	}
	// Round two: the plan comes from the sealed state, not from the client.
	// The answers arrive undecoded: DecodeFor types each one by the
	// question it answers.
	shown := strings.TrimPrefix(req.Params.RequestState, "plan:")
	responses := req.Params.InputResponses
	if err := responses.DecodeFor(confirmPlan(shown)); err != nil {
		return mcp.NewToolResultError("undecodable inputResponses: " + err.Error()), nil
	}
	answer := responses["confirm"].Elicitation
	if answer == nil {
		return mcp.NewToolResultError(`missing inputResponses["confirm"]`), nil
	}
	content, _ := answer.Content.(map[string]any)
	if answer.Action != mcp.ElicitationResponseActionAccept || content["confirm"] != true {
		return mcp.NewToolResultStructuredOnly(map[string]any{"status": "cancelled", "plan": shown}), nil
	}
	return mcp.NewToolResultStructuredOnly(map[string]any{"status": "deployed", "plan": shown}), nil
}
