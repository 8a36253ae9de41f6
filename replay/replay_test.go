package replay

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ctoken/ctoken/internal/clocktest"
)

// stepClock is the shared settable test clock.
type stepClock = clocktest.Clock

func newStepClock() *stepClock { return clocktest.New() }

func mustClaim(t *testing.T, s Store, id string, until time.Time) bool {
	t.Helper()
	first, err := s.Claim(context.Background(), id, until)
	if err != nil {
		t.Fatalf("Claim(%q): %v", id, err)
	}
	return first
}

// TestMemoryStore pins MemoryStore as a replay.Store: Claim, Release and their limits.
func TestMemoryStore(t *testing.T) {
	t.Run("second claim is not first", func(t *testing.T) {
		clk := newStepClock()
		s := &MemoryStore{Max: 10, Now: clk.Now}
		until := clk.Now().Add(time.Minute)
		if !mustClaim(t, s, "a", until) {
			t.Fatal("first claim of a reported not first")
		}
		if mustClaim(t, s, "a", until.Add(time.Hour)) {
			t.Fatal("second claim of a reported first")
		}
		if !mustClaim(t, s, "b", until) {
			t.Fatal("first claim of b reported not first")
		}
	})

	t.Run("second claim keeps first expiry", func(t *testing.T) {
		clk := newStepClock()
		s := &MemoryStore{Max: 10, Now: clk.Now}
		mustClaim(t, s, "a", clk.Now().Add(time.Minute))
		mustClaim(t, s, "a", clk.Now().Add(time.Hour)) // must not extend
		clk.Advance(time.Minute)
		if !mustClaim(t, s, "a", clk.Now().Add(time.Minute)) {
			t.Fatal("a was still live after its first expiry")
		}
	})

	t.Run("forgets only after expiry", func(t *testing.T) {
		clk := newStepClock()
		s := &MemoryStore{Max: 10, Now: clk.Now}
		mustClaim(t, s, "a", clk.Now().Add(time.Minute))
		clk.Advance(time.Minute - time.Nanosecond)
		if mustClaim(t, s, "a", clk.Now().Add(time.Minute)) {
			t.Fatal("a forgotten before its expiry")
		}
		clk.Advance(time.Nanosecond)
		if !mustClaim(t, s, "a", clk.Now().Add(time.Minute)) {
			t.Fatal("a not claimable at its expiry")
		}
	})

	t.Run("fails closed when full", func(t *testing.T) {
		clk := newStepClock()
		s := &MemoryStore{Max: 3, Now: clk.Now}
		until := clk.Now().Add(time.Minute)
		for _, id := range []string{"a", "b", "c"} {
			mustClaim(t, s, id, until)
		}
		first, err := s.Claim(context.Background(), "d", until)
		if !errors.Is(err, ErrFull) || first {
			t.Fatalf("claim on a full store = (%v, %v), want (false, ErrFull)", first, err)
		}
		// No live entry was forgotten to make room.
		for _, id := range []string{"a", "b", "c"} {
			if mustClaim(t, s, id, until) {
				t.Fatalf("live entry %q forgotten after the store filled up", id)
			}
		}
		if got := s.Len(); got != 3 {
			t.Fatalf("Len = %d, want 3", got)
		}
	})

	t.Run("evicts expired entries to make room", func(t *testing.T) {
		clk := newStepClock()
		s := &MemoryStore{Max: 2, Now: clk.Now}
		mustClaim(t, s, "short", clk.Now().Add(time.Second))
		mustClaim(t, s, "long", clk.Now().Add(time.Hour))
		clk.Advance(time.Second)
		if !mustClaim(t, s, "new", clk.Now().Add(time.Hour)) {
			t.Fatal("claim after eviction reported not first")
		}
		if mustClaim(t, s, "long", clk.Now().Add(time.Hour)) {
			t.Fatal("live entry evicted")
		}
		if got := s.Len(); got != 2 {
			t.Fatalf("Len = %d, want 2", got)
		}
	})

	t.Run("refuses expiry in the past", func(t *testing.T) {
		clk := newStepClock()
		s := &MemoryStore{Now: clk.Now}
		for _, until := range []time.Time{clk.Now(), clk.Now().Add(-time.Second), {}} {
			first, err := s.Claim(context.Background(), "a", until)
			if err == nil || first {
				t.Fatalf("Claim until %v = (%v, %v), want an error", until, first, err)
			}
		}
	})

	t.Run("honours cancelled context", func(t *testing.T) {
		s := NewMemoryStore(0)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		first, err := s.Claim(ctx, "a", time.Now().Add(time.Minute))
		if !errors.Is(err, context.Canceled) || first {
			t.Fatalf("Claim with cancelled ctx = (%v, %v), want (false, context.Canceled)", first, err)
		}
		if err := s.Release(ctx, "a"); !errors.Is(err, context.Canceled) {
			t.Fatalf("Release with cancelled ctx = %v, want context.Canceled", err)
		}
		if s.Len() != 0 {
			t.Fatal("a cancelled claim was recorded")
		}
	})

	t.Run("release makes ID claimable again", func(t *testing.T) {
		clk := newStepClock()
		s := &MemoryStore{Now: clk.Now}
		until := clk.Now().Add(time.Minute)
		mustClaim(t, s, "a", until)
		if err := s.Release(context.Background(), "a"); err != nil {
			t.Fatal(err)
		}
		if err := s.Release(context.Background(), "never-claimed"); err != nil {
			t.Fatalf("releasing an unknown id: %v", err)
		}
		if !mustClaim(t, s, "a", until) {
			t.Fatal("released id not claimable again")
		}
	})

	t.Run("release churn keeps memory bounded", func(t *testing.T) {
		clk := newStepClock()
		s := &MemoryStore{Max: 4, Now: clk.Now}
		until := clk.Now().Add(time.Hour)
		mustClaim(t, s, "live", until)
		for i := range 10_000 {
			id := fmt.Sprint(i % 3)
			mustClaim(t, s, id, until)
			if err := s.Release(context.Background(), id); err != nil {
				t.Fatal(err)
			}
		}
		s.mu.Lock()
		n := len(s.st.byTime)
		s.mu.Unlock()
		if n > 2*4+64 {
			t.Fatalf("expiry heap holds %d entries after release churn", n)
		}
		// The rebuild kept the live entry and its expiry.
		if mustClaim(t, s, "live", until) {
			t.Fatal("live entry lost in a heap rebuild")
		}
		clk.Advance(time.Hour)
		if s.Len() != 0 {
			t.Fatalf("Len = %d after every expiry", s.Len())
		}
	})

	t.Run("zero value is usable", func(t *testing.T) {
		var s MemoryStore
		if !mustClaim(t, &s, "a", time.Now().Add(time.Minute)) {
			t.Fatal("zero-value store: first claim not first")
		}
		if mustClaim(t, &s, "a", time.Now().Add(time.Minute)) {
			t.Fatal("zero-value store: second claim first")
		}
	})

	t.Run("concurrent claims exactly one wins", func(t *testing.T) {
		s := NewMemoryStore(1000)
		until := time.Now().Add(time.Hour)
		const workers = 64
		for round := range 20 {
			id := fmt.Sprint("id-", round)
			var wins atomic.Int32
			var wg sync.WaitGroup
			start := make(chan struct{})
			for range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					first, err := s.Claim(context.Background(), id, until)
					if err != nil {
						t.Error(err)
					}
					if first {
						wins.Add(1)
					}
				}()
			}
			close(start)
			wg.Wait()
			if n := wins.Load(); n != 1 {
				t.Fatalf("round %d: %d claims won, want exactly 1", round, n)
			}
		}
	})

	// An ID released and claimed again with a later expiry stays claimed when
	// the first claim's expiry passes: eviction of the first claim's leftover
	// heap entry must not forget the second claim.
	t.Run("reclaim after release outlives first expiry", func(t *testing.T) {
		clk := newStepClock()
		s := &MemoryStore{Now: clk.Now}
		t1 := clk.Now().Add(time.Minute)
		t2 := clk.Now().Add(time.Hour)
		mustClaim(t, s, "a", t1)
		if err := s.Release(context.Background(), "a"); err != nil {
			t.Fatal(err)
		}
		if !mustClaim(t, s, "a", t2) {
			t.Fatal("claim after release not first")
		}
		clk.Advance(2 * time.Minute) // past t1, before t2
		if mustClaim(t, s, "a", clk.Now().Add(time.Hour)) {
			t.Fatal("second claim forgotten when the first claim's expiry passed")
		}
		if got := s.Len(); got != 1 {
			t.Fatalf("Len = %d, want 1", got)
		}
	})

	t.Run("refuses negative max", func(t *testing.T) {
		for _, s := range []*MemoryStore{NewMemoryStore(-1), {Max: -5}} {
			first, err := s.Claim(context.Background(), "a", time.Now().Add(time.Minute))
			if first || !errors.Is(err, ErrConfig) {
				t.Fatalf("Claim on Max %d = %v, %v; want false, ErrConfig", s.Max, first, err)
			}
			if err := s.Release(context.Background(), "a"); !errors.Is(err, ErrConfig) {
				t.Fatalf("Release on Max %d = %v, want ErrConfig", s.Max, err)
			}
		}
	})

	t.Run("refuses expired claim with ErrExpired", func(t *testing.T) {
		clk := newStepClock()
		s := &MemoryStore{Now: clk.Now}
		if first, err := s.Claim(context.Background(), "a", clk.Now()); first || !errors.Is(err, ErrExpired) {
			t.Fatalf("Claim at now = %v, %v; want false, ErrExpired", first, err)
		}
	})
}

