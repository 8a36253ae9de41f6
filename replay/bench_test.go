package replay

import (
	"context"
	"strconv"
	"testing"
	"time"
)

func BenchmarkMemoryStoreClaim(b *testing.B) {
	// Steady state: every claim lives 1 ms of a clock that advances 1 µs per
	// claim, so about 1000 entries are live and one expires per claim.
	now := time.Unix(1_700_000_000, 0)
	s := &MemoryStore{Now: func() time.Time { return now }}
	ctx := context.Background()
	i := 0
	for b.Loop() {
		now = now.Add(time.Microsecond)
		if _, err := s.Claim(ctx, strconv.Itoa(i), now.Add(time.Millisecond)); err != nil {
			b.Fatal(err)
		}
		i++
	}
}
