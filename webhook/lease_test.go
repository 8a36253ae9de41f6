package webhook

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ctoken/ctoken/observe"
	"github.com/ctoken/ctoken/observe/observetest"
	"github.com/ctoken/ctoken/replay"
)

// timingStore is a MemoryStore that records, for each ConfirmLease and
// ReleaseLease call, its context's deadline.
type timingStore struct {
	*replay.MemoryStore

	mu               sync.Mutex
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
	s.confirmDeadlines = append(s.confirmDeadlines, deadlineOf(ctx))
	s.mu.Unlock()
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

// TestLease pins Lease.Confirm and Lease.Release.
func TestLease(t *testing.T) {
	// Confirm within the lease gives the store until the lease expires, and
	// no longer.
	t.Run("confirm waits for the store until the lease expires", func(t *testing.T) {
		store, l := newTimedLease(t, time.Minute)
		if err := l.Confirm(context.Background()); err != nil {
			t.Fatal(err)
		}
		if len(store.confirmDeadlines) != 1 || !store.confirmDeadlines[0].Equal(l.Expires()) {
			t.Fatalf("ConfirmLease deadlines %v, want one: the lease's expiry %v", store.confirmDeadlines, l.Expires())
		}
	})

	// Confirm called after the lease expired gives the store a quarter of the
	// lease from the call.
	t.Run("confirm after expiry waits a quarter lease", func(t *testing.T) {
		const lease = 40 * time.Millisecond
		store, l := newTimedLease(t, lease)
		time.Sleep(time.Until(l.Expires()) + 5*time.Millisecond)
		before := time.Now()
		if err := l.Confirm(context.Background()); err != nil {
			t.Fatal(err)
		}
		wantQuarterLease(t, "ConfirmLease", store.confirmDeadlines, before, time.Now(), lease)
	})

	// Release gives the store a quarter of the lease.
	t.Run("release waits a quarter lease", func(t *testing.T) {
		const lease = time.Minute
		store, l := newTimedLease(t, lease)
		before := time.Now()
		if err := l.Release(context.Background()); err != nil {
			t.Fatal(err)
		}
		wantQuarterLease(t, "ReleaseLease", store.releaseDeadlines, before, time.Now(), lease)
	})

	t.Run("refuses unverified delivery and zero lease", func(t *testing.T) {
		v := newVerifier(t, Config{Scheme: StandardWebhooks(), Secrets: []string{stdSecret}})
		ctx := context.Background()
		if l, err := v.Acquire(ctx, Delivery{ID: "evt-1"}); l != nil || !errors.Is(err, ErrMalformed) || Reason(err) != "delivery not verified" {
			t.Fatalf("Acquire(unverified) = %v, %v, want ErrMalformed", l, err)
		}
		var nilLease *Lease
		for _, l := range []*Lease{{}, nilLease} {
			if err := l.Confirm(ctx); !errors.Is(err, ErrMalformed) {
				t.Fatalf("Confirm on a lease not from Acquire = %v", err)
			}
			if err := l.Release(ctx); !errors.Is(err, ErrMalformed) {
				t.Fatalf("Release on a lease not from Acquire = %v", err)
			}
			if d := l.Delivery(); d != (Delivery{}) {
				t.Fatalf("Delivery of a lease not from Acquire = %+v", d)
			}
		}
		if !nilLease.Deadline().IsZero() || !nilLease.Expires().IsZero() {
			t.Fatal("a nil lease has a deadline")
		}
	})

	t.Run("reports store failures of confirm and release", func(t *testing.T) {
		store := &flakyStore{MemoryStore: replay.NewMemoryStore(0)}
		cfg := Config{Scheme: StandardWebhooks(), Secrets: []string{stdSecret}, Replay: store, Namespace: "endpoint", Lease: 200 * time.Millisecond}
		v := newVerifier(t, cfg)
		ctx := context.Background()
		d, err := v.Verify(signed(t, newSigner(t, cfg), "evt-1", "x"), []byte("x"))
		if err != nil {
			t.Fatal(err)
		}
		l, err := v.Acquire(ctx, d)
		if err != nil {
			t.Fatal(err)
		}
		if l.Delivery() != d || !l.Deadline().Before(l.Expires()) {
			t.Fatalf("lease: delivery %+v, deadline %v, expires %v", l.Delivery(), l.Deadline(), l.Expires())
		}
		store.failing.Store(true)
		if err := l.Release(ctx); !errors.Is(err, ErrReplayStore) || !errors.Is(err, errStoreDown) || Reason(err) == "" {
			t.Fatalf("Release with a failing store = %v, want ErrReplayStore wrapping the store's error", err)
		}
		start := time.Now()
		if err := l.Confirm(ctx); !errors.Is(err, ErrReplayStore) || !errors.Is(err, errStoreDown) || Reason(err) == "" {
			t.Fatalf("Confirm with a failing store = %v, want ErrReplayStore wrapping the store's error", err)
		}
		// Confirm retried until the lease expired, and no longer.
		if n := store.confirms.Load(); n < 3 {
			t.Fatalf("Confirm tried %d times, want retries", n)
		}
		if el := time.Since(start); el > time.Second {
			t.Fatalf("Confirm gave up after %v, want about the 200ms lease", el)
		}
		// The store recovers: the lease ended unconfirmed, so the delivery is
		// free to be processed again, never acknowledged as a duplicate.
		store.failing.Store(false)
		time.Sleep(time.Until(l.Expires().Add(20 * time.Millisecond)))
		if l2, err := v.Acquire(ctx, d); err != nil {
			t.Fatalf("Acquire after the unconfirmed lease expired = %v", err)
		} else if err := l2.Confirm(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := v.Acquire(ctx, d); !errors.Is(err, ErrDuplicate) {
			t.Fatalf("Acquire after Confirm = %v, want ErrDuplicate", err)
		}
	})

	t.Run("confirm stops retrying when context ends", func(t *testing.T) {
		store := &flakyStore{MemoryStore: replay.NewMemoryStore(0)}
		store.failing.Store(true)
		l := acquireOne(t, store, 0)
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		start := time.Now()
		if err := l.Confirm(ctx); !errors.Is(err, ErrReplayStore) {
			t.Fatalf("Confirm = %v", err)
		}
		if el := time.Since(start); el > 500*time.Millisecond {
			t.Fatalf("Confirm ran %v past its context's 50ms", el)
		}
	})

	t.Run("confirm after takeover reports lease lost", func(t *testing.T) {
		clk := newStepClock()
		store := &replay.MemoryStore{Now: clk.Now}
		cfg := Config{Scheme: StandardWebhooks(), Secrets: []string{stdSecret}, Replay: store, Namespace: "endpoint", Now: clk.Now, Lease: time.Second}
		v := newVerifier(t, cfg)
		ctx := context.Background()
		d, err := v.Verify(signed(t, newSigner(t, cfg), "evt-1", "x"), []byte("x"))
		if err != nil {
			t.Fatal(err)
		}
		slow, err := v.Acquire(ctx, d)
		if err != nil {
			t.Fatal(err)
		}
		clk.Advance(2 * time.Second) // the slow attempt outran its lease
		fast, err := v.Acquire(ctx, d)
		if err != nil {
			t.Fatalf("Acquire after the lease ended = %v", err)
		}
		if err := fast.Confirm(ctx); err != nil {
			t.Fatal(err)
		}
		if err := slow.Confirm(ctx); !errors.Is(err, ErrReplayStore) || !errors.Is(err, replay.ErrLeaseLost) {
			t.Fatalf("late Confirm = %v, want ErrReplayStore and replay.ErrLeaseLost", err)
		}
	})
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

// Store failures carry a reason and match both ErrReplayStore and the
// store's own error; the middleware answers them 503.
func TestAcquireStoreFailureHasReasonAndWrapsStoreError(t *testing.T) {
	clk := newStepClock()
	full := &replay.MemoryStore{Max: 1, Now: clk.Now}
	full.Claim(context.Background(), "occupant", clk.Now().Add(time.Hour))
	for _, tc := range []struct {
		name  string
		store replay.Store
		cause error
	}{
		{"store down", failingStore{}, errStoreDown},
		{"store full", full, replay.ErrFull},
		{"bad store config", replay.NewMemoryStore(-1), replay.ErrConfig},
		{"store answers outside the contract", tokenlessStore{replay.NewMemoryStore(0)}, errStoreAnswer},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Config{Scheme: HMACSHA256(), Secrets: []string{hmacSecret}, Replay: tc.store, Namespace: "endpoint", Now: clk.Now}
			v := newVerifier(t, cfg)
			d, err := v.Verify(signed(t, newSigner(t, cfg), "evt", "b"), []byte("b"))
			if err != nil {
				t.Fatal(err)
			}
			l, err := v.Acquire(context.Background(), d)
			if l != nil || !errors.Is(err, ErrReplayStore) || !errors.Is(err, tc.cause) || Reason(err) == "" {
				t.Fatalf("Acquire = %v, %v (reason %q); want ErrReplayStore wrapping %v", l, err, Reason(err), tc.cause)
			}
			if StatusCode(err) != http.StatusServiceUnavailable {
				t.Fatalf("StatusCode = %d, want 503", StatusCode(err))
			}
		})
	}
}

// txLease verifies a signed delivery id through v and acquires its lease.
func txLease(t *testing.T, v *Verifier, s *Signer, id string) *Lease {
	t.Helper()
	d, err := v.Verify(signed(t, s, id, "{}"), []byte("{}"))
	if err != nil {
		t.Fatal(err)
	}
	l, err := v.Acquire(context.Background(), d)
	if err != nil {
		t.Fatalf("Acquire(%s) = %v", id, err)
	}
	return l
}

// TestLeaseBeginKeepsTheWorkExactlyWhenTheDeliveryIsRecorded drives a
// lease with a begun work through each outcome on a store whose work
// commits with the record: the work's write is kept exactly when the
// delivery is recorded as processed, a write after the lease ended is
// refused, the next copy finds the delivery as the outcome left it, and the
// observer sees the outcome.
func TestLeaseBeginKeepsTheWorkExactlyWhenTheDeliveryIsRecorded(t *testing.T) {
	const lease = time.Second
	tests := []struct {
		name     string
		fault    func(*txStore)
		before   func(t *testing.T, clk *stepClock, v *Verifier, s *Signer) // between the write and the finish
		finish   func(l *Lease, ctx context.Context) error
		wantErr  []error // the finish's error matches all of them; none: nil
		notErr   error   // ... and not this one
		rows     map[string]int
		releases int   // ReleaseLease calls
		next     error // a copy's Acquire after the finish; nil: acquired
		event    observe.Event
	}{
		{
			name:   "confirm commits the work with the record",
			finish: (*Lease).Confirm,
			rows:   map[string]int{"evt-1": 1},
			next:   ErrDuplicate,
			event:  webhookEvent(observe.OutcomeProcessed, observe.ReasonNone, observe.KeyPrimary),
		},
		{
			name:     "release rolls the work back and frees the delivery",
			finish:   (*Lease).Release,
			rows:     map[string]int{},
			releases: 1,
			event:    webhookEvent(observe.OutcomeVerified, observe.ReasonNone, observe.KeyPrimary),
		},
		{
			name: "a lease lost to another attempt keeps nothing of the work",
			before: func(t *testing.T, clk *stepClock, v *Verifier, s *Signer) {
				clk.Advance(2 * lease) // this attempt outran its lease
				other := txLease(t, v, s, "evt-1")
				ctx, err := other.Begin(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				if err := txInsert(ctx, "evt-1 by the other attempt"); err != nil {
					t.Fatal(err)
				}
				if err := other.Confirm(ctx); err != nil {
					t.Fatal(err)
				}
			},
			finish:  (*Lease).Confirm,
			wantErr: []error{ErrReplayStore, replay.ErrLeaseLost},
			rows:    map[string]int{"evt-1 by the other attempt": 1},
			next:    ErrDuplicate,
			event:   webhookEvent(observe.OutcomeStoreFailure, observe.ReasonWebhookLeaseLost, observe.KeyPrimary),
		},
		{
			name:    "a lease that ran out keeps nothing of the work, taken or not",
			before:  func(t *testing.T, clk *stepClock, v *Verifier, s *Signer) { clk.Advance(2 * lease) },
			finish:  (*Lease).Confirm,
			wantErr: []error{ErrReplayStore, replay.ErrLeaseLost},
			rows:    map[string]int{},
			event:   webhookEvent(observe.OutcomeStoreFailure, observe.ReasonWebhookLeaseLost, observe.KeyPrimary),
		},
		{
			name:    "an unknown outcome that committed: release does nothing",
			fault:   func(s *txStore) { s.commitErr, s.commitKeeps = errStoreDown, true },
			finish:  confirmThenRelease,
			wantErr: []error{ErrReplayStore, errStoreDown},
			notErr:  replay.ErrLeaseLost,
			rows:    map[string]int{"evt-1": 1},
			next:    ErrDuplicate,
			event:   webhookEvent(observe.OutcomeStoreFailure, observe.ReasonWebhookStoreConfirm, observe.KeyPrimary),
		},
		{
			name:    "an unknown outcome that did not commit: the lease stays until it ends",
			fault:   func(s *txStore) { s.commitErr = errStoreDown },
			finish:  confirmThenRelease,
			wantErr: []error{ErrReplayStore, errStoreDown},
			notErr:  replay.ErrLeaseLost,
			rows:    map[string]int{},
			next:    ErrInProgress,
			event:   webhookEvent(observe.OutcomeStoreFailure, observe.ReasonWebhookStoreConfirm, observe.KeyPrimary),
		},
		{
			name:     "a rollback that fails still releases the lease",
			fault:    func(s *txStore) { s.rollbackErr = errStoreDown },
			finish:   (*Lease).Release,
			wantErr:  []error{ErrReplayStore, errStoreDown},
			rows:     map[string]int{},
			releases: 1,
			event:    webhookEvent(observe.OutcomeStoreFailure, observe.ReasonWebhookStoreRelease, observe.KeyPrimary),
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clk := newStepClock()
			store := newTxStore(clk.Now)
			log := &observetest.Recorder{}
			cfg := Config{Scheme: StandardWebhooks(), Secrets: []string{stdSecret}, Replay: store, Namespace: "endpoint",
				Lease: lease, Now: clk.Now, Observer: log}
			v, s := newVerifier(t, cfg), newSigner(t, cfg)
			l := txLease(t, v, s, "evt-1")
			ctx, err := l.Begin(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if err := txInsert(ctx, "evt-1"); err != nil {
				t.Fatal(err)
			}
			if tc.before != nil {
				tc.before(t, clk, v, s)
			}
			if tc.fault != nil {
				tc.fault(store)
			}
			log.Take()
			err = tc.finish(l, ctx)
			if len(tc.wantErr) == 0 && err != nil {
				t.Fatalf("finish = %v, want nil", err)
			}
			for _, want := range tc.wantErr {
				if !errors.Is(err, want) || Reason(err) == "" {
					t.Fatalf("finish = %v, want it to match %v, with a reason", err, want)
				}
			}
			if tc.notErr != nil && errors.Is(err, tc.notErr) {
				t.Fatalf("finish = %v, must not match %v", err, tc.notErr)
			}
			events := log.Take()
			if tc.event.Outcome == observe.OutcomeVerified {
				if len(events) != 0 {
					t.Errorf("events %+v, want none", events)
				}
			} else if len(events) != 1 {
				t.Errorf("events %+v, want one", events)
			} else if e, had := hadStore(events[0]); e != tc.event || !had {
				t.Errorf("event %+v (store latency %v), want %+v with a store latency", events[0], had, tc.event)
			}
			if err := txInsert(ctx, "late"); !errors.Is(err, errTxEnded) {
				t.Fatalf("a write after the lease ended = %v, want it refused", err)
			}
			store.mu.Lock()
			store.commitErr, store.rollbackErr = nil, nil
			store.mu.Unlock()
			rows, refused := store.stats()
			if !maps.Equal(rows, tc.rows) || refused != 1 {
				t.Fatalf("rows %v (%d refused), want %v (1 refused)", rows, refused, tc.rows)
			}
			if _, _, _, releases := store.counts(); releases != tc.releases {
				t.Fatalf("ReleaseLease called %d times, want %d", releases, tc.releases)
			}
			d, err := v.Verify(signed(t, s, "evt-1", "{}"), []byte("{}"))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := v.Acquire(context.Background(), d); !errors.Is(err, tc.next) || (tc.next == nil && err != nil) {
				t.Fatalf("a copy's Acquire = %v, want %v", err, tc.next)
			}
		})
	}
}

// confirmThenRelease is the deferred-Release pattern: Confirm, then
// Release whatever Confirm returned.
func confirmThenRelease(l *Lease, ctx context.Context) error {
	err := l.Confirm(ctx)
	if rerr := l.Release(ctx); rerr != nil {
		return rerr
	}
	return err
}

// TestLeaseBeginRefusesMisuse: Begin on a store that is not a
// replay.Transactor, on a lease not from Acquire, twice, or after the lease
// ended; a Confirm after Release; a store that cannot open the
// transaction. None of them leaves work committed.
func TestLeaseBeginRefusesMisuse(t *testing.T) {
	bg := context.Background()
	tests := []struct {
		name  string
		store func(*txStore) replay.Store
		fault func(*txStore)
		use   func(t *testing.T, l *Lease) error
		want  []error
		rows  int
	}{
		{
			name:  "store without transactions",
			store: func(*txStore) replay.Store { return replay.NewMemoryStore(0) },
			use: func(t *testing.T, l *Lease) error {
				_, err := l.Begin(bg)
				return err
			},
			want: []error{ErrConfig},
		},
		{
			name: "lease not from Acquire",
			use: func(t *testing.T, _ *Lease) error {
				var nilLease *Lease
				if _, err := nilLease.Begin(bg); !errors.Is(err, ErrMalformed) {
					return fmt.Errorf("nil lease: %w", err)
				}
				_, err := (&Lease{}).Begin(bg)
				return err
			},
			want: []error{ErrMalformed},
		},
		{
			name: "begin twice",
			use: func(t *testing.T, l *Lease) error {
				ctx, err := l.Begin(bg)
				if err != nil {
					t.Fatal(err)
				}
				if err := txInsert(ctx, "first"); err != nil {
					t.Fatal(err)
				}
				_, err = l.Begin(bg)
				if cerr := l.Confirm(bg); cerr != nil { // the first work is intact
					t.Fatal(cerr)
				}
				return err
			},
			want: []error{ErrConfig},
			rows: 1,
		},
		{
			name: "begin after release",
			use: func(t *testing.T, l *Lease) error {
				if err := l.Release(bg); err != nil {
					t.Fatal(err)
				}
				_, err := l.Begin(bg)
				return err
			},
			want: []error{ErrConfig},
		},
		{
			name: "begin after confirm",
			use: func(t *testing.T, l *Lease) error {
				if err := l.Confirm(bg); err != nil {
					t.Fatal(err)
				}
				_, err := l.Begin(bg)
				return err
			},
			want: []error{ErrConfig},
		},
		{
			name: "confirm after release",
			use: func(t *testing.T, l *Lease) error {
				ctx, err := l.Begin(bg)
				if err != nil {
					t.Fatal(err)
				}
				if err := txInsert(ctx, "released"); err != nil {
					t.Fatal(err)
				}
				if err := l.Release(bg); err != nil {
					t.Fatal(err)
				}
				return l.Confirm(bg)
			},
			want: []error{ErrConfig},
		},
		{
			name:  "store cannot open the transaction",
			fault: func(s *txStore) { s.beginErr = errStoreDown },
			use: func(t *testing.T, l *Lease) error {
				ctx, err := l.Begin(bg)
				if ierr := txInsert(ctx, "no tx"); !errors.Is(ierr, errNoTx) {
					t.Fatalf("after a failed Begin the context carries a transaction: %v", ierr)
				}
				return err
			},
			want: []error{ErrReplayStore, errStoreDown},
		},
		{
			name:  "store answers no transaction and no error",
			fault: func(s *txStore) { s.nilWork = true },
			use: func(t *testing.T, l *Lease) error {
				_, err := l.Begin(bg)
				return err
			},
			want: []error{ErrReplayStore, errStoreAnswer},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			txs := newTxStore(nil)
			var store replay.Store = txs
			if tc.store != nil {
				store = tc.store(txs)
			}
			if tc.fault != nil {
				tc.fault(txs)
			}
			cfg := Config{Scheme: StandardWebhooks(), Secrets: []string{stdSecret}, Replay: store, Namespace: "endpoint"}
			l := txLease(t, newVerifier(t, cfg), newSigner(t, cfg), "evt-1")
			err := tc.use(t, l)
			for _, want := range tc.want {
				if !errors.Is(err, want) || Reason(err) == "" {
					t.Fatalf("got %v, want it to match %v, with a reason", err, want)
				}
			}
			rows, _ := txs.stats()
			if n := len(rows); n != tc.rows {
				t.Fatalf("rows %v, want %d", rows, tc.rows)
			}
		})
	}
}

// TestLeaseSecondConfirmOfAWorkReturnsTheFirstOutcome: the work is
// committed once; a second Confirm neither commits again nor reports.
func TestLeaseSecondConfirmOfAWorkReturnsTheFirstOutcome(t *testing.T) {
	for _, fault := range []error{nil, errStoreDown} {
		t.Run(fmt.Sprint(fault), func(t *testing.T) {
			store := newTxStore(nil)
			store.commitErr = fault
			log := &observetest.Recorder{}
			cfg := Config{Scheme: StandardWebhooks(), Secrets: []string{stdSecret}, Replay: store, Namespace: "endpoint", Observer: log}
			l := txLease(t, newVerifier(t, cfg), newSigner(t, cfg), "evt-1")
			if _, err := l.Begin(context.Background()); err != nil {
				t.Fatal(err)
			}
			first := l.Confirm(context.Background())
			log.Take()
			second := l.Confirm(context.Background())
			if second != first || errors.Is(first, errStoreDown) != (fault != nil) {
				t.Fatalf("Confirm = %v, then %v; want the first outcome twice", first, second)
			}
			if _, commits, _, _ := store.counts(); commits != 1 {
				t.Fatalf("Commit called %d times, want 1", commits)
			}
			if got := log.Take(); len(got) != 0 {
				t.Fatalf("the second Confirm reported %+v", got)
			}
		})
	}
}

// heldTxStore is a txStore that is also a [replay.WorkAcquirer], standing
// in for pgstore's one-commit mode: AcquireWork takes the lease as
// AcquireLease does and returns it as a work, whose Rollback ends the
// lease as pgstore's transaction-held lock ends with its transaction.
type heldTxStore struct {
	*txStore
	acquires int // AcquireWork calls that acquired

	// answer, when set, replaces AcquireWork's answer (outside the
	// contract, or a failure); it is given a work it may return.
	answer func(w replay.Work) (replay.Record, replay.Work, error)
}

var _ replay.WorkAcquirer = (*heldTxStore)(nil)

func (s *heldTxStore) AcquireWork(ctx context.Context, id string, lease time.Duration, fingerprint []byte) (replay.Record, replay.Work, error) {
	if s.answer != nil {
		return s.answer(&heldWork{txWork: &txWork{s: s.txStore, id: id}})
	}
	l, err := s.AcquireLease(ctx, id, lease)
	if err != nil || l.State != replay.LeaseAcquired {
		return replay.Record{Lease: l}, nil, err
	}
	s.mu.Lock()
	s.acquires++
	s.mu.Unlock()
	return replay.Record{Lease: l}, &heldWork{txWork: &txWork{s: s.txStore, id: id, token: l.Token}}, nil
}

// heldWork is a work of a heldTxStore: its lease ends with it.
type heldWork struct{ *txWork }

func (w *heldWork) Rollback(ctx context.Context) error {
	w.mu.Lock()
	ended := w.ended
	w.mu.Unlock()
	err := w.txWork.Rollback(ctx)
	if !ended {
		w.s.MemoryStore.ReleaseLease(ctx, w.id, w.token)
	}
	return err
}

// TestTransactionalLeaseIsTheWorkOnAWorkAcquirer: under Transactional on
// a replay.WorkAcquirer, Acquire takes the lease as the work's
// transaction: no BeginWork and no ReleaseLease is ever called, Begin
// returns the held work (once), Confirm commits the work with the record
// (one commit), Release and a rolled-back commit free the delivery by
// ending the work; a copy is refused in progress while the work is held
// and a duplicate once it committed. Without Transactional the same store
// takes a committed lease.
func TestTransactionalLeaseIsTheWorkOnAWorkAcquirer(t *testing.T) {
	type counts struct{ acquires, begins, commits, rollbacks, releases int }
	tests := []struct {
		name    string
		plain   bool // the Verifier without Transactional
		run     func(t *testing.T, store *heldTxStore, l *Lease) error
		wantErr error
		rows    map[string]int
		next    error // a copy's Acquire afterwards
		counts  counts
	}{
		{
			name: "Begin then Confirm commits the work with the record",
			run: func(t *testing.T, store *heldTxStore, l *Lease) error {
				ctx, err := l.Begin(context.Background())
				if err != nil {
					return err
				}
				if err := txInsert(ctx, "evt-1"); err != nil {
					return err
				}
				if _, err := l.Begin(context.Background()); !errors.Is(err, ErrConfig) {
					t.Errorf("a second Begin = %v, want ErrConfig", err)
				}
				return l.Confirm(ctx)
			},
			rows:   map[string]int{"evt-1": 1},
			next:   ErrDuplicate,
			counts: counts{acquires: 1, commits: 1},
		},
		{
			name:   "Confirm without Begin records the delivery",
			run:    func(t *testing.T, store *heldTxStore, l *Lease) error { return l.Confirm(context.Background()) },
			rows:   map[string]int{},
			next:   ErrDuplicate,
			counts: counts{acquires: 1, commits: 1},
		},
		{
			name: "Release rolls the work back and frees the delivery",
			run: func(t *testing.T, store *heldTxStore, l *Lease) error {
				ctx, err := l.Begin(context.Background())
				if err != nil {
					return err
				}
				if err := txInsert(ctx, "evt-1"); err != nil {
					return err
				}
				return l.Release(context.Background())
			},
			rows:   map[string]int{},
			counts: counts{acquires: 1, rollbacks: 1},
		},
		{
			name: "Release without Begin frees the delivery",
			run:  func(t *testing.T, store *heldTxStore, l *Lease) error { return l.Release(context.Background()) },
			rows: map[string]int{}, counts: counts{acquires: 1, rollbacks: 1},
		},
		{
			name: "a commit the store rolled back calls no ReleaseLease",
			run: func(t *testing.T, store *heldTxStore, l *Lease) error {
				store.mu.Lock()
				store.commitErr = fmt.Errorf("statement failed: %w", replay.ErrRolledBack)
				store.mu.Unlock()
				err := l.Confirm(context.Background())
				store.mu.Lock()
				store.commitErr = nil
				store.mu.Unlock()
				return err
			},
			wantErr: replay.ErrRolledBack,
			rows:    map[string]int{},
			next:    ErrInProgress, // the fake's lease outlives a failed commit; pgstore's ends with it
			counts:  counts{acquires: 1, commits: 1},
		},
		{
			name:   "a copy while the work is held is in progress",
			run:    func(t *testing.T, store *heldTxStore, l *Lease) error { return nil },
			rows:   map[string]int{},
			next:   ErrInProgress,
			counts: counts{acquires: 1},
		},
		{
			name:  "without Transactional the lease is committed before Begin",
			plain: true,
			run: func(t *testing.T, store *heldTxStore, l *Lease) error {
				ctx, err := l.Begin(context.Background())
				if err != nil {
					return err
				}
				if err := txInsert(ctx, "evt-1"); err != nil {
					return err
				}
				return l.Confirm(ctx)
			},
			rows:   map[string]int{"evt-1": 1},
			next:   ErrDuplicate,
			counts: counts{begins: 1, commits: 1},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			store := &heldTxStore{txStore: newTxStore(nil)}
			cfg := Config{Scheme: StandardWebhooks(), Secrets: []string{stdSecret}, Replay: store, Namespace: "endpoint",
				Lease: time.Minute, Transactional: !tc.plain}
			v, s := newVerifier(t, cfg), newSigner(t, cfg)
			l := txLease(t, v, s, "evt-1")
			if err := tc.run(t, store, l); !errors.Is(err, tc.wantErr) || (tc.wantErr == nil && err != nil) {
				t.Fatalf("run = %v, want %v", err, tc.wantErr)
			}
			if rows, _ := store.stats(); !maps.Equal(rows, tc.rows) {
				t.Fatalf("rows %v, want %v", rows, tc.rows)
			}
			begins, commits, rollbacks, releases := store.counts()
			store.mu.Lock()
			got := counts{store.acquires, begins, commits, rollbacks, releases}
			store.mu.Unlock()
			if got != tc.counts {
				t.Fatalf("store calls %+v, want %+v", got, tc.counts)
			}
			d, err := v.Verify(signed(t, s, "evt-1", "{}"), []byte("{}"))
			if err != nil {
				t.Fatal(err)
			}
			copyLease, err := v.Acquire(context.Background(), d)
			if !errors.Is(err, tc.next) || (tc.next == nil && err != nil) {
				t.Fatalf("a copy's Acquire = %v, want %v", err, tc.next)
			}
			if copyLease != nil {
				copyLease.Release(context.Background())
			}
		})
	}
}

