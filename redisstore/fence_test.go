package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ctoken/ctoken/replay"
	"github.com/ctoken/ctoken/replay/replaytest"
)

// events records a store's events.
type events struct {
	mu  sync.Mutex
	all []Event
}

func (e *events) observe(ev Event) {
	e.mu.Lock()
	e.all = append(e.all, ev)
	e.mu.Unlock()
}

func (e *events) count(k EventKind) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := 0
	for _, ev := range e.all {
		if ev.Kind == k {
			n++
		}
	}
	return n
}

func TestForgetContractFlushAll(t *testing.T) {
	t.Parallel()
	srv := newServer(t)
	c := srv.client()
	replaytest.RunForgetContract(t, func(t *testing.T) replaytest.Store {
		return provisioned(t, c, Options{Prefix: uniquePrefix(t, c), Horizon: 2 * time.Second})
	}, func(t *testing.T) {
		if err := c.FlushAll(context.Background()).Err(); err != nil {
			t.Fatal(err)
		}
	})
}

func TestForgetContractRestartWithoutPersistence(t *testing.T) {
	t.Parallel()
	srv := newServer(t)
	c := srv.client()
	replaytest.RunForgetContract(t, func(t *testing.T) replaytest.Store {
		return provisioned(t, c, Options{Prefix: "forget-restart:", Horizon: 2 * time.Second})
	}, func(t *testing.T) { srv.restart(syscall.SIGKILL) })
}

func TestClaimRefusesWhileFencedThenServesAfterHorizon(t *testing.T) {
	t.Parallel()
	c := newTestClient(t)
	var ev events
	const horizon = 1500 * time.Millisecond
	s, err := New(c, Options{Prefix: uniquePrefix(t, c), Horizon: horizon, Observer: ev.observe})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	// Never provisioned: the first call of a shard finds no marker, fences
	// the shard and refuses; so does every call until the fence opens.
	start := time.Now()
	first, err := s.Claim(ctx, "a", time.Now().Add(time.Second))
	if first || !errors.Is(err, ErrFenced) || !errors.Is(err, ErrUnavailable) {
		t.Fatalf("first call on an unprovisioned key space = %v, %v; want ErrFenced", first, err)
	}
	if Reason(err) != whyFenceRaised {
		t.Fatalf("Reason = %q, want %q", Reason(err), whyFenceRaised)
	}
	if strings.Contains(err.Error(), `"a"`) {
		t.Fatalf("error echoes the id: %v", err)
	}
	for _, call := range []func() error{
		func() error { _, err := s.Claim(ctx, "a", time.Now().Add(time.Second)); return err },
		func() error { _, err := s.AcquireLease(ctx, "a", time.Second); return err },
		func() error {
			return s.ConfirmLease(ctx, "a", "0123456789abcdef0123456789abcdef", time.Now().Add(time.Second))
		},
	} {
		if err := call(); !errors.Is(err, ErrFenced) || Reason(err) != whyFenced {
			if time.Since(start) < horizon-200*time.Millisecond {
				t.Fatalf("call while fenced = %v; want ErrFenced (%q)", err, whyFenced)
			}
		}
	}
	if n := ev.count(EventFenceRaised); n != 1 {
		t.Fatalf("%d fence_raised events, want 1", n)
	}
	if ev.count(EventFenced) == 0 {
		t.Fatal("no fenced event for the refusals")
	}
	// After one horizon by Redis's clock the shard opens by itself.
	time.Sleep(time.Until(start.Add(horizon + 100*time.Millisecond)))
	if first, err := s.Claim(ctx, "a", time.Now().Add(time.Second)); !first || err != nil {
		t.Fatalf("claim after the fence = %v, %v; want first", first, err)
	}
}

