package pgstore

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ctoken/ctoken/replay"
)

// wantClaim fails t unless s's Claim of id until until returns first ==
// want and an error matching target (nil: no error).
func wantClaim(t testing.TB, s *Store, id string, until time.Time, want bool, target error) {
	t.Helper()
	if first, err := s.Claim(bg(), id, until); first != want || !errors.Is(err, target) {
		t.Fatalf("Claim(%q) = %v, %v; want %v, %v", id, first, err, want, target)
	}
}

// wantLease fails t unless s's AcquireLease of id (for a minute) reports
// state with an error matching target (nil: no error).
func wantLease(t testing.TB, s *Store, id string, state replay.LeaseState, target error) {
	t.Helper()
	if l, err := s.AcquireLease(bg(), id, time.Minute); l.State != state || !errors.Is(err, target) {
		t.Fatalf("AcquireLease(%q) = %+v, %v; want %v, %v", id, l, err, state, target)
	}
}

// TestClaim pins what PostgreSQL adds to the claim contract (TestStore:
// first once, refused after, racing claims, release); an expired row taken
// over: the racers' rounds and slowInstanceClockNeverMakesAReplayFirst.
func TestClaim(t *testing.T) {
	subtests(t, []subtest{
		{"one first at every isolation level", concurrentClaimsAtEveryIsolationLevelOneFirst},
		{"until rounded up to microseconds", claimStoresUntilRoundedUpToMicroseconds},
		{"slow instance clock makes no replay first", slowInstanceClockNeverMakesAReplayFirst},
		{"until far in the past expired, never wrapped", untilFarInThePastIsExpiredNeverWrapped},
		{"refusals write nothing", refusalsWriteNothing},
		{"beyond the horizon refused", beyondTheHorizonRefused},
	})
}

// beyondTheHorizonRefused: with Options.Horizon, a claim, confirmation or
// work's commit whose until lies past it and a lease longer than it are
// refused with ErrInvalidClaim before anything is sent (a fence of
// unknown history lasts the Horizon: a longer claim would outlive it);
// within it they are served.
func beyondTheHorizonRefused(t *testing.T) {
	const horizon = time.Hour
	s := newTestStore(t, func(o *Options) { o.Horizon = horizon })
	past, within := time.Now().Add(horizon+time.Minute), time.Now().Add(horizon-time.Minute)
	wantClaim(t, s, "past", past, false, ErrInvalidClaim)
	wantClaim(t, s, "past", within, true, nil) // the refusal consumed nothing
	for name, err := range map[string]error{
		"AcquireLease":  errOf(s.AcquireLease(bg(), "lease", horizon+time.Second)),
		"AcquireRecord": errOf(s.AcquireRecord(bg(), "record", horizon+time.Second, []byte("fp"))),
		"RenewLease":    s.RenewLease(bg(), "lease", strings.Repeat("0", tokenLen), horizon+time.Second),
		"AcquireWork":   func() error { _, _, err := s.AcquireWork(bg(), "work", horizon+time.Second, []byte("fp")); return err }(),
	} {
		wantIs(t, err, ErrInvalidClaim, name+" longer than the horizon = %v; want ErrInvalidClaim")
	}
	l := mustLease(t, s, "confirmed", time.Minute)
	wantIs(t, s.ConfirmLease(bg(), "confirmed", l.Token, past), ErrInvalidClaim, "ConfirmLease past the horizon = %v; want ErrInvalidClaim")
	must(t, s.ConfirmLease(bg(), "confirmed", l.Token, within))
	r := mustRecord(t, s, "work", time.Minute, []byte("fp"))
	w, err := s.BeginWork(bg(), "work", r.Token)
	must(t, err)
	wantIs(t, w.Commit(bg(), past, []byte("fp"), []byte("r")), ErrInvalidClaim, "a Work's Commit past the horizon = %v; want ErrInvalidClaim")
}