// TestTransactionalAcquireWorkOutsideTheContractHoldsNothing: an
// AcquireWork answer outside the replay.WorkAcquirer contract, or a
// failure, is refused with ErrReplayStore and the store's error, and any
// Work it returned is rolled back, so nothing is held.
func TestTransactionalAcquireWorkOutsideTheContractHoldsNothing(t *testing.T) {
	acquired := replay.Record{Lease: replay.Lease{State: replay.LeaseAcquired, Token: "tok"}}
	tests := []struct {
		name      string
		answer    func(w replay.Work) (replay.Record, replay.Work, error)
		want      error
		rollbacks int
	}{
		{"a failure", func(replay.Work) (replay.Record, replay.Work, error) {
			return replay.Record{}, nil, errStoreDown
		}, errStoreDown, 0},
		{"a failure with a Work", func(w replay.Work) (replay.Record, replay.Work, error) {
			return acquired, w, errStoreDown
		}, errStoreDown, 1},
		{"acquired without a Work", func(replay.Work) (replay.Record, replay.Work, error) {
			return acquired, nil, nil
		}, errStoreAnswer, 0},
		{"acquired without a token", func(w replay.Work) (replay.Record, replay.Work, error) {
			return replay.Record{Lease: replay.Lease{State: replay.LeaseAcquired}}, w, nil
		}, errStoreAnswer, 1},
		{"busy with a Work", func(w replay.Work) (replay.Record, replay.Work, error) {
			return replay.Record{Lease: replay.Lease{State: replay.LeaseBusy}}, w, nil
		}, errStoreAnswer, 1},
		{"an unknown state", func(replay.Work) (replay.Record, replay.Work, error) {
			return replay.Record{Lease: replay.Lease{State: replay.LeaseState(99)}}, nil, nil
		}, errStoreAnswer, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			store := &heldTxStore{txStore: newTxStore(nil), answer: tc.answer}
			cfg := Config{Scheme: StandardWebhooks(), Secrets: []string{stdSecret}, Replay: store, Namespace: "endpoint", Transactional: true}
			v, s := newVerifier(t, cfg), newSigner(t, cfg)
			d, err := v.Verify(signed(t, s, "evt-1", "{}"), []byte("{}"))
			if err != nil {
				t.Fatal(err)
			}
			l, err := v.Acquire(context.Background(), d)
			if l != nil || !errors.Is(err, ErrReplayStore) || !errors.Is(err, tc.want) || Reason(err) == "" {
				t.Fatalf("Acquire = %v, %v; want no Lease and ErrReplayStore matching %v, with a reason", l, err, tc.want)
			}
			if _, _, rollbacks, _ := store.counts(); rollbacks != tc.rollbacks {
				t.Fatalf("%d rollbacks, want %d", rollbacks, tc.rollbacks)
			}
		})
	}
}

