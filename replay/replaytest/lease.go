// Package replaytest checks that a replay store keeps the contract of the
// [replay] package. [RunClaimContract] checks [replay.Store.Claim] (and
// Release), and [RunLeaseContract] the leases; both are run by the tests
// of every store this repository ships (the memory store, redisstore,
// pgstore and sqlitestore);
// the author of another store can run them too. They use the real clock with
// short leases, so each takes about a second. [RunRecordContract] does the
// same for a [replay.Recorder], whose leases carry a fingerprint and whose
// confirmations write a result (the memory store, redisstore and pgstore
// run it). [RunReadContract] checks a [replay.Reader]: a read reports what
// an acquisition would find, and changes nothing.
// A store author starts with [RunRecordContract]; ExampleRunLeaseContract
// shows the call from a test. A store whose leases guard work in its own
// database ([replay.Transactor]) runs [RunWorkContract] too, with
// [Effects] written through its accessor of the Work's transaction.
//
// Two more contracts are for stores whose backend can fail on its own:
// [RunForgetContract] (the backend loses everything it held: no ID is ever
// accepted twice for it) and [RunDurabilityContract] (the backend cannot
// make a write as durable as the store requires: an error, never first).
// The memory store is outside both: it cannot lose its entries and keep
// serving.
package replaytest

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ctoken/ctoken/replay"
)

// Store is a replay store with leases: what [RunLeaseContract] checks.
type Store interface {
	replay.Store
	replay.Leaser
}

// Lease is the lease duration of the contract tests that wait for a lease
// to end.
const Lease = 150 * time.Millisecond

// RunLeaseContract runs every contract test against a fresh store from newStore per test.
// IDs need not be unique across calls of newStore.
func RunLeaseContract(t *testing.T, newStore func(t *testing.T) Store) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s Store)
	}{
		{"AcquireThenBusyThenDone", acquireThenBusyThenDone},
		{"BusyReportsRemainingLease", busyReportsRemainingLease},
		{"UnconfirmedLeaseEndsAndIDIsFreeAgain", unconfirmedLeaseEnds},
		{"ReleaseFreesOnlyTheHoldersLease", releaseFreesOnlyTheHoldersLease},
		{"ReleaseAfterConfirmKeepsDone", releaseAfterConfirmKeepsDone},
		{"ConfirmAfterTakeoverIsLeaseLost", confirmAfterTakeoverIsLeaseLost},
		{"ConfirmAfterLeaseEndedWithIDFreeRecordsDone", confirmAfterLeaseEndedWithIDFree},
		{"ConfirmWithForeignTokenIsLeaseLost", confirmWithForeignToken},
		{"ConfirmedEntryExpiresAtUntil", confirmedEntryExpiresAtUntil},
		{"ClaimAndLeaseShareOneEntry", claimAndLeaseShareOneEntry},
		{"ConcurrentAcquiresExactlyOneWins", concurrentAcquiresExactlyOne},
		{"NonPositiveLeaseRefused", nonPositiveLeaseRefused},
		{"FarFutureExpiryIsHeld", farFutureExpiryIsHeld},
		{"HugeLeaseIsHeld", hugeLeaseIsHeld},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, newStore(t))
		})
	}
}

func ctx() context.Context { return context.Background() }

func acquire(t *testing.T, s Store, id string, lease time.Duration, want replay.LeaseState) replay.Lease {
	t.Helper()
	l, err := s.AcquireLease(ctx(), id, lease)
	if err != nil {
		t.Fatalf("AcquireLease(%q): %v", id, err)
	}
	if l.State != want {
		t.Fatalf("AcquireLease(%q) = %v, want %v", id, l.State, want)
	}
	if (l.Token != "") != (want == replay.LeaseAcquired) {
		t.Fatalf("AcquireLease(%q) = %v with token %q", id, l.State, l.Token)
	}
	return l
}

func confirm(t *testing.T, s Store, id, token string, until time.Time) {
	t.Helper()
	if err := s.ConfirmLease(ctx(), id, token, until); err != nil {
		t.Fatalf("ConfirmLease(%q): %v", id, err)
	}
}

