package redisstore

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestClaimAllocations pins what a first claim allocates on the caller's
// goroutine (context.Background, a client with ContextTimeoutEnabled, the
// policy probe on): measured 16, of which go-redis's pool check of the
// connection takes 3 (a bare SET through client.Do pays them too), its
// pipeline 2 more (errors.As on a nil error), the probe 5 (its command,
// the map of its reply and the map's two strings) and the store's
// deadline 3 (see timeoutCtx). The target is 12.
func TestClaimAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are not meaningful under -race")
	}
	srv := newServer(t)
	c := redis.NewClient(&redis.Options{Addr: srv.addr(), ContextTimeoutEnabled: true, MaxRetries: -1, DialerRetries: 1})
	t.Cleanup(func() { c.Close() })
	s := provisioned(t, c, Options{Prefix: "allocs:", RecheckInterval: time.Hour})
	if !s.dur.probing() {
		t.Fatal("the policy probe is off; want it on (the claim's common case)")
	}
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
	if allocs > 16 {
		t.Fatalf("%.1f allocations per first claim; want at most 16", allocs)
	}
}

// TestTimeoutCtx pins that the store's light deadline behaves as
// context.WithTimeout: it ends at its deadline with DeadlineExceeded, or
// when cancelled first with Canceled, and carries its parent's values.
func TestTimeoutCtx(t *testing.T) {
	type key struct{}
	parent := context.WithValue(context.Background(), key{}, "v")
	var c timeoutCtx
	ctx := c.start(parent, 20*time.Millisecond)
	if dl, ok := ctx.Deadline(); !ok || time.Until(dl) > 20*time.Millisecond {
		t.Fatalf("Deadline() = %v, %v; want within 20ms", dl, ok)
	}
	if ctx.Err() != nil || ctx.Value(key{}) != "v" {
		t.Fatalf("before the deadline: Err %v, value %v; want nil, v", ctx.Err(), ctx.Value(key{}))
	}
	<-ctx.Done()
	if err := ctx.Err(); err != context.DeadlineExceeded || context.Cause(ctx) != context.DeadlineExceeded {
		t.Fatalf("after the deadline: Err %v, Cause %v; want DeadlineExceeded", err, context.Cause(ctx))
	}
	c.cancel() // after the deadline: changes nothing
	if err := ctx.Err(); err != context.DeadlineExceeded {
		t.Fatalf("cancelled after the deadline: Err %v; want DeadlineExceeded", err)
	}

	var d timeoutCtx
	ctx = d.start(parent, time.Hour)
	d.cancel()
	select {
	case <-ctx.Done():
	default:
		t.Fatal("cancelled: Done not closed")
	}
	if err := ctx.Err(); err != context.Canceled {
		t.Fatalf("cancelled: Err %v; want Canceled", err)
	}
}
