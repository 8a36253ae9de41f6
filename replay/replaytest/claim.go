package replaytest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ctoken/ctoken/replay"
)

// RunClaimContract runs the contract of [replay.Store.Claim] against a
// fresh store from newStore per test: the first claim of an ID is first
// and every later one is not, while the claim lives; exactly one of many
// concurrent claims is first; IDs are compared byte for byte; an until
// not in the future is refused with [replay.ErrExpired] and records
// nothing; a claim ends at its until; a claim under a context already
// ended is an error that records nothing; a store that is a
// [replay.Releaser] frees a claim on Release. It uses the real clock and
// waits out one claim of [Lease]. Every store of this repository runs it
// (the memory store, redisstore, pgstore and sqlitestore).
func RunClaimContract(t *testing.T, newStore func(t *testing.T) replay.Store) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s replay.Store)
	}{
		{"FirstThenNotFirst", firstThenNotFirst},
		{"ConcurrentClaimsExactlyOneFirst", concurrentClaimsExactlyOneFirst},
		{"IDsComparedByteForByte", idsComparedByteForByte},
		{"UntilNotInTheFutureRefused", untilNotInTheFutureRefused},
		{"ClaimEndsAtUntil", claimEndsAtUntil},
		{"EndedContextRecordsNothing", endedContextRecordsNothing},
		{"ReleaseFreesTheClaim", releaseFreesTheClaim},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, newStore(t))
		})
	}
}

// claim calls s.Claim and fails the test on an error or a first that is
// not want.
func claim(t *testing.T, s replay.Store, id string, until time.Time, want bool) {
	t.Helper()
	first, err := s.Claim(ctx(), id, until)
	if err != nil || first != want {
		t.Fatalf("Claim(%q) = %v, %v; want %v, nil", id, first, err, want)
	}
}

func firstThenNotFirst(t *testing.T, s replay.Store) {
	until := time.Now().Add(time.Hour)
	claim(t, s, "a", until, true)
	claim(t, s, "a", until, false)
	claim(t, s, "a", time.Now().Add(2*time.Hour), false) // a later until does not free it
	claim(t, s, "b", until, true)
}

func concurrentClaimsExactlyOneFirst(t *testing.T, s replay.Store) {
	const copies = 32
	until := time.Now().Add(time.Hour)
	for round := range 10 {
		id := fmt.Sprint("race-", round)
		var firsts atomic.Int32
		var wg sync.WaitGroup
		start := make(chan struct{})
		for range copies {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				first, err := s.Claim(ctx(), id, until)
				if err != nil {
					t.Error(err)
				}
				if first {
					firsts.Add(1)
				}
			}()
		}
		close(start)
		wg.Wait()
		if n := firsts.Load(); n != 1 {
			t.Fatalf("round %d: %d of %d concurrent claims of one ID were first; want exactly 1", round, n, copies)
		}
	}
}

func idsComparedByteForByte(t *testing.T, s replay.Store) {
	until := time.Now().Add(time.Hour)
	// Case, a trailing NUL or space, a prefix, Unicode normalisation
	// (NFC "é" and NFD "e" + U+0301): each is another ID.
	for _, id := range []string{"id", "ID", "id\x00", "id ", "i", "\u00e9", "e\u0301"} {
		claim(t, s, id, until, true)
	}
	for _, id := range []string{"id", "ID", "id\x00", "id ", "i", "\u00e9", "e\u0301"} {
		claim(t, s, id, until, false)
	}
}

func untilNotInTheFutureRefused(t *testing.T, s replay.Store) {
	for _, until := range []time.Time{time.Now().Add(-time.Second), time.Now().Add(-time.Hour), {}} {
		first, err := s.Claim(ctx(), "past", until)
		if first || !errors.Is(err, replay.ErrExpired) {
			t.Fatalf("Claim with until %v = %v, %v; want an error matching replay.ErrExpired", until, first, err)
		}
	}
	// Refused, so nothing was recorded.
	claim(t, s, "past", time.Now().Add(time.Hour), true)
}

func claimEndsAtUntil(t *testing.T, s replay.Store) {
	var until time.Time
	id, _, _ := inTime(t, func(id string, d time.Duration) error {
		until = time.Now().Add(d)
		if first, err := s.Claim(ctx(), id, until); !first || err != nil {
			return fmt.Errorf("Claim(%q) until %v ahead = %v, %v; want true, nil", id, d, first, err)
		}
		if first, err := s.Claim(ctx(), id, time.Now().Add(time.Hour)); first || err != nil {
			return fmt.Errorf("Claim(%q) again before its until = %v, %v; want false, nil", id, first, err)
		}
		return nil
	})
	time.Sleep(time.Until(until.Add(50 * time.Millisecond)))
	claim(t, s, id, time.Now().Add(time.Hour), true)
}

func endedContextRecordsNothing(t *testing.T, s replay.Store) {
	c, cancel := context.WithCancel(ctx())
	cancel()
	first, err := s.Claim(c, "ended", time.Now().Add(time.Hour))
	if first || !errors.Is(err, context.Canceled) {
		t.Fatalf("Claim under an ended context = %v, %v; want an error matching context.Canceled", first, err)
	}
	claim(t, s, "ended", time.Now().Add(time.Hour), true)
}

func releaseFreesTheClaim(t *testing.T, s replay.Store) {
	r, ok := s.(replay.Releaser)
	if !ok {
		t.Skip("the store is not a replay.Releaser")
	}
	until := time.Now().Add(time.Hour)
	claim(t, s, "a", until, true)
	claim(t, s, "b", until, true)
	if err := r.Release(ctx(), "a"); err != nil {
		t.Fatal(err)
	}
	if err := r.Release(ctx(), "never-claimed"); err != nil {
		t.Fatalf("Release of an ID never claimed = %v; want nil", err)
	}
	claim(t, s, "a", until, true)
	claim(t, s, "b", until, false) // another ID's claim stays
}