// inTime runs try, which takes a lease of d on id (or claims it until d
// ahead) and checks what a live one gets, until its checks were answered
// before it could end: on a fresh ID each time, with d = Lease, then twice
// as long, up to 16 times Lease. A store takes the lease after start, so a
// check answered before start+d saw it live and its error fails the test;
// one answered later proves nothing (a loaded machine can stall a call
// past Lease) and is tried again. It returns the ID, start and d of the
// try that counted.
func inTime(t *testing.T, try func(id string, d time.Duration) error) (string, time.Time, time.Duration) {
	t.Helper()
	for d := Lease; ; d *= 2 {
		id := fmt.Sprintf("in-time-%v", d)
		start := time.Now()
		err := try(id, d)
		switch took := time.Since(start); {
		case err == nil:
			return id, start, d
		case took < d:
			t.Fatal(err)
		case d >= 16*Lease:
			t.Fatalf("%v (answered %v after the acquisition began: every try outlasted its lease)", err, took)
		}
	}
}

// waitOut sleeps until a lease of d has surely ended, given start, a
// time after the store answered the acquisition (a store takes the lease
// no later than it answers, whatever the load on the way there).
func waitOut(start time.Time, d time.Duration) {
	time.Sleep(time.Until(start.Add(d + 50*time.Millisecond)))
}

func acquireThenBusyThenDone(t *testing.T, s Store) {
	l := acquire(t, s, "a", time.Minute, replay.LeaseAcquired)
	acquire(t, s, "a", time.Minute, replay.LeaseBusy)
	acquire(t, s, "b", time.Minute, replay.LeaseAcquired) // independent
	confirm(t, s, "a", l.Token, time.Now().Add(time.Hour))
	acquire(t, s, "a", time.Minute, replay.LeaseDone)
	if first, err := s.Claim(ctx(), "a", time.Now().Add(time.Hour)); first || err != nil {
		t.Fatalf("Claim of a confirmed id = %v, %v; want false, nil", first, err)
	}
}

func busyReportsRemainingLease(t *testing.T, s Store) {
	acquire(t, s, "a", 10*time.Second, replay.LeaseAcquired)
	l := acquire(t, s, "a", time.Minute, replay.LeaseBusy)
	if l.Wait <= 0 || l.Wait > 10*time.Second {
		t.Fatalf("Wait = %v, want within (0, 10s]: the holder's lease, not the asker's", l.Wait)
	}
}

func unconfirmedLeaseEnds(t *testing.T, s Store) {
	id, _, d := inTime(t, func(id string, d time.Duration) error {
		acquire(t, s, id, d, replay.LeaseAcquired)
		if l, err := s.AcquireLease(ctx(), id, d); err != nil || l.State != replay.LeaseBusy {
			return fmt.Errorf("AcquireLease(%q) while its lease of %v runs = %v, %v; want %v", id, d, l.State, err, replay.LeaseBusy)
		}
		return nil
	})
	start := time.Now() // the store took the lease before it answered
	waitOut(start, d)
	acquire(t, s, id, time.Minute, replay.LeaseAcquired)
}

func releaseFreesOnlyTheHoldersLease(t *testing.T, s Store) {
	l := acquire(t, s, "a", time.Minute, replay.LeaseAcquired)
	other := acquire(t, s, "other", time.Minute, replay.LeaseAcquired)
	if err := s.ReleaseLease(ctx(), "a", other.Token); err != nil {
		t.Fatalf("ReleaseLease with another lease's token: %v", err)
	}
	acquire(t, s, "a", time.Minute, replay.LeaseBusy)
	if err := s.ReleaseLease(ctx(), "a", l.Token); err != nil {
		t.Fatal(err)
	}
	l2 := acquire(t, s, "a", time.Minute, replay.LeaseAcquired)
	// The first holder's late release must not free the second holder's lease.
	if err := s.ReleaseLease(ctx(), "a", l.Token); err != nil {
		t.Fatal(err)
	}
	acquire(t, s, "a", time.Minute, replay.LeaseBusy)
	if err := s.ReleaseLease(ctx(), "never-leased", l2.Token); err != nil {
		t.Fatalf("ReleaseLease of an unknown id: %v", err)
	}
}

