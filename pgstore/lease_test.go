package pgstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ctoken/ctoken/replay"
)

// TestRenewLease pins [Store.RenewLease] against real PostgreSQL.
func TestRenewLease(t *testing.T) {
	subtests(t, []subtest{
		{"by the database's clock, row kept", renewIsMeasuredByTheDatabaseAndKeepsTheRow},
		{"held steps refuse a forgotten, fenced or refusing table", heldStepsRefuseAForgottenFencedOrRefusingTable},
		{"waits for a concurrent writer, then judges its row", renewWaitsForAConcurrentWriterThenJudgesItsRow},
		{"bounded by the store's timeout", renewIsBoundedByTheStoresTimeout},
		{"through a Work", renewThroughAWork},
		{"closed pool", renewOnAClosedPoolIsUnavailable},
	})
}

// leaseLeft is how long id's row has left by the database's clock, and
// its state.
func leaseLeft(t *testing.T, s *Store, id string) (time.Duration, string) {
	t.Helper()
	var secs float64
	var state string
	err := s.pool.QueryRow(bg(), `SELECT extract(epoch FROM until - now())::float8, state FROM `+s.table+` WHERE key = $1`, s.key(id)).Scan(&secs, &state)
	must(t, err)
	return time.Duration(secs * float64(time.Second)), state
}

// A renewal sets the row's until from the database's clock, whatever the
// instance's, and changes nothing else: the state, the token and the
// fingerprint of AcquireRecord stay. A token that is not the live lease's
// writes nothing.
func renewIsMeasuredByTheDatabaseAndKeepsTheRow(t *testing.T) {
	s := newTestStore(t)
	r := mustRecord(t, s, "a", 10*time.Second, []byte("fp"))
	must(t, s.RenewLease(bg(), "a", r.Token, 90*time.Second+time.Nanosecond))
	if left, state := leaseLeft(t, s, "a"); left <= 89*time.Second || left > 90*time.Second+time.Microsecond || state != "l" {
		t.Fatalf("row after the renewal: %v left, state %q; want about 90s, 'l'", left, state)
	}
	var token string
	var fp, result []byte
	must(t, s.pool.QueryRow(bg(), `SELECT token, fingerprint, result FROM `+s.table+` WHERE key = $1`, s.key("a")).Scan(&token, &fp, &result))
	if token != r.Token || !bytes.Equal(fp, []byte("fp")) || result != nil {
		t.Fatalf("row after the renewal: token %q, fingerprint %q, result %q; want the lease's, unchanged", token, fp, result)
	}
	before, _ := rowOf(t, s, "a")
	other := mustLease(t, s, "other", time.Minute)
	wantIs(t, s.RenewLease(bg(), "a", other.Token, time.Hour), replay.ErrLeaseLost, "renewal with another lease's token = %v; want ErrLeaseLost")
	if after, _ := rowOf(t, s, "a"); after.xmin != before.xmin {
		t.Fatal("a renewal with another token wrote the row")
	}
}

