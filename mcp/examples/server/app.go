package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/ctoken/ctoken"
	ctokenmcp "github.com/ctoken/ctoken/mcp"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
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

// SearchIn is the input of the search tool. Cursor is the continuation
// cursor of the previous page; it is cleared before the arguments are
// fingerprinted, so every page of one search has the same fingerprint.
type SearchIn struct {
	Query  string `json:"query" jsonschema:"substring to look for"`
	Cursor string `json:"cursor,omitempty" jsonschema:"nextCursor of the previous page"`
}

// SearchOut is one page of results.
type SearchOut struct {
	Items      []string `json:"items"`
	NextCursor string   `json:"nextCursor,omitempty"`
}

// DeployIn is the input of the deploy tool.
type DeployIn struct {
	Service string `json:"service"`
	Version string `json:"version"`
}

// DeployOut is the result of the deploy tool.
type DeployOut struct {
	Status string `json:"status"`
	Plan   string `json:"plan,omitempty"`
}

// deployState is what the deploy tool remembers between its two rounds,
// held by the client in the requestState: the plan the user was shown. The
// handler writes and reads it as plain JSON; SecureRequestState seals it on
// the way out, so the client can read none of it (encrypted) and change
// none of it (authenticated), and opens it on the way in.
type deployState struct {
	Plan string `json:"plan"`
}

// app holds what the server is built from.
type app struct {
	cursors *ctokenmcp.Cursors
	codec   *ctoken.RequestStateCodec
	who     ctokenmcp.CallerFunc
	log     *slog.Logger
}

// newApp builds the helpers from one keyring: cursors signed for session,
// request states encrypted and bound to caller and tool. A fleet gives every
// instance the same keys and session. Rejections are logged to log (nil:
// discarded) with their reason, never the token.
func newApp(keys *ctoken.Keyring, session []byte, who ctokenmcp.CallerFunc, log *slog.Logger) (*app, error) {
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
	cursors, err := ctokenmcp.NewCursors(issuer, &ctokenmcp.CursorOptions{Caller: who, Logger: log})
	if err != nil {
		return nil, err
	}
	return &app{cursors: cursors, codec: codec, who: who, log: log}, nil
}

// newServer returns an MCP server with the search and deploy tools, whose
// requestState is sealed and opened in dispatch: one line secures every
// tool, prompt and resource that asks for input.
func (a *app) newServer() (*mcp.Server, error) {
	s := mcp.NewServer(&mcp.Implementation{Name: "ctoken-example", Version: "v0.1.0"}, nil)
	if err := ctokenmcp.SecureRequestState(s, a.codec, &ctokenmcp.StateOptions{Caller: a.who, Logger: a.log}); err != nil {
		return nil, err
	}
	mcp.AddTool(s, &mcp.Tool{Name: "search", Description: "Search the catalog, a page at a time."}, a.search)
	mcp.AddTool(s, &mcp.Tool{Name: "deploy", Description: "Deploy a service version after the user confirms."}, a.deploy)
	return s, nil
}

func (a *app) search(ctx context.Context, req *mcp.CallToolRequest, in SearchIn) (*mcp.CallToolResult, SearchOut, error) {
	bound := in
	bound.Cursor = "" // the cursor is not part of what it is bound to
	// Turn verifies the cursor (none: the first page, Page 0) and keeps
	// the scope, so that turn.Next binds the next cursor without
	// fingerprinting the arguments again.
	turn, err := a.cursors.Turn(ctx, req, bound, in.Cursor)
	if err != nil {
		return nil, SearchOut{}, err // a *jsonrpc.Error: -32602
	}
	p := turn.Payload
	var matches []string
	for _, item := range catalog {
		if strings.Contains(item, in.Query) {
			matches = append(matches, item)
		}
	}
	start := min(int(p.Page)*pageSize, len(matches))
	end := min(start+pageSize, len(matches))
	out := SearchOut{Items: matches[start:end]}
	if out.Items == nil {
		out.Items = []string{}
	}
	if end < len(matches) {
		if out.NextCursor, err = turn.Next(p.Page+1, nil); err != nil {
			return nil, SearchOut{}, err
		}
	}
	return nil, out, nil
}

// deploy asks the user to confirm a plan, then deploys it. It is written
// against plaintext requestState: behind SecureRequestState, the state it
// receives is one it returned itself, for this caller, this tool and these
// arguments, and not expired. A client that cannot be asked (before protocol
// 2026-07-28, without a way to elicit) gets JSON-RPC error -32021 from the
// middleware saying what it lacks.
func (a *app) deploy(ctx context.Context, req *mcp.CallToolRequest, in DeployIn) (*mcp.CallToolResult, DeployOut, error) {
	if req.Params.RequestState == "" {
		if len(req.Params.InputResponses) > 0 {
			return nil, DeployOut{}, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "inputResponses without requestState"}
		}
		// Round one: work out the plan, keep it in the state, and ask.
		plan := fmt.Sprintf("roll %s to %s on 3 instances", in.Service, in.Version)
		state, err := json.Marshal(deployState{Plan: plan})
		if err != nil {
			return nil, DeployOut{}, err
		}
		return &mcp.CallToolResult{
			InputRequests: mcp.InputRequestMap{"confirm": &mcp.ElicitParams{
				Message: "Confirm: " + plan + "?",
				RequestedSchema: map[string]any{
					"type":       "object",
					"properties": map[string]any{"confirm": map[string]any{"type": "boolean"}},
					"required":   []string{"confirm"},
				},
			}},
			RequestState: string(state),
		}, DeployOut{}, nil
	}
	// Round two: the plan comes from the state, not from the client.
	var st deployState
	if err := json.Unmarshal([]byte(req.Params.RequestState), &st); err != nil {
		return nil, DeployOut{}, fmt.Errorf("reading the sealed plan: %w", err)
	}
	answer, _ := req.Params.InputResponses["confirm"].(*mcp.ElicitResult)
	if answer == nil {
		return nil, DeployOut{}, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: `missing inputResponses["confirm"]`}
	}
	if answer.Action != "accept" || answer.Content["confirm"] != true {
		return nil, DeployOut{Status: "cancelled", Plan: st.Plan}, nil
	}
	return nil, DeployOut{Status: "deployed", Plan: st.Plan}, nil
}
