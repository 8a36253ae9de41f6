package replaytest

import (
	"fmt"
	"testing"
	"time"

	"github.com/ctoken/ctoken/replay"
)

// RunForgetContract checks a store through the loss of everything it holds:
// it claims IDs, confirms deliveries and takes leases on a store from
// newStore, calls forget (which must make the store's backend lose all of
// it: FLUSHALL, a restart without persistence, a dropped table), and then,
// for as long as any of those entries could still be live, asks for each
// again, checking that none is ever reported first or acquired. Refusals
// (errors) are allowed; "first" is never.
//
// For a [replay.Bounded] store whose horizon is at most ForgetHorizonMax it
// also checks that service comes back: within the horizon after the loss
// (plus a second), a fresh ID is claimed first again. A store without a
// horizon is checked for two seconds after the loss.
//
// [replay.MemoryStore] is outside this contract: it lives in the process,
// so it cannot lose its entries and keep serving; a restarted process
// starts with an empty store and accepts everything again.
func RunForgetContract(t *testing.T, newStore func(t *testing.T) Store, forget func(t *testing.T)) {
	s := newStore(t)
	horizon, bounded := horizonOf(s)
	life := time.Hour
	if bounded {
		life = insideHorizon(horizon)
	}
	until := time.Now().Add(life)
	const n = 16
	claimed, done, leased := ids("forget-claimed", n), ids("forget-done", n), ids("forget-leased", n)
	for i := range n {
		if first, err := s.Claim(ctx(), claimed[i], until); !first || err != nil {
			t.Fatalf("Claim before the loss = %v, %v; want first", first, err)
		}
		l := acquire(t, s, done[i], min(life, time.Minute), replay.LeaseAcquired)
		confirm(t, s, done[i], l.Token, until)
		acquire(t, s, leased[i], life, replay.LeaseAcquired)
	}

	forget(t)
	lost := time.Now()

	check := until
	if !bounded {
		check = lost.Add(2 * time.Second)
	}
	refusals := 0
	for round := 0; time.Now().Before(check); round++ {
		for i := range n {
			first, err := s.Claim(ctx(), claimed[i], until)
			if first {
				t.Fatalf("round %d: a claimed ID was accepted again after the store lost its data (err %v)", round, err)
			}
			if err != nil {
				refusals++
			}
			for _, id := range []string{done[i], leased[i]} {
				l, err := s.AcquireLease(ctx(), id, time.Second)
				if err == nil && l.State == replay.LeaseAcquired {
					t.Fatalf("round %d: %s was acquired again after the store lost its data", round, id)
				}
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("%d refused claims while the lost entries could be live", refusals)

	if !bounded || horizon > ForgetHorizonMax {
		return
	}
	// Service comes back once everything claimed before the loss has
	// expired.
	back := lost.Add(horizon + time.Second)
	for i := 0; ; i++ {
		id := fmt.Sprint("forget-after-", i)
		first, err := s.Claim(ctx(), id, time.Now().Add(insideHorizon(horizon)))
		if first && err == nil {
			return
		}
		if time.Now().After(back) {
			t.Fatalf("a fresh ID is still refused %v after the loss (horizon %v): %v, %v", time.Since(lost), horizon, first, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// ForgetHorizonMax is the longest horizon for which [RunForgetContract]
// waits to see service come back.
const ForgetHorizonMax = 10 * time.Second

func ids(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprint(prefix, "-", i)
	}
	return out
}
