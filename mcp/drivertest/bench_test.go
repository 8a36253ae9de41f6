package drivertest

// An idempotent tool call against the same tool without it, through
// go-sdk's client over in-memory transports (so that the store's cost is
// not hidden in HTTP's), on the memory store and on PostgreSQL; the plain
// tool is the floor, measured in the same run. On PostgreSQL the tool
// writes one row in every mode, so the floor holds the tool's own commit.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"testing"

	ctokenmcp "github.com/ctoken/ctoken/mcp"
	"github.com/ctoken/ctoken/mcptoken"
	"github.com/ctoken/ctoken/pgstore"
	"github.com/ctoken/ctoken/replay"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func BenchmarkIdempotentToolCall(b *testing.B) {
	type mode struct {
		name          string
		idempotent    bool
		transactional bool
	}
	for _, st := range []string{"memory", "postgres"} {
		modes := []mode{{"plain", false, false}, {"idempotent", true, false}}
		if st == "postgres" {
			modes = append(modes, mode{"transactional", true, true})
		}
		for _, m := range modes {
			b.Run(st+"/"+m.name, func(b *testing.B) {
				var store replay.Recorder = replay.NewMemoryStore(1 << 20)
				effect := func(context.Context) error { return nil }
				if st == "postgres" {
					pool := pgPool(b)
					store = pgStore(b, pool)
					r := make([]byte, 6)
					rand.Read(r)
					table := "mcp_bench_" + hex.EncodeToString(r)
					if _, err := pool.Exec(context.Background(), "create table "+table+" (amount int not null)"); err != nil {
						b.Fatal(err)
					}
					b.Cleanup(func() { pool.Exec(context.Background(), "drop table "+table) })
					effect = func(ctx context.Context) error {
						if tx, err := pgstore.TxFrom(ctx); err == nil {
							_, err = tx.Exec(ctx, "insert into "+table+" values (5)")
							return err
						}
						_, err := pool.Exec(ctx, "insert into "+table+" values (5)")
						return err
					}
				}
				handler := func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
					if err := effect(ctx); err != nil {
						return nil, err
					}
					return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "paid"}}}, nil
				}
				if m.idempotent {
					idem, err := ctokenmcp.NewIdempotency(ctokenmcp.IdempotencyOptions{
						IdempotencyConfig: mcptoken.IdempotencyConfig{Keys: idemKeys, Store: store, KeyArgument: "key", Transactional: m.transactional},
						Caller:            ctokenmcp.FixedCaller("alice"),
					})
					if err != nil {
						b.Fatal(err)
					}
					handler = idem.Wrap(handler)
				}
				s := mcp.NewServer(&mcp.Implementation{Name: "payer", Version: "v0"}, nil)
				s.AddTool(&mcp.Tool{Name: "pay", InputSchema: json.RawMessage(`{"type":"object"}`)}, handler)
				st, ct := mcp.NewInMemoryTransports()
				ss, err := s.Connect(context.Background(), st, nil)
				if err != nil {
					b.Fatal(err)
				}
				defer ss.Close()
				cs, err := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "v0"}, nil).Connect(context.Background(), ct, nil)
				if err != nil {
					b.Fatal(err)
				}
				defer cs.Close()
				prefix, i := uniquePrefix(), 0 // a fresh key per call, in every run
				for b.Loop() {
					i++
					if _, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "pay", Arguments: map[string]any{"key": fmt.Sprint(prefix, i), "amount": 5}}); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
