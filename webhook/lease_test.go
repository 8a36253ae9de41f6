package webhook

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/ctoken/ctoken/replay"
)

// timingStore is a MemoryStore that records, for each ConfirmLease and
// ReleaseLease call, when it came and its context's deadline; while
// failing is set ConfirmLease fails without asking the MemoryStore.
type timingStore struct {
	*replay.MemoryStore
	failing bool

	mu               sync.Mutex
	confirmAt        []time.Time
	confirmDeadlines []time.Time
	releaseDeadlines []time.Time
}

func deadlineOf(ctx context.Context) time.Time {
	d, ok := ctx.Deadline()
	if !ok {
		return time.Time{}
	}
	return d
}

func (s *timingStore) ConfirmLease(ctx context.Context, id, token string, until time.Time) error {
	s.mu.Lock()
	s.confirmAt = append(s.confirmAt, time.Now())
	s.confirmDeadlines = append(s.confirmDeadlines, deadlineOf(ctx))
	failing := s.failing
	s.mu.Unlock()
	if failing {
		return errStoreDown
	}
	return s.MemoryStore.ConfirmLease(ctx, id, token, until)
}

func (s *timingStore) ReleaseLease(ctx context.Context, id, token string) error {
	s.mu.Lock()
	s.releaseDeadlines = append(s.releaseDeadlines, deadlineOf(ctx))
	s.mu.Unlock()
	return s.MemoryStore.ReleaseLease(ctx, id, token)
}

// newTimedLease is a lease of the given length on a fresh delivery, held
// in a timingStore (the real clock throughout: Confirm and Release measure
// their waits with it).
func newTimedLease(t *testing.T, lease time.Duration) (*timingStore, *Lease) {
	t.Helper()
	store := &timingStore{MemoryStore: replay.NewMemoryStore(0)}
	return store, acquireOne(t, store, lease)
}

// acquireOne verifies one signed delivery through a verifier on store
// (lease 0: the default) and returns the lease Acquire gives for it.
func acquireOne(t *testing.T, store replay.Store, lease time.Duration) *Lease {
	t.Helper()
	cfg := Config{Scheme: HMACSHA256(), Secrets: []string{hmacSecret}, Replay: store, Namespace: "endpoint", Lease: lease}
	v := newVerifier(t, cfg)
	d, err := v.Verify(signed(t, newSigner(t, cfg), "evt-1", "x"), []byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	l, err := v.Acquire(context.Background(), d)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// Confirm within the lease gives the store until the lease expires, and
// no longer.
func TestLeaseConfirmWaitsForTheStoreUntilTheLeaseExpires(t *testing.T) {
	store, l := newTimedLease(t, time.Minute)
	if err := l.Confirm(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(store.confirmDeadlines) != 1 || !store.confirmDeadlines[0].Equal(l.Expires()) {
		t.Fatalf("ConfirmLease deadlines %v, want one: the lease's expiry %v", store.confirmDeadlines, l.Expires())
	}
}

// Confirm called after the lease expired gives the store a quarter of the
// lease from the call.
func TestLeaseConfirmAfterExpiryWaitsAQuarterLease(t *testing.T) {
	const lease = 40 * time.Millisecond
	store, l := newTimedLease(t, lease)
	time.Sleep(time.Until(l.Expires()) + 5*time.Millisecond)
	before := time.Now()
	if err := l.Confirm(context.Background()); err != nil {
		t.Fatal(err)
	}
	wantQuarterLease(t, "ConfirmLease", store.confirmDeadlines, before, time.Now(), lease)
}

// Confirm retries a failing store with a wait that doubles from 10ms, so
// a store that is down is not hammered.
func TestLeaseConfirmBacksOffBetweenStoreRetries(t *testing.T) {
	// A 1 s lease: retries 10, 20, 40, 80, 160 and 320 ms apart fit (7
	// calls, the last 630 ms in); the next wait, 640 ms, would end past
	// the lease. At least 3 calls holds unless the machine stalls for
	// most of a second.
	store, l := newTimedLease(t, time.Second)
	store.failing = true
	if err := l.Confirm(context.Background()); !errors.Is(err, ErrReplayStore) || !errors.Is(err, errStoreDown) {
		t.Fatalf("Confirm = %v, want ErrReplayStore and the store's error", err)
	}
	at := store.confirmAt
	if len(at) < 3 || len(at) > 7 {
		t.Fatalf("ConfirmLease called %d times within a 1s lease, want 3 to 7 (10, 20, 40, 80, 160, 320ms apart)", len(at))
	}
	for i := 1; i < len(at); i++ {
		if gap, want := at[i].Sub(at[i-1]), 10*time.Millisecond<<(i-1); gap < want {
			t.Fatalf("retry %d came %v after the last, want at least %v", i, gap, want)
		}
	}
}

// Release gives the store a quarter of the lease.
func TestLeaseReleaseWaitsAQuarterLease(t *testing.T) {
	const lease = time.Minute
	store, l := newTimedLease(t, lease)
	before := time.Now()
	if err := l.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	wantQuarterLease(t, "ReleaseLease", store.releaseDeadlines, before, time.Now(), lease)
}

// wantQuarterLease fails t unless the store's method was called once, with
// a deadline a quarter lease after a call made between before and after.
func wantQuarterLease(t *testing.T, method string, deadlines []time.Time, before, after time.Time, lease time.Duration) {
	t.Helper()
	if len(deadlines) != 1 {
		t.Fatalf("%s called %d times", method, len(deadlines))
	}
	if dl := deadlines[0]; dl.Before(before.Add(lease/4)) || dl.After(after.Add(lease/4)) {
		t.Fatalf("%s deadline %v after the call, want a quarter lease (%v)", method, dl.Sub(before), lease/4)
	}
}

// Acquire takes a delivery from Verify. A hand-made Delivery carries no
// verified signature: acquiring it must fail, not file every such delivery
// under one empty signature key (which would make all but the first a
// "duplicate" that is acknowledged and never processed).
func TestWebhookAcquireRefusesDeliveryNotFromVerify(t *testing.T) {
	v := newVerifier(t, Config{Scheme: HMACSHA256(), Secrets: []string{hmacSecret}})
	for _, id := range []string{"a", "b"} {
		l, err := v.Acquire(context.Background(), Delivery{ID: id})
		if l != nil || !errors.Is(err, ErrMalformed) {
			t.Fatalf("Acquire(unverified %q) = %v, %v; want nil, ErrMalformed", id, l, err)
		}
	}
	std := newVerifier(t, Config{Scheme: StandardWebhooks(), Secrets: []string{stdSecret}})
	if l, err := std.Acquire(context.Background(), Delivery{}); l != nil || !errors.Is(err, ErrMalformed) {
		t.Fatalf("Acquire(empty delivery) = %v, %v; want nil, ErrMalformed", l, err)
	}
}