func TestLeaseStateString(t *testing.T) {
	for s, want := range map[LeaseState]string{
		LeaseAcquired: "acquired", LeaseBusy: "busy", LeaseDone: "done", LeaseFree: "free", 0: "invalid",
	} {
		if s.String() != want {
			t.Errorf("%d.String() = %q, want %q", s, s.String(), want)
		}
	}
}

// retryAtError is a refusal that knows when it ends.
type retryAtError struct{ at time.Time }

func (e retryAtError) Error() string      { return "fenced" }
func (e retryAtError) RetryAt() time.Time { return e.at }

func TestRetryAtFindsTheEndOfAWrappedRefusal(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	tests := []struct {
		name   string
		err    error
		want   time.Time
		wantOK bool
	}{
		{"nil", nil, time.Time{}, false},
		{"no end", errors.New("down"), time.Time{}, false},
		{"config", ErrConfig, time.Time{}, false},
		{"direct", retryAtError{at}, at, true},
		{"wrapped", fmt.Errorf("store: %w", fmt.Errorf("claim: %w", retryAtError{at})), at, true},
		{"joined", errors.Join(errors.New("a"), retryAtError{at}), at, true},
		{"zero end", fmt.Errorf("store: %w", retryAtError{}), time.Time{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := RetryAt(tt.err)
			if ok != tt.wantOK || !got.Equal(tt.want) {
				t.Fatalf("RetryAt = %v, %v; want %v, %v", got, ok, tt.want, tt.wantOK)
			}
		})
	}
}
