package redisstore

import (
	"context"
	"strconv"
	"testing"
	"time"
)

// TestClaimAllocations pins what a first claim allocates on the caller's
// goroutine (context.Background, a client with ContextTimeoutEnabled, no
// Durability: one EVALSHA, no pipeline): measured 10, of which go-redis's
// pool check of the connection takes 3 (a bare SET through client.Do pays
// them too) and the store's deadline 5 (context.WithTimeout). The target
// is 12.
func TestClaimAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are not meaningful under -race")
	}
	c := newServer(t).client()
	s := provisioned(t, c, Options{Prefix: "allocs:", RecheckInterval: time.Hour})
	// The fewest of three rounds: AllocsPerRun counts the whole process's
	// allocations, and other tests' stores may check their servers
	// meanwhile.
	const runs, rounds = 100, 3
	ids := make([]string, rounds*(runs+1))
	for i := range ids {
		ids[i] = "id-" + strconv.Itoa(i)
	}
	ctx := context.Background()
	until := time.Now().Add(time.Hour)
	n := 0
	allocs := float64(1 << 20)
	for range rounds {
		allocs = min(allocs, testing.AllocsPerRun(runs, func() {
			first, err := s.Claim(ctx, ids[n], until)
			n++
			if err != nil || !first {
				t.Fatalf("claim = %v, %v; want first", first, err)
			}
		}))
	}
	t.Logf("%.1f allocations per first claim", allocs)
	if allocs > 10 {
		t.Fatalf("%.1f allocations per first claim; want at most 10", allocs)
	}
}
