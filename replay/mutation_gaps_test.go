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
