package ctokenmcp_test

import (
	"context"
	"fmt"
	"log"

	"github.com/ctoken/ctoken"
	ctokenmcp "github.com/ctoken/ctoken/mcp"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

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

	ctx := context.Background()
	st, ct := mcp.NewInMemoryTransports() // in memory here; a real server serves HTTP or stdio
	if _, err := s.Connect(ctx, st, nil); err != nil {
		log.Fatal(err)
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "client", Version: "v0"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer cs.Close()
	for p, err := range cs.Prompts(ctx, nil) { // follows every cursor
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(p.Name)
	}
	_, err = cs.ListPrompts(ctx, &mcp.ListPromptsParams{Cursor: "forged"})
	fmt.Println(err, ctokenmcp.TokenErrorCode(err))
	// Output:
	// alpha
	// beta
	// gamma
	// calling "prompts/list": invalid cursor 1021
}
