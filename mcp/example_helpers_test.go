package ctokenmcp_test

import (
	"context"
	"log"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// What the Examples of this package share; each Example is in the
// example_<feature>_test.go named after what it shows.

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

// DeployIn and DeployOut are the deploy tool's arguments and result, in
// ExampleStates and ExampleSecureRequestState.
type DeployIn struct {
	Service string `json:"service"`
}

type DeployOut struct {
	Deployed string `json:"deployed"`
}
