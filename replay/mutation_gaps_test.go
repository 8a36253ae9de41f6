package replay_test

// Behaviours a mutation run (scripts/mutation.sh, issue 21) showed no other
// test pinned. Each test names the mutant it kills.

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ctoken/ctoken/internal/clocktest"
	"github.com/ctoken/ctoken/replay"
)

// Kills memory.go `err != nil || tok == 0` → `&&` in ConfirmLease: "0" is
// never a token the store hands out, so confirming with it is ErrLeaseLost
// even for an ID nobody holds, and it does not claim the ID.
func TestMemoryStoreConfirmWithTokenZeroIsLeaseLost(t *testing.T) {
	clk := clocktest.New()
	s := &replay.MemoryStore{Now: clk.Now}
	ctx := context.Background()
	until := clk.Now().Add(time.Hour)
	if err := s.ConfirmLease(ctx, "free", "0", until); !errors.Is(err, replay.ErrLeaseLost) {
		t.Fatalf("ConfirmLease(token 0) of a free ID = %v, want ErrLeaseLost", err)
	}
	if n := s.Len(); n != 0 {
		t.Fatalf("Len = %d after a refused confirm, want 0", n)
	}
	if first, err := s.Claim(ctx, "free", until); !first || err != nil {
		t.Fatalf("Claim after a refused confirm = %v, %v; want first", first, err)
	}
	// Under a live lease too.
	l, err := s.AcquireLease(ctx, "held", time.Minute)
	if err != nil || l.State != replay.LeaseAcquired {
		t.Fatal(l, err)
	}
	if err := s.ConfirmLease(ctx, "held", "0", until); !errors.Is(err, replay.ErrLeaseLost) {
		t.Fatalf("ConfirmLease(token 0) of a held ID = %v, want ErrLeaseLost", err)
	}
	if err := s.ConfirmLease(ctx, "held", l.Token, until); err != nil {
		t.Fatalf("the holder's confirm after a token-0 attempt: %v", err)
	}
}

// Kills memory.go leaseHeap.Less `<` negated (a max-heap): a lease that
// ended is dropped even while a lease that ends later is still live, so
// its ID can be leased again at once.
func TestMemoryStoreEndedLeaseIsFreeWhileALaterLeaseIsLive(t *testing.T) {
	clk := clocktest.New()
	s := &replay.MemoryStore{Now: clk.Now}
	ctx := context.Background()
	for _, l := range []struct {
		id string
		d  time.Duration
	}{{"short", time.Second}, {"long", time.Hour}, {"middle", time.Minute}} {
		if got, err := s.AcquireLease(ctx, l.id, l.d); err != nil || got.State != replay.LeaseAcquired {
			t.Fatalf("AcquireLease(%s) = %+v, %v", l.id, got, err)
		}
	}
	clk.Advance(2 * time.Second)
	if got, err := s.AcquireLease(ctx, "short", time.Second); err != nil || got.State != replay.LeaseAcquired {
		t.Fatalf("AcquireLease of an ended lease while later ones live = %+v, %v; want acquired", got, err)
	}
	if n := s.Len(); n != 3 {
		t.Fatalf("Len = %d, want 3 (the new short lease, middle, long)", n)
	}
	clk.Advance(2 * time.Minute)
	if got, err := s.AcquireLease(ctx, "middle", time.Second); err != nil || got.State != replay.LeaseAcquired {
		t.Fatalf("AcquireLease of the ended middle lease = %+v, %v; want acquired", got, err)
	}
	if got, err := s.AcquireLease(ctx, "long", time.Second); err != nil || got.State != replay.LeaseBusy || got.Wait <= 0 {
		t.Fatalf("AcquireLease of the live long lease = %+v, %v; want busy with a positive wait", got, err)
	}
}
