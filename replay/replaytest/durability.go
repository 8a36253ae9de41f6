package replaytest

import (
	"fmt"
	"testing"
	"time"

	"github.com/ctoken/ctoken/replay"
)

// RunDurabilityContract checks a store whose durability requirement stops
// being met (a replica it must wait for is stopped, a synchronous standby
// is gone): between breakIt and restore, every claim, lease acquisition and
// confirmation must report an error — never first, never acquired, never
// confirmed — although the write may have been applied where the store
// could still reach. After restore (once the store serves again), the
// caller's retries of those calls, made with the same IDs as after an
// unknown outcome, must not make any ID first twice or acquired twice.
//
// s must be a working store (a claim before breakIt succeeds). breakIt and
// restore return when the fault is in place and when it is repaired; the
// contract waits up to ten seconds for service to come back.
func RunDurabilityContract(t *testing.T, s Store, breakIt, restore func(t *testing.T)) {
	until := time.Now().Add(time.Minute)
	if first, err := s.Claim(ctx(), "durable-before", until); !first || err != nil {
		t.Fatalf("Claim with durability met = %v, %v; want first", first, err)
	}
	pending := acquire(t, s, "durable-confirm", time.Minute, replay.LeaseAcquired)

	breakIt(t)
	const n = 8
	claimed, leased := ids("durable-claim", n), ids("durable-lease", n)
	firsts := map[string]int{}
	acquired := map[string]int{}
	for i := range n {
		first, err := s.Claim(ctx(), claimed[i], until)
		if first || err == nil {
			t.Fatalf("Claim without durability = %v, %v; want an error", first, err)
		}
		l, err := s.AcquireLease(ctx(), leased[i], time.Minute)
		if err == nil || l.State != 0 || l.Token != "" {
			t.Fatalf("AcquireLease without durability = %+v, %v; want an error and nothing", l, err)
		}
	}
	if err := s.ConfirmLease(ctx(), "durable-confirm", pending.Token, until); err == nil {
		t.Fatal("ConfirmLease without durability succeeded; want an error")
	}

	restore(t)
	for deadline, i := time.Now().Add(10*time.Second), 0; ; i++ {
		first, err := s.Claim(ctx(), fmt.Sprint("durable-after-", i), until)
		if first && err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("store does not serve 10s after the fault was repaired: %v, %v", first, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// The caller resends what had an unknown outcome, twice.
	for range 2 {
		for i := range n {
			first, err := s.Claim(ctx(), claimed[i], until)
			if first && err == nil {
				firsts[claimed[i]]++
			}
			l, err := s.AcquireLease(ctx(), leased[i], time.Minute)
			if err == nil && l.State == replay.LeaseAcquired {
				acquired[leased[i]]++
			}
		}
	}
	for id, k := range firsts {
		if k > 1 {
			t.Fatalf("%s was first %d times after an unknown outcome", id, k)
		}
	}
	for id, k := range acquired {
		if k > 1 {
			t.Fatalf("%s was acquired %d times after an unknown outcome", id, k)
		}
	}
	if err := s.ConfirmLease(ctx(), "durable-confirm", pending.Token, until); err != nil {
		t.Fatalf("ConfirmLease retried after the repair: %v", err)
	}
	acquire(t, s, "durable-confirm", time.Minute, replay.LeaseDone)
}
