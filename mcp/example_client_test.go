package ctokenmcp_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/ctoken/ctoken"
	ctokenmcp "github.com/ctoken/ctoken/mcp"
	"github.com/ctoken/ctoken/mcptoken"
	"github.com/ctoken/ctoken/replay"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// A client calls an idempotent deploy tool as one logical call: every
// attempt carries the same idempotency key, so the deploy runs once
// however many times the call is sent.
func ExampleCallTool() {
	// The server: a deploy tool made idempotent by ctoken.
	kr, _ := ctoken.NewKeyring(ctoken.RandomKey())
	idem, err := ctokenmcp.NewIdempotency(ctokenmcp.IdempotencyOptions{
		IdempotencyConfig: mcptoken.IdempotencyConfig{Keys: kr, Store: replay.NewMemoryStore(0), KeyFromMeta: true},
		Caller:            ctokenmcp.FixedCaller("alice"),
	})
	if err != nil {
		log.Fatal(err)
	}
	deploys := 0
	s := mcp.NewServer(&mcp.Implementation{Name: "server", Version: "v0"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "deploy"}, ctokenmcp.WrapFor(idem, func(_ context.Context, _ *mcp.CallToolRequest, in DeployIn) (*mcp.CallToolResult, DeployOut, error) {
		deploys++
		return nil, DeployOut{Deployed: fmt.Sprintf("%s (deploy %d)", in.Service, deploys)}, nil
	}))

	// The client.
	cs := connect(s, nil)
	defer cs.Close()
	params := &mcp.CallToolParams{Name: "deploy", Arguments: DeployIn{Service: "api"}}
	// Empty Key: a fresh random key, the same on every attempt. Here the
	// key is the application's, so that the second call is a retry of the
	// first (as a call after ErrOutcomeUnknown is, with its RetryKey).
	opts := ctokenmcp.CallOptions{Key: "deploy-api-2026-11-25"}
	for range 2 {
		res, err := ctokenmcp.CallTool(context.Background(), cs, params, opts)
		if errors.Is(err, ctokenmcp.ErrOutcomeUnknown) {
			key, _ := ctokenmcp.RetryKey(err)
			_ = key // keep it: call again later with CallOptions{Key: key}
		}
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(res.StructuredContent.(map[string]any)["deployed"])
	}
	fmt.Println("deploys:", deploys)
	// Output:
	// api (deploy 1)
	// api (deploy 1)
	// deploys: 1
}