// concurrentClaimsAtEveryIsolationLevelOneFirst: whatever isolation
// level the pool's sessions use, of 16 concurrent claims of one ID — a
// fresh one, or one whose row has expired (two takeovers race) — exactly
// one is first. Under read committed the others report false; under
// repeatable read and serializable they may instead fail closed with a
// serialization failure (ErrUnavailable), and resending those never makes
// the ID first a second time.
func concurrentClaimsAtEveryIsolationLevelOneFirst(t *testing.T) {
	p := needServer(t)
	admin := p.pool(t)
	for _, level := range []string{"read committed", "repeatable read", "serializable"} {
		t.Run(level, func(t *testing.T) {
			s := storeOn(t, p.pool(t, "default_transaction_isolation", level))
			var got string
			if err := s.pool.QueryRow(bg(), `SELECT current_setting('transaction_isolation')`).Scan(&got); err != nil || got != level {
				t.Fatalf("session isolation %q (%v), want %q", got, err, level)
			}
			for round := range 10 {
				id := fmt.Sprint("race-", round)
				if round%2 == 1 { // an expired row: the racers take it over
					mustClaim(t, s, id, time.Now().Add(time.Hour))
					mustExec(t, admin, `UPDATE `+s.table+` SET until = now() - interval '1 second' WHERE key = $1`, s.key(id))
				}
				const racers = 16
				var firsts, failed atomic.Int32
				var wg sync.WaitGroup
				start := make(chan struct{})
				for range racers {
					wg.Go(func() {
						<-start
						first, err := s.Claim(bg(), id, time.Now().Add(time.Hour))
						switch {
						case first:
							firsts.Add(1)
						case err == nil:
						case errors.Is(err, ErrUnavailable) && level != "read committed":
							failed.Add(1)
						default:
							t.Errorf("Claim under %s: %v", level, err)
						}
					})
				}
				close(start)
				wg.Wait()
				// The failed ones resend, until each is decided.
				for range failed.Load() {
					for try := 0; ; try++ {
						first, err := s.Claim(bg(), id, time.Now().Add(time.Hour))
						if first {
							firsts.Add(1)
						}
						if err == nil {
							break
						}
						if try == 20 {
							t.Fatalf("resend under %s still fails: %v", level, err)
						}
					}
				}
				if firsts.Load() != 1 {
					t.Fatalf("round %d under %s: %d first claims (%d failed closed), want 1", round, level, firsts.Load(), failed.Load())
				}
			}
		})
	}
}

func claimStoresUntilRoundedUpToMicroseconds(t *testing.T) {
	s := newTestStore(t)
	until := time.Now().Add(time.Hour).Truncate(time.Microsecond).Add(400 * time.Nanosecond)
	mustClaim(t, s, "abs", until)
	var got time.Time
	must(t, s.pool.QueryRow(bg(), `SELECT until FROM `+s.table+` WHERE key = $1`, s.key("abs")).Scan(&got))
	if want := until.Truncate(time.Microsecond).Add(time.Microsecond); !got.Equal(want) {
		t.Fatalf("until stored as %v, want %v (rounded up)", got, want)
	}
	mustClaim(t, s, "forever", time.Unix(1<<62, 0))
	var inf bool
	if err := s.pool.QueryRow(bg(), `SELECT until = 'infinity' FROM `+s.table+` WHERE key = $1`, s.key("forever")).Scan(&inf); err != nil || !inf {
		t.Fatalf("until past the year 9999 stored as infinity: %v (%v)", inf, err)
	}
}

// slowInstanceClockNeverMakesAReplayFirst: a token claimed until its
// expiry plus the skew margin; once that until has passed by the
// database's clock, an instance whose clock is behind (and so still takes
// the token for valid) claims it again with the same until: refused as
// expired, never first.
func slowInstanceClockNeverMakesAReplayFirst(t *testing.T) {
	s := newTestStore(t)
	until := time.Now().Add(300 * time.Millisecond) // the token's expiry + margin, compressed
	mustClaim(t, s, "token", until)
	time.Sleep(time.Until(until.Add(100 * time.Millisecond)))
	wantClaim(t, s, "token", until, false, replay.ErrExpired) // the original until, passed
}

