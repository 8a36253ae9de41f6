package ctokenmcpgo_test

import (
	"context"
	"fmt"
	"log"

	"github.com/ctoken/ctoken"
	ctokenmcpgo "github.com/ctoken/ctoken/mcpgo"
	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
)

// Every list cursor of a server sealed by ctoken, with one option: mcp-go
// pages as before, and a cursor works only for the caller (and session) it
// was handed to. Over streamable HTTP, name the caller with
// ctokenmcpgo.WithCaller in a server.WithHTTPContextFunc.
func ExampleSecureListCursors() {
	kr, _ := ctoken.NewKeyring(ctoken.RandomKey()) // random: this process only; a fleet shares ctoken.KeyringFromEnv
	issuer, _ := ctoken.NewCursorIssuer(ctoken.CursorConfig{Keys: kr, Seal: true})
	lists, err := ctokenmcpgo.SecureListCursors(issuer, nil)
	if err != nil {
		log.Fatal(err)
	}
	s := server.NewMCPServer("server", "v0", server.WithPaginationLimit(2), lists)
	for _, name := range []string{"alpha", "beta", "gamma"} {
		s.AddTool(mcp.NewTool(name), func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return mcp.NewToolResultText("ok"), nil
		})
	}

	ctx := ctokenmcpgo.WithCaller(context.Background(), "alice")
	c, err := client.NewInProcessClient(s)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	if err := c.Start(ctx); err != nil {
		log.Fatal(err)
	}
	init := mcp.InitializeRequest{}
	init.Params.ClientInfo = mcp.Implementation{Name: "client", Version: "v0"}
	if _, err := c.Initialize(ctx, init); err != nil {
		log.Fatal(err)
	}
	tools, err := c.ListTools(ctx, mcp.ListToolsRequest{}) // follows every cursor
	if err != nil {
		log.Fatal(err)
	}
	for _, t := range tools.Tools {
		fmt.Println(t.Name)
	}
	forged := mcp.ListToolsRequest{}
	forged.Params.Cursor = "forged"
	_, err = c.ListToolsByPage(ctx, forged)
	fmt.Println(err)
	// Output:
	// alpha
	// beta
	// gamma
	// invalid params: illegal base64 data at input byte 0
}