func TestProvisionOpensOnlyANewKeySpace(t *testing.T) {
	c := newTestClient(t)
	prefix := uniquePrefix(t, c)
	s, err := New(c, Options{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if n, err := s.Provision(ctx); n != Shards || err != nil {
		t.Fatalf("Provision of a new key space = %d, %v; want %d, nil", n, err, Shards)
	}
	if n, err := s.Provision(ctx); n != 0 || err != nil {
		t.Fatalf("Provision again = %d, %v; want 0, nil", n, err)
	}
	if first, err := s.Claim(ctx, "x", time.Now().Add(time.Minute)); !first || err != nil {
		t.Fatalf("claim after Provision = %v, %v", first, err)
	}
	// One shard loses its marker (a partial loss): Provision refuses to
	// reopen it, and that shard alone is fenced.
	lostID, otherID := "x", ""
	for i := 0; otherID == ""; i++ {
		if id := fmt.Sprint("other-", i); shardOf(id) != shardOf(lostID) {
			otherID = id
		}
	}
	marker, _, _ := s.keys(lostID)
	if err := c.Del(ctx, marker).Err(); err != nil {
		t.Fatal(err)
	}
	if n, err := s.Provision(ctx); n != 0 || !errors.Is(err, ErrConfig) {
		t.Fatalf("Provision with one marker missing = %d, %v; want 0, ErrConfig", n, err)
	}
	if first, err := s.Claim(ctx, lostID, time.Now().Add(time.Minute)); first || !errors.Is(err, ErrFenced) {
		t.Fatalf("claim on the shard that lost its marker = %v, %v; want ErrFenced", first, err)
	}
	if first, err := s.Claim(ctx, otherID, time.Now().Add(time.Minute)); !first || err != nil {
		t.Fatalf("claim on another shard = %v, %v; want first", first, err)
	}
}

func TestUnknownMarkerValueRefuses(t *testing.T) {
	s, c := newTestStore(t)
	marker, _, _ := s.keys("m")
	if err := c.Set(context.Background(), marker, "garbage", 0).Err(); err != nil {
		t.Fatal(err)
	}
	first, err := s.Claim(context.Background(), "m", time.Now().Add(time.Minute))
	if first || !errors.Is(err, ErrUnavailable) || Reason(err) != whyBadMarker {
		t.Fatalf("claim with a corrupt marker = %v, %v; want ErrUnavailable (%q)", first, err, whyBadMarker)
	}
}

func TestClaimsBeyondTheHorizonAreRefused(t *testing.T) {
	c := newTestClient(t)
	s := provisioned(t, c, Options{Prefix: uniquePrefix(t, c), Horizon: time.Hour})
	ctx := context.Background()
	far := time.Now().Add(time.Hour + time.Minute)
	if first, err := s.Claim(ctx, "far", far); first || !errors.Is(err, ErrInvalidClaim) || Reason(err) != whyHorizon {
		t.Fatalf("claim past the horizon = %v, %v; want ErrInvalidClaim (%q)", first, err, whyHorizon)
	}
	if n, err := c.Exists(ctx, s.key("far")).Result(); n != 0 || err != nil {
		t.Fatalf("a refused claim wrote its key (%d, %v)", n, err)
	}
	if _, err := s.AcquireLease(ctx, "far", time.Hour+time.Second); !errors.Is(err, ErrInvalidClaim) || Reason(err) != whyLeaseLong {
		t.Fatalf("lease past the horizon: %v", err)
	}
	l, err := s.AcquireLease(ctx, "far", time.Minute)
	if err != nil || l.State != replay.LeaseAcquired {
		t.Fatal(l, err)
	}
	if err := s.ConfirmLease(ctx, "far", l.Token, far); !errors.Is(err, ErrInvalidClaim) {
		t.Fatalf("confirm past the horizon: %v", err)
	}
	// The script checks the horizon by Redis's clock too: an instance
	// whose clock runs ahead cannot stretch it.
	ahead := provisioned(t, c, Options{Prefix: s.Prefix(), Horizon: time.Hour,
		Now: func() time.Time { return time.Now().Add(30 * time.Minute) }})
	if first, err := ahead.Claim(ctx, "far", time.Now().Add(80*time.Minute)); first || !errors.Is(err, ErrInvalidClaim) || Reason(err) != whyHorizon {
		t.Fatalf("claim past Redis's horizon from an instance ahead = %v, %v; want ErrInvalidClaim", first, err)
	}
	if first, err := ahead.Claim(ctx, "near", time.Now().Add(40*time.Minute)); !first || err != nil {
		t.Fatalf("claim within the horizon from an instance ahead = %v, %v; want first", first, err)
	}
}