// heldStepsRefuseAForgottenFencedOrRefusingTable: while the table cannot
// vouch for its claims (no marker row, Rearm's fence, another timeline, a
// refusing recheck), a held ID's step and a new ID's acquire refuse with
// that reason before writing anything, and the held step succeeds once the
// cause is gone.
func heldStepsRefuseAForgottenFencedOrRefusingTable(t *testing.T) {
	steps := []struct {
		name    string
		hold    func(t *testing.T, s *Store) (token string) // of "held"
		step    func(s *Store, token string) error
		acquire func(s *Store) (replay.LeaseState, error) // of "new"
		done    func(t *testing.T, s *Store)              // after the step succeeded
	}{
		{"renewal",
			func(t *testing.T, s *Store) string { return mustLease(t, s, "held", time.Minute).Token },
			func(s *Store, token string) error { return s.RenewLease(bg(), "held", token, time.Hour) },
			func(s *Store) (replay.LeaseState, error) {
				l, err := s.AcquireLease(bg(), "new", time.Minute)
				return l.State, err
			},
			func(t *testing.T, s *Store) {
				if left, _ := leaseLeft(t, s, "held"); left <= 59*time.Minute {
					t.Fatalf("%v left after the renewal; want about an hour", left)
				}
			}},
		{"record",
			func(t *testing.T, s *Store) string { return mustRecord(t, s, "held", time.Minute, []byte("fp")).Token },
			func(s *Store, token string) error {
				return s.ConfirmRecord(bg(), "held", token, time.Now().Add(time.Hour), []byte("fp"), []byte("r"))
			},
			func(s *Store) (replay.LeaseState, error) {
				r, err := s.AcquireRecord(bg(), "new", time.Minute, []byte("fp"))
				return r.State, err
			},
			func(t *testing.T, s *Store) { wantRecord(t, s, "held", replay.LeaseDone, []byte("fp"), []byte("r")) }},
	}
	pool := needServer(t).pool(t)
	marker := func(name, set string, args ...any) {
		mustExec(t, pool, `UPDATE "`+name+`" SET `+set+` WHERE key = `+markerSQL, args...)
	}
	refusing := func(s *Store, sentinel error, what string) func() {
		refusal := fmt.Errorf("%w: %w: %s (test)", ErrUnavailable, sentinel, what)
		s.refusal.Store(&refusal)
		return func() { s.refusal.Store(nil) }
	}
	causes := []struct {
		name  string
		want  error
		cause func(s *Store, name string) (undo func()) // makes the table refuse
	}{
		{"on another timeline than the record's", ErrForgotten, func(s *Store, name string) func() {
			var record string
			must(t, pool.QueryRow(bg(), `SELECT token FROM "`+name+`" WHERE key = `+markerSQL).Scan(&record))
			marker(name, "token = $1", history{V: 1, TL: 99, Longest: 64}.encode())
			return func() { marker(name, "token = $1", record) }
		}},
		{"without the marker row", ErrForgotten, func(s *Store, name string) func() {
			mustExec(t, pool, `DELETE FROM "`+name+`" WHERE key = `+markerSQL)
			return func() { must(t, Rearm(bg(), pool, name, 0)) }
		}},
		{"before the fence", ErrForgotten, func(s *Store, name string) func() {
			mustExec(t, pool, `DELETE FROM "`+name+`" WHERE key = `+markerSQL)
			must(t, Rearm(bg(), pool, name, time.Hour))
			return func() { marker(name, "until = now()") }
		}},
		{"while a recheck refuses", ErrConfig, func(s *Store, _ string) func() { return refusing(s, ErrConfig, "synchronous_commit is off") }},
		{"while a recheck refuses after a promotion", ErrFenced, func(s *Store, _ string) func() { return refusing(s, ErrFenced, "the server's history is unknown") }},
	}
	for _, st := range steps {
		for _, c := range causes {
			t.Run(st.name+" "+c.name, func(t *testing.T) {
				name := migratedTable(t, pool)
				s := storeOn(t, pool, func(o *Options) { o.Table = name; o.RecheckInterval = time.Hour })
				token := st.hold(t, s)
				before, _ := rowOf(t, s, "held")
				undo := c.cause(s, name)
				if err := st.step(s, token); !errors.Is(err, c.want) || !errors.Is(err, ErrUnavailable) {
					t.Fatalf("the held step = %v; want %v", err, c.want)
				}
				if state, err := st.acquire(s); !errors.Is(err, c.want) || !errors.Is(err, ErrUnavailable) || state != 0 {
					t.Fatalf("the acquire of a new ID = %v, %v; want %v, as the held step", state, err, c.want)
				}
				if after, _ := rowOf(t, s, "held"); after.xmin != before.xmin {
					t.Fatalf("the held step wrote its row (%+v, was %+v)", after, before)
				}
				if _, ok := rowOf(t, s, "new"); ok {
					t.Fatal("the acquire of a new ID wrote a row")
				}
				undo()
				must(t, st.step(s, token))
				st.done(t, s)
			})
		}
	}
}