// untilFarInThePastIsExpiredNeverWrapped: an until before the year 1 —
// however far, including one whose microseconds overflow int64 into the
// near future — is refused as expired by Claim and ConfirmLease, never
// recorded.
func untilFarInThePastIsExpiredNeverWrapped(t *testing.T) {
	s := newTestStore(t)
	wrapped := wrapsTo(time.Now().Add(time.Hour))
	if wrapped.Year() > -1e6 {
		t.Fatalf("wrapsTo made %v", wrapped)
	}
	for i, until := range []time.Time{
		wrapped,
		wrapsTo(time.Now().Add(24 * time.Hour)),
		time.Date(0, 12, 31, 23, 59, 59, 0, time.UTC),
		time.Date(-4713, 1, 1, 0, 0, 0, 0, time.UTC), // before PostgreSQL's first timestamptz
		time.Unix(-1<<62, 0),
		time.Unix(math.MinInt64, 0),
	} {
		id := fmt.Sprint("past-", i)
		if first, err := s.Claim(bg(), id, until); first || !errors.Is(err, ErrInvalidClaim) || !errors.Is(err, replay.ErrExpired) {
			t.Fatalf("Claim until %v = %v, %v; want ErrInvalidClaim and replay.ErrExpired", until, first, err)
		}
		l := mustLease(t, s, id, time.Minute) // nothing recorded
		if err := s.ConfirmLease(bg(), id, l.Token, until); !errors.Is(err, ErrInvalidClaim) || !errors.Is(err, replay.ErrExpired) {
			t.Fatalf("ConfirmLease until %v: %v; want ErrInvalidClaim and replay.ErrExpired", until, err)
		}
		if got := countRows(t, s, fmt.Sprintf("key = '\\x%x'::bytea AND state <> 'l'", s.key(id))); got != 0 {
			t.Fatalf("until %v left %d claimed or done rows", until, got)
		}
	}
}

// refusalsWriteNothing: a refused claim, a busy or done acquire and a
// lost confirmation neither write a row version nor lock the row (xmin and
// xmax unchanged), so a flood of replays costs reads, not commits.
func refusalsWriteNothing(t *testing.T) {
	s := newTestStore(t)
	until := time.Now().Add(time.Hour)
	version := func(id string) string {
		var v string
		must(t, s.pool.QueryRow(bg(), `SELECT xmin::text || '/' || xmax::text || '/' || ctid::text FROM `+s.table+` WHERE key = $1`, s.key(id)).Scan(&v))
		return v
	}
	mustClaim(t, s, "claimed", until)
	l := mustLease(t, s, "leased", time.Minute)
	claimed, leased := version("claimed"), version("leased")
	for range 5 {
		wantClaim(t, s, "claimed", until, false, nil)
		wantLease(t, s, "claimed", replay.LeaseDone, nil)
		wantLease(t, s, "leased", replay.LeaseBusy, nil)
		wantClaim(t, s, "leased", until, false, nil)
	}
	if v := version("claimed"); v != claimed {
		t.Fatalf("refusals of a claimed row changed it: %s, then %s", claimed, v)
	}
	if v := version("leased"); v != leased {
		t.Fatalf("refusals of a leased row changed it: %s, then %s", leased, v)
	}
	must(t, s.ConfirmLease(bg(), "leased", l.Token, until))
}

// TestKeys pins the keys a Store writes (TestStore's stores each have a
// prefix of their own on one table).
func TestKeys(t *testing.T) {
	subtests(t, []subtest{
		{"nested prefixes never share keys", nestedPrefixesNeverShareKeys},
		{"invalid IDs refused without recording", invalidIDsRefusedWithoutRecording},
		{"longest prefix and ID held", longestPrefixAndIDAreHeld},
		{"errors never contain the ID", errorsNeverContainTheID},
	})
}

// nestedPrefixesNeverShareKeys: two stores on one table whose prefixes
// nest ("<p>" and "<p>webhooks:") never see each other's claims, leases or
// releases: the outer store's Release("webhooks:evt_1") and its claim of
// "webhooks:evt_1" leave the inner store's claim of "evt_1" in force (with
// the key layout before v2 both were the row "<p>webhooks:evt_1", and the
// inner store accepted evt_1 twice).
func nestedPrefixesNeverShareKeys(t *testing.T) {
	outerPrefix := uniquePrefix()
	outer := newTestStore(t, func(o *Options) { o.Prefix = outerPrefix })
	inner := newTestStore(t, func(o *Options) { o.Prefix = outerPrefix + "webhooks:" })
	until := time.Now().Add(time.Hour)
	t.Run("release", func(t *testing.T) {
		mustClaim(t, inner, "evt_1", until)
		must(t, outer.Release(bg(), "webhooks:evt_1"))
		wantClaim(t, inner, "evt_1", until, false, nil)
	})
	t.Run("claim", func(t *testing.T) {
		mustClaim(t, inner, "evt_2", until)
		mustClaim(t, outer, "webhooks:evt_2", until)
		wantClaim(t, outer, "webhooks:evt_2", until, false, nil)
		wantClaim(t, inner, "evt_2", until, false, nil)
		must(t, inner.Release(bg(), "evt_2"))
		wantClaim(t, outer, "webhooks:evt_2", until, false, nil)
		mustClaim(t, inner, "evt_2", until)
	})
	t.Run("lease", func(t *testing.T) {
		l := mustLease(t, inner, "evt_3", time.Minute)
		o := mustLease(t, outer, "webhooks:evt_3", time.Minute) // a key of its own
		must(t, outer.ReleaseLease(bg(), "webhooks:evt_3", o.Token))
		wantIs(t, inner.ConfirmLease(bg(), "evt_3", l.Token, until), nil, "inner ConfirmLease after the outer store released its own lease: %v")
		wantLease(t, inner, "evt_3", replay.LeaseDone, nil) // confirmed
	})
}

