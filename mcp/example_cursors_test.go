package ctokenmcp_test

import (
	"context"
	"fmt"
	"log"

	"github.com/ctoken/ctoken"
	ctokenmcp "github.com/ctoken/ctoken/mcp"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

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