func releaseAfterConfirmKeepsDone(t *testing.T, s Store) {
	l := acquire(t, s, "a", time.Minute, replay.LeaseAcquired)
	confirm(t, s, "a", l.Token, time.Now().Add(time.Hour))
	if err := s.ReleaseLease(ctx(), "a", l.Token); err != nil {
		t.Fatal(err)
	}
	acquire(t, s, "a", time.Minute, replay.LeaseDone)
}

func confirmAfterTakeoverIsLeaseLost(t *testing.T, s Store) {
	l := acquire(t, s, "a", Lease, replay.LeaseAcquired)
	start := time.Now() // the store took the lease before it answered
	waitOut(start, Lease)
	l2 := acquire(t, s, "a", time.Minute, replay.LeaseAcquired)
	if l2.Token == l.Token {
		t.Fatal("two leases of one id got the same token")
	}
	if err := s.ConfirmLease(ctx(), "a", l.Token, time.Now().Add(time.Hour)); !errors.Is(err, replay.ErrLeaseLost) {
		t.Fatalf("ConfirmLease after another holder took the id: %v, want ErrLeaseLost", err)
	}
	confirm(t, s, "a", l2.Token, time.Now().Add(time.Hour))
	// Once the other holder confirmed, the late confirmation is still lost.
	if err := s.ConfirmLease(ctx(), "a", l.Token, time.Now().Add(time.Hour)); !errors.Is(err, replay.ErrLeaseLost) {
		t.Fatalf("ConfirmLease after another holder confirmed: %v, want ErrLeaseLost", err)
	}
}

func confirmAfterLeaseEndedWithIDFree(t *testing.T, s Store) {
	l := acquire(t, s, "a", Lease, replay.LeaseAcquired)
	start := time.Now() // the store took the lease before it answered
	waitOut(start, Lease)
	confirm(t, s, "a", l.Token, time.Now().Add(time.Hour))
	acquire(t, s, "a", time.Minute, replay.LeaseDone)
}

func confirmWithForeignToken(t *testing.T, s Store) {
	acquire(t, s, "a", time.Minute, replay.LeaseAcquired)
	for _, tok := range []string{"", "0", "not-a-token", "\x00\xff"} {
		if err := s.ConfirmLease(ctx(), "a", tok, time.Now().Add(time.Hour)); !errors.Is(err, replay.ErrLeaseLost) {
			t.Fatalf("ConfirmLease with token %q: %v, want ErrLeaseLost", tok, err)
		}
	}
	acquire(t, s, "a", time.Minute, replay.LeaseBusy)
}

func confirmedEntryExpiresAtUntil(t *testing.T, s Store) {
	l := acquire(t, s, "a", time.Minute, replay.LeaseAcquired)
	until := time.Now().Add(time.Second) // room for two calls on a loaded machine
	confirm(t, s, "a", l.Token, until)
	acquire(t, s, "a", time.Minute, replay.LeaseDone)
	time.Sleep(time.Until(until.Add(50 * time.Millisecond)))
	acquire(t, s, "a", time.Minute, replay.LeaseAcquired)
}

func claimAndLeaseShareOneEntry(t *testing.T, s Store) {
	acquire(t, s, "leased", time.Minute, replay.LeaseAcquired)
	if first, err := s.Claim(ctx(), "leased", time.Now().Add(time.Hour)); first || err != nil {
		t.Fatalf("Claim of a leased id = %v, %v; want false, nil", first, err)
	}
	if first, err := s.Claim(ctx(), "claimed", time.Now().Add(time.Hour)); !first || err != nil {
		t.Fatalf("Claim = %v, %v; want true, nil", first, err)
	}
	acquire(t, s, "claimed", time.Minute, replay.LeaseDone)
}

func concurrentAcquiresExactlyOne(t *testing.T, s Store) {
	const copies = 32
	for round := range 10 {
		id := fmt.Sprint("race-", round)
		var acquired, busy atomic.Int32
		var wg sync.WaitGroup
		start := make(chan struct{})
		for range copies {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				l, err := s.AcquireLease(ctx(), id, time.Minute)
				switch {
				case err != nil:
					t.Error(err)
				case l.State == replay.LeaseAcquired:
					acquired.Add(1)
				case l.State == replay.LeaseBusy:
					busy.Add(1)
				}
			}()
		}
		close(start)
		wg.Wait()
		if acquired.Load() != 1 || busy.Load() != copies-1 {
			t.Fatalf("round %d: %d acquired, %d busy; want 1 and %d", round, acquired.Load(), busy.Load(), copies-1)
		}
	}
}