func invalidIDsRefusedWithoutRecording(t *testing.T) {
	s := newTestStore(t)
	until := time.Now().Add(time.Minute)
	for _, id := range []string{"", strings.Repeat("x", MaxIDBytes+1)} {
		wantClaim(t, s, id, until, false, ErrInvalidClaim)
		wantIs(t, errOf(s.AcquireLease(bg(), id, time.Minute)), ErrInvalidClaim, "AcquireLease(%d bytes): %v", len(id))
		wantIs(t, s.ConfirmLease(bg(), id, strings.Repeat("a", tokenLen), until), ErrInvalidClaim, "ConfirmLease(%d bytes): %v", len(id))
		wantIs(t, s.ReleaseLease(bg(), id, strings.Repeat("a", tokenLen)), ErrInvalidClaim, "ReleaseLease(%d bytes): %v", len(id))
		wantIs(t, s.Release(bg(), id), ErrInvalidClaim, "Release(%d bytes): %v", len(id))
	}
	// Any bytes make an ID, NUL and invalid UTF-8 included; the longest is held.
	for _, id := range []string{"\x00\xff", strings.Repeat("y", MaxIDBytes)} {
		mustClaim(t, s, id, until)
		wantClaim(t, s, id, until, false, nil)
	}
}

// longestPrefixAndIDAreHeld: a key of the longest prefix New accepts
// and the longest ID, of incompressible bytes, fits the primary key's
// index: claimed first once, then refused. (A prefix of a few kilobytes
// would fail every claim; New refuses it: TestNew/refuses bad configuration.)
func longestPrefixAndIDAreHeld(t *testing.T) {
	random := func(n int) string {
		b := make([]byte, n)
		rand.Read(b)
		return string(b)
	}
	s := newTestStore(t, func(o *Options) { o.Prefix = random(MaxPrefixBytes) })
	id := random(MaxIDBytes)
	until := time.Now().Add(time.Minute)
	mustClaim(t, s, id, until)
	wantClaim(t, s, id, until, false, nil)
}

func errorsNeverContainTheID(t *testing.T) {
	s := newTestStore(t)
	id := "secret-delivery-id-1234"
	mustExec(t, s.pool, `SELECT 1`)
	ctx, cancel := context.WithCancel(bg())
	cancel()
	_, err1 := s.Claim(ctx, id, time.Now().Add(time.Minute))
	_, err2 := s.Claim(bg(), id, time.Now().Add(-time.Minute))
	_, err3 := s.AcquireLease(ctx, id, time.Minute)
	token := strings.Repeat("a", tokenLen)
	err4 := s.ConfirmLease(ctx, id, token, time.Now().Add(time.Minute))
	err5 := s.ReleaseLease(ctx, id, token)
	err6 := s.Release(ctx, id)
	err7 := s.ConfirmLease(bg(), id, token, time.Now().Add(-time.Minute))
	for _, err := range []error{err1, err2, err3, err4, err5, err6, err7} {
		if err == nil || strings.Contains(err.Error(), id) || strings.Contains(err.Error(), token) {
			t.Fatalf("error %v is nil or contains the id or the token", err)
		}
	}
}

// wrapsTo returns an instant hundreds of millions of years in the past
// whose microseconds since 1970 overflow int64 to exactly target's: a
// driver that multiplies seconds by 10^6 without a check sends target.
func wrapsTo(target time.Time) time.Time {
	m := uint64(target.Truncate(time.Microsecond).UnixMicro()) &^ 63 // a multiple of 2^6, as 10^6 = 2^6 * 15625 is
	// x * 15625 ≡ m/64 (mod 2^58): invert 15625 modulo 2^58 (Newton).
	const mask = 1<<58 - 1
	inv := uint64(1)
	for range 6 {
		inv = inv * (2 - 15625*inv) & mask
	}
	x := int64((m/64)*inv&mask) - 1<<58 // in [-2^58, 0): far in the past
	return time.Unix(x, 0)
}
