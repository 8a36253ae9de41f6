package replay_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ctoken/ctoken/internal/clocktest"
	"github.com/ctoken/ctoken/replay"
)

// TestMemoryStoreLease pins MemoryStore's leases beyond the shared contract.
func TestMemoryStoreLease(t *testing.T) {
	t.Run("refuses when full and keeps live entries", func(t *testing.T) {
		clk := clocktest.New()
		s := &replay.MemoryStore{Max: 2, Now: clk.Now}
		ctx := context.Background()
		a, err := s.AcquireLease(ctx, "a", time.Minute)
		if err != nil || a.State != replay.LeaseAcquired {
			t.Fatal(a, err)
		}
		if first, err := s.Claim(ctx, "b", clk.Now().Add(time.Hour)); !first || err != nil {
			t.Fatal(first, err)
		}
		if l, err := s.AcquireLease(ctx, "c", time.Minute); !errors.Is(err, replay.ErrFull) || l.State != 0 {
			t.Fatalf("AcquireLease on a full store = %+v, %v; want ErrFull", l, err)
		}
		// Confirming a live lease needs no room.
		if err := s.ConfirmLease(ctx, "a", a.Token, clk.Now().Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
		for _, id := range []string{"a", "b"} {
			if l, err := s.AcquireLease(ctx, id, time.Minute); err != nil || l.State != replay.LeaseDone {
				t.Fatalf("%s on a full store = %+v, %v; want done", id, l, err)
			}
		}
	})

	t.Run("confirm sent again after nil is lease lost", func(t *testing.T) {
		clk := clocktest.New()
		s := &replay.MemoryStore{Now: clk.Now}
		ctx := context.Background()
		a, err := s.AcquireLease(ctx, "a", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		until := clk.Now().Add(time.Hour)
		if err := s.ConfirmLease(ctx, "a", a.Token, until); err != nil {
			t.Fatal(err)
		}
		if err := s.ConfirmLease(ctx, "a", a.Token, until); !errors.Is(err, replay.ErrLeaseLost) {
			t.Fatalf("second ConfirmLease with the same token: %v, want ErrLeaseLost", err)
		}
		if l, err := s.AcquireLease(ctx, "a", time.Minute); err != nil || l.State != replay.LeaseDone {
			t.Fatalf("after the second confirmation: %+v, %v; want done", l, err)
		}
	})

	t.Run("confirm after lease ended needs room", func(t *testing.T) {
		clk := clocktest.New()
		s := &replay.MemoryStore{Max: 1, Now: clk.Now}
		ctx := context.Background()
		a, _ := s.AcquireLease(ctx, "a", time.Second)
		clk.Advance(2 * time.Second)
		if first, err := s.Claim(ctx, "b", clk.Now().Add(time.Hour)); !first || err != nil {
			t.Fatal(first, err)
		}
		if err := s.ConfirmLease(ctx, "a", a.Token, clk.Now().Add(time.Hour)); !errors.Is(err, replay.ErrFull) {
			t.Fatalf("ConfirmLease of an ended lease on a full store: %v, want ErrFull", err)
		}
	})

	t.Run("confirm refuses past until", func(t *testing.T) {
		clk := clocktest.New()
		s := &replay.MemoryStore{Now: clk.Now}
		ctx := context.Background()
		a, _ := s.AcquireLease(ctx, "a", time.Minute)
		if err := s.ConfirmLease(ctx, "a", a.Token, clk.Now()); !errors.Is(err, replay.ErrExpired) {
			t.Fatalf("ConfirmLease until now: %v, want ErrExpired", err)
		}
		if l, _ := s.AcquireLease(ctx, "a", time.Minute); l.State != replay.LeaseBusy {
			t.Fatalf("after a refused confirmation: %v, want the lease still busy", l.State)
		}
	})

	t.Run("ends by the store's clock", func(t *testing.T) {
		clk := clocktest.New()
		s := &replay.MemoryStore{Now: clk.Now}
		ctx := context.Background()
		s.AcquireLease(ctx, "a", time.Minute)
		clk.Advance(time.Minute - time.Nanosecond)
		if l, _ := s.AcquireLease(ctx, "a", time.Minute); l.State != replay.LeaseBusy || l.Wait != time.Nanosecond {
			t.Fatalf("before the lease ends: %+v, want busy with 1ns left", l)
		}
		clk.Advance(time.Nanosecond)
		if l, _ := s.AcquireLease(ctx, "a", time.Minute); l.State != replay.LeaseAcquired {
			t.Fatalf("when the lease ends: %v, want acquired", l.State)
		}
	})

	t.Run("refuses cancelled context and negative max", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		s := replay.NewMemoryStore(10)
		if _, err := s.AcquireLease(ctx, "a", time.Minute); !errors.Is(err, context.Canceled) {
			t.Fatalf("AcquireLease with a cancelled context: %v", err)
		}
		if err := s.ConfirmLease(ctx, "a", "1", time.Now().Add(time.Hour)); !errors.Is(err, context.Canceled) {
			t.Fatalf("ConfirmLease with a cancelled context: %v", err)
		}
		if err := s.ReleaseLease(ctx, "a", "1"); !errors.Is(err, context.Canceled) {
			t.Fatalf("ReleaseLease with a cancelled context: %v", err)
		}
		bad := replay.NewMemoryStore(-1)
		bg := context.Background()
		if _, err := bad.AcquireLease(bg, "a", time.Minute); !errors.Is(err, replay.ErrConfig) {
			t.Fatalf("AcquireLease with Max -1: %v", err)
		}
		if err := bad.ConfirmLease(bg, "a", "1", time.Now().Add(time.Hour)); !errors.Is(err, replay.ErrConfig) {
			t.Fatalf("ConfirmLease with Max -1: %v", err)
		}
		if err := bad.ReleaseLease(bg, "a", "1"); !errors.Is(err, replay.ErrConfig) {
			t.Fatalf("ReleaseLease with Max -1: %v", err)
		}
	})

	// Kills memory.go `err != nil || tok == 0` → `&&` in ConfirmLease: "0" is
	// never a token the store hands out, so confirming with it is ErrLeaseLost
	// even for an ID nobody holds, and it does not claim the ID.
	t.Run("confirm with token zero is lease lost", func(t *testing.T) {
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
	})

	// Kills memory.go leaseHeap.Less `<` negated (a max-heap): a lease that
	// ended is dropped even while a lease that ends later is still live, so
	// its ID can be leased again at once.
	t.Run("ended lease is free while a later lease is live", func(t *testing.T) {
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
	})
}