func nonPositiveLeaseRefused(t *testing.T, s Store) {
	for _, d := range []time.Duration{0, -time.Second} {
		if l, err := s.AcquireLease(ctx(), "a", d); err == nil || l.State != 0 || l.Token != "" {
			t.Fatalf("AcquireLease with lease %v = %+v, %v; want an error and nothing", d, l, err)
		}
	}
	acquire(t, s, "a", time.Minute, replay.LeaseAcquired)
}

// farFutureExpiryIsHeld: an until far past the year 2262 (where int64 Unix
// nanoseconds end) or past where int64 Unix milliseconds end is held, not
// wrapped into the past and forgotten at once. A [replay.Bounded] store
// refuses each of them instead (an error, nothing recorded) and holds an
// until just inside its horizon.
func farFutureExpiryIsHeld(t *testing.T, s Store) {
	horizon, bounded := horizonOf(s)
	for i, until := range []time.Time{
		time.Now().Add(math.MaxInt64),
		time.Now().AddDate(300, 0, 0),
		time.Unix(1<<62, 0),
		time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC),
	} {
		id := fmt.Sprintf("claim-%d", i)
		if bounded {
			if first, err := s.Claim(ctx(), id, until); first || err == nil {
				t.Fatalf("Claim until %v past the horizon %v = %v, %v; want an error", until, horizon, first, err)
			}
			lid := fmt.Sprintf("lease-%d", i)
			l := acquire(t, s, lid, time.Second, replay.LeaseAcquired)
			if err := s.ConfirmLease(ctx(), lid, l.Token, until); err == nil {
				t.Fatalf("ConfirmLease until %v past the horizon %v succeeded; want an error", until, horizon)
			}
			until = time.Now().Add(insideHorizon(horizon))
		}
		if first, err := s.Claim(ctx(), id, until); !first || err != nil {
			t.Fatalf("Claim until %v = %v, %v; want first", until, first, err)
		}
		if first, err := s.Claim(ctx(), id, until); first || err != nil {
			t.Fatalf("second Claim until %v = %v, %v; want held", until, first, err)
		}
		acquire(t, s, id, time.Second, replay.LeaseDone)
		id = fmt.Sprintf("lease-%d", i)
		if bounded {
			id += "-inside"
		}
		l := acquire(t, s, id, time.Second, replay.LeaseAcquired)
		confirm(t, s, id, l.Token, until)
		acquire(t, s, id, time.Second, replay.LeaseDone)
	}
}

// hugeLeaseIsHeld: the longest lease a time.Duration holds does not wrap
// into an expired one. A [replay.Bounded] store refuses it (an error,
// nothing taken) and holds a lease of its whole horizon.
func hugeLeaseIsHeld(t *testing.T, s Store) {
	lease := time.Duration(math.MaxInt64)
	if horizon, bounded := horizonOf(s); bounded {
		if l, err := s.AcquireLease(ctx(), "a", lease); err == nil || l.State != 0 || l.Token != "" {
			t.Fatalf("AcquireLease past the horizon %v = %+v, %v; want an error and nothing", horizon, l, err)
		}
		lease = horizon
	}
	acquire(t, s, "a", lease, replay.LeaseAcquired)
	if l := acquire(t, s, "a", lease, replay.LeaseBusy); l.Wait <= 0 {
		t.Fatalf("busy lease reports Wait %v; want positive", l.Wait)
	}
}

// horizonOf returns the store's horizon if it is [replay.Bounded].
func horizonOf(s Store) (time.Duration, bool) {
	if b, ok := s.(replay.Bounded); ok {
		return b.Horizon(), true
	}
	return 0, false
}

// insideHorizon is an until offset safely inside horizon, allowing for the
// time a call takes and for clocks a little apart.
func insideHorizon(horizon time.Duration) time.Duration {
	if horizon > 4*time.Second {
		return horizon - 2*time.Second
	}
	return horizon / 2
}