// A renewal of a row that another transaction is changing waits for it
// and judges the row's newest version: when that transaction confirmed
// the lease (as a Work's Commit does) the renewal is lost and the done
// row keeps its until; when it rolled back, the lease is renewed.
func renewWaitsForAConcurrentWriterThenJudgesItsRow(t *testing.T) {
	s := newTestStore(t)
	for _, commit := range []bool{true, false} {
		id := fmt.Sprint("raced-", commit)
		l := mustLease(t, s, id, time.Minute)
		tx := mustBegin(t, s.pool)
		mustExec(t, tx, `UPDATE `+s.table+` SET state = 'd', until = now() + interval '2 minutes' WHERE key = $1`, s.key(id))
		done := make(chan error, 1)
		go func() { done <- s.RenewLease(bg(), id, l.Token, time.Hour) }()
		waitForLockWaiter(t, s.pool)
		select {
		case err := <-done:
			tx.Rollback(bg())
			t.Fatalf("the renewal returned %v while another transaction held the row", err)
		default:
		}
		end := tx.Rollback
		if commit {
			end = tx.Commit
		}
		must(t, end(bg()))
		err := <-done
		left, state := leaseLeft(t, s, id)
		switch {
		case commit && (!errors.Is(err, replay.ErrLeaseLost) || state != "d" || left > 2*time.Minute):
			t.Fatalf("renewal after a concurrent confirm = %v (row %q, %v left); want ErrLeaseLost and the done row as written", err, state, left)
		case !commit && (err != nil || state != "l" || left <= 59*time.Minute):
			t.Fatalf("renewal after a concurrent writer rolled back = %v (row %q, %v left); want renewed", err, state, left)
		}
	}
}

// The store's Timeout bounds a renewal that waits for a row lock: it
// fails with ErrUnavailable and the deadline, never ErrLeaseLost. Its
// outcome is unknown, as RenewLease says: the statement sent may still run
// once the lock is gone (the server notices the closed session only when
// it answers), so the row is still token's lease, renewed or not.
func renewIsBoundedByTheStoresTimeout(t *testing.T) {
	s := newTestStore(t)
	s.timeout = 300 * time.Millisecond // Options.Timeout, set after New so that its checks keep the generous one
	l := mustLease(t, s, "locked", time.Minute)
	tx := mustBegin(t, s.pool)
	mustExec(t, tx, `SELECT 1 FROM `+s.table+` WHERE key = $1 FOR UPDATE`, s.key("locked"))
	start := time.Now()
	err := s.RenewLease(bg(), "locked", l.Token, time.Hour)
	took := time.Since(start)
	must(t, tx.Rollback(bg()))
	if !errors.Is(err, ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, replay.ErrLeaseLost) {
		t.Fatalf("renewal of a locked row past the Timeout = %v; want ErrUnavailable and DeadlineExceeded", err)
	}
	if took > 5*time.Second {
		t.Fatalf("the renewal took %v with a Timeout of 300ms", took)
	}
	var token string
	must(t, s.pool.QueryRow(bg(), `SELECT token FROM `+s.table+` WHERE key = $1`, s.key("locked")).Scan(&token))
	if left, state := leaseLeft(t, s, "locked"); left > time.Hour || state != "l" || token != l.Token {
		t.Fatalf("row after the timed-out renewal: %v left, %q, token %q; want the lease, renewed or not", left, state, token)
	}
}

