package replay_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ctoken/ctoken/internal/clocktest"
	"github.com/ctoken/ctoken/replay"
	"github.com/ctoken/ctoken/replay/replaytest"
)

func TestMemoryStoreLeaseContract(t *testing.T) {
	replaytest.RunLeaseContract(t, func(*testing.T) replaytest.Store { return replay.NewMemoryStore(1000) })
}

func TestMemoryStoreLeaseRefusesWhenFullAndKeepsLiveEntries(t *testing.T) {
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
}

func TestMemoryStoreConfirmAfterLeaseEndedNeedsRoom(t *testing.T) {
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
}

func TestMemoryStoreConfirmRefusesPastUntil(t *testing.T) {
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
}

func TestMemoryStoreLeaseEndsByTheStoresClock(t *testing.T) {
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
}

func TestMemoryStoreLeaseRefusesCancelledContextAndNegativeMax(t *testing.T) {
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
}

func TestLeaseStateString(t *testing.T) {
	for s, want := range map[replay.LeaseState]string{
		replay.LeaseAcquired: "acquired", replay.LeaseBusy: "busy", replay.LeaseDone: "done", 0: "invalid",
	} {
		if s.String() != want {
			t.Errorf("%d.String() = %q, want %q", s, s.String(), want)
		}
	}
}
