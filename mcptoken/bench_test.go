package mcptoken

import (
	"bytes"
	"context"
	"strconv"
	"testing"

	"github.com/ctoken/ctoken/replay"
)

// BenchmarkIdempotencyCall is the engine's cost on a memory store: a
// first call (lease, fingerprint, seal, record) and a replay (open),
// beside the floor, the same tool run without it.
func BenchmarkIdempotencyCall(b *testing.B) {
	result := []byte(`{"content":[{"type":"text","text":"paid 5 to bob"}],"structuredContent":{"payment":1}}`)
	run := func(context.Context) ([]byte, error) { return result, nil }
	args := func(i int) []byte { return []byte(`{"key":"k` + strconv.Itoa(i) + `","to":"bob","amount":5}`) }
	b.Run("floor", func(b *testing.B) {
		for b.Loop() {
			if _, err := run(context.Background()); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("first", func(b *testing.B) {
		i := testIdempotency(b, &bytes.Buffer{}, func(c *IdempotencyConfig) { c.Store = replay.NewMemoryStore(1 << 22) })
		n := 0
		for b.Loop() {
			n++
			if _, err := i.Call(context.Background(), "alice", "pay", args(n), nil, run); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("replay", func(b *testing.B) {
		i := testIdempotency(b, &bytes.Buffer{}, nil)
		if _, err := i.Call(context.Background(), "alice", "pay", args(0), nil, run); err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			if _, err := i.Call(context.Background(), "alice", "pay", args(0), nil, run); err != nil {
				b.Fatal(err)
			}
		}
	})
}