// A Work of AcquireWork holds its lease as its transaction's advisory
// lock, with no row until its Commit: its token renews nothing
// (ErrLeaseLost, from outside the Work or from its handler's context), and
// the Work commits with the lease it was given. A Work of BeginWork runs
// under a committed lease row, which renews as any other; its Commit then
// checks the new end.
func renewThroughAWork(t *testing.T) {
	s := newTestStore(t)
	t.Run("AcquireWork", func(t *testing.T) {
		r, w, err := s.AcquireWork(bg(), "locked", time.Minute, []byte("fp"))
		if err != nil || w == nil || r.State != replay.LeaseAcquired {
			t.Fatalf("AcquireWork = %+v, %v, %v", r, w, err)
		}
		defer w.Rollback(bg())
		ctx := w.Context(bg())
		tx, err := TxFrom(ctx)
		must(t, err)
		mustExec(t, tx, `SELECT 1`)
		for _, c := range []context.Context{bg(), ctx} {
			wantIs(t, s.RenewLease(c, "locked", r.Token, time.Hour), replay.ErrLeaseLost, "RenewLease of an AcquireWork's token = %v; want ErrLeaseLost")
		}
		if _, ok := rowOf(t, s, "locked"); ok {
			t.Fatal("the renewal wrote a row for the Work's ID")
		}
		wantLease(t, s, "locked", replay.LeaseBusy, nil) // the Work runs
		until := time.Now().Add(time.Hour)
		wantIs(t, w.Commit(bg(), until, []byte("fp"), []byte("result")), nil, "Commit after the refused renewals: %v")
		if left, state := leaseLeft(t, s, "locked"); state != "d" || left > time.Hour {
			t.Fatalf("row after the Commit: %q, %v left; want done until the Commit's until", state, left)
		}
		wantIs(t, s.RenewLease(bg(), "locked", r.Token, 2*time.Hour), replay.ErrLeaseLost, "RenewLease after the Commit = %v; want ErrLeaseLost")
	})
	t.Run("BeginWork", func(t *testing.T) {
		w, token := acquire(t, s, "begun", time.Second)
		ctx := w.Context(bg())
		tx, err := TxFrom(ctx)
		must(t, err)
		mustExec(t, tx, `SELECT 1`)
		wantIs(t, s.RenewLease(ctx, "begun", token, time.Minute), nil, "RenewLease of a BeginWork's committed lease: %v")
		time.Sleep(1500 * time.Millisecond) // past the first end
		wantIs(t, w.Commit(bg(), time.Now().Add(time.Hour), []byte("fp"), []byte("result")), nil, "Commit after the renewal, past the lease's first end: %v")
		wantIs(t, s.RenewLease(bg(), "begun", token, time.Hour), replay.ErrLeaseLost, "RenewLease after the Commit = %v; want ErrLeaseLost")
	})
}

// On a closed pool a renewal fails with an error matching ErrUnavailable
// (never ErrLeaseLost: whether the lease is live is unknown); invalid
// arguments are refused before any statement, with their own errors.
func renewOnAClosedPoolIsUnavailable(t *testing.T) {
	pool := needServer(t).pool(t)
	s := storeOn(t, pool)
	l := mustLease(t, s, "a", time.Minute)
	pool.Close()
	err := s.RenewLease(bg(), "a", l.Token, time.Hour)
	if !errors.Is(err, ErrUnavailable) || errors.Is(err, replay.ErrLeaseLost) || !strings.Contains(err.Error(), "closed") {
		t.Fatalf("RenewLease on a closed pool = %v; want ErrUnavailable naming the closed pool", err)
	}
	for _, tc := range []struct {
		id, token string
		lease     time.Duration
		is        []error
	}{
		{"", l.Token, time.Minute, []error{ErrInvalidClaim}},
		{strings.Repeat("x", MaxIDBytes+1), l.Token, time.Minute, []error{ErrInvalidClaim}},
		{"a", l.Token, 0, []error{ErrInvalidClaim, replay.ErrExpired}},
		{"a", l.Token, -time.Second, []error{ErrInvalidClaim, replay.ErrExpired}},
		{"a", "forged", time.Minute, []error{replay.ErrLeaseLost}},
		{"a", strings.ToUpper(l.Token), time.Minute, []error{replay.ErrLeaseLost}},
	} {
		err := s.RenewLease(bg(), tc.id, tc.token, tc.lease)
		for _, want := range tc.is {
			if !errors.Is(err, want) || errors.Is(err, ErrUnavailable) {
				t.Errorf("RenewLease(len %d, %q, %v) on a closed pool = %v; want %v before any statement", len(tc.id), tc.token, tc.lease, err, tc.is)
			}
		}
	}
}
