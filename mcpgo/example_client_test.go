package ctokenmcpgo_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/ctoken/ctoken"
	ctokenmcpgo "github.com/ctoken/ctoken/mcpgo"
	"github.com/ctoken/ctoken/mcptoken"
	"github.com/ctoken/ctoken/replay"
	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
)

// A client calls an idempotent deploy tool as one logical call: every
// attempt carries the same idempotency key, so the deploy runs once
// however many times the call is sent.
func ExampleCallTool() {
	// The server: a deploy tool made idempotent by ctoken.
	kr, _ := ctoken.NewKeyring(ctoken.RandomKey())
	idem, err := ctokenmcpgo.NewIdempotency(ctokenmcpgo.IdempotencyOptions{
		IdempotencyConfig: mcptoken.IdempotencyConfig{Keys: kr, Store: replay.NewMemoryStore(0), KeyFromMeta: true},
		Caller:            ctokenmcpgo.FixedCaller("alice"),
	})
	if err != nil {
		log.Fatal(err)
	}
	deploys := 0
	s := server.NewMCPServer("server", "v0")
	s.AddTool(mcp.NewTool("deploy", mcp.WithString("service", mcp.Required())), idem.Wrap(func(_ context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		deploys++
		return mcp.NewToolResultText(fmt.Sprintf("%s (deploy %d)", req.GetString("service", ""), deploys)), nil
	}))

	// The client.
	ctx := context.Background()
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
	req := mcp.CallToolRequest{}
	req.Params.Name = "deploy"
	req.Params.Arguments = map[string]any{"service": "api"}
	// Empty Key: a fresh random key, the same on every attempt. Here the
	// key is the application's, so that the second call is a retry of the
	// first (as a call after ErrOutcomeUnknown is, with its RetryKey).
	opts := ctokenmcpgo.CallOptions{Key: "deploy-api-2026-11-25"}
	for range 2 {
		res, err := ctokenmcpgo.CallTool(ctx, c, req, opts)
		if errors.Is(err, ctokenmcpgo.ErrOutcomeUnknown) {
			key, _ := ctokenmcpgo.RetryKey(err)
			_ = key // keep it: call again later with CallOptions{Key: key}
		}
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(res.Content[0].(mcp.TextContent).Text)
	}
	fmt.Println("deploys:", deploys)
	// Output:
	// api (deploy 1)
	// api (deploy 1)
	// deploys: 1
}