// TestLeaseCleanupRunsUnderADeadlineOnlyContext: the store steps that
// clean up after a work (the release of a lease whose commit the store
// rolled back, the rollback of a Work an AcquireWork answer outside the
// contract returned) run under a context that only its deadline ends
// (replay.WithDeadlineOnly), a quarter of the lease after they began,
// even when the caller's context has been cancelled (the sender went
// away), so that a store whose client enforces deadlines itself could run
// them on the caller's goroutine.
func TestLeaseCleanupRunsUnderADeadlineOnlyContext(t *testing.T) {
	const lease = 40 * time.Second
	busy := func(w replay.Work) (replay.Record, replay.Work, error) {
		return replay.Record{Lease: replay.Lease{State: replay.LeaseBusy}}, w, nil
	}
	tests := []struct {
		name  string
		store func() (replay.Leaser, *txStore)
		run   func(t *testing.T, ctx context.Context, v *Verifier, d Delivery)
		want  string
	}{
		{
			name: "a commit the store rolled back releases the lease",
			store: func() (replay.Leaser, *txStore) {
				s := newTxStore(nil)
				s.commitErr = fmt.Errorf("%w: a statement of the work failed", replay.ErrRolledBack)
				return s, s
			},
			run: func(t *testing.T, ctx context.Context, v *Verifier, d Delivery) {
				l, err := v.Acquire(context.Background(), d)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := l.Begin(context.Background()); err != nil {
					t.Fatal(err)
				}
				if err := l.Confirm(ctx); !errors.Is(err, replay.ErrRolledBack) {
					t.Fatalf("Confirm = %v, want ErrRolledBack", err)
				}
			},
			want: "ReleaseLease",
		},
		{
			name: "a Work given with an answer outside the contract is rolled back",
			store: func() (replay.Leaser, *txStore) {
				s := &heldTxStore{txStore: newTxStore(nil), answer: busy}
				return s, s.txStore
			},
			run: func(t *testing.T, ctx context.Context, v *Verifier, d Delivery) {
				if l, err := v.Acquire(ctx, d); l != nil || !errors.Is(err, ErrReplayStore) {
					t.Fatalf("Acquire = %v, %v; want no Lease and ErrReplayStore", l, err)
				}
			},
			want: "Rollback",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			store, tx := tc.store()
			cfg := Config{Scheme: StandardWebhooks(), Secrets: []string{stdSecret}, Replay: store, Namespace: "endpoint", Lease: lease, Transactional: true}
			v, s := newVerifier(t, cfg), newSigner(t, cfg)
			d, err := v.Verify(signed(t, s, "evt-1", "{}"), []byte("{}"))
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			cancel() // the sender went away
			from := time.Now()
			tc.run(t, ctx, v, d)
			to := time.Now()
			tx.mu.Lock()
			steps := slices.Clone(tx.steps)
			tx.mu.Unlock()
			if len(steps) != 1 || steps[0].method != tc.want {
				t.Fatalf("store steps %+v, want one %s", steps, tc.want)
			}
			got := steps[0]
			if !got.deadlineOnly || got.err != nil {
				t.Fatalf("%s ran under deadline-only %v, done %v; want a live context only its deadline ends", got.method, got.deadlineOnly, got.err)
			}
			if lo, hi := from.Add(lease/4), to.Add(lease/4); got.deadline.Before(lo) || got.deadline.After(hi) {
				t.Fatalf("%s deadline %v, want within [%v, %v]", got.method, got.deadline, lo, hi)
			}
		})
	}
}
