package pgstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/ctoken/ctoken/replay"
)

// twinStores are two Stores of one table and prefix on pools of their
// own, as two instances of an app are.
func twinStores(t *testing.T) (a, b *Store) {
	t.Helper()
	p := needServer(t)
	prefix := uniquePrefix()
	same := func(o *Options) { o.Prefix = prefix }
	return storeOn(t, p.pool(t), same), storeOn(t, p.pool(t), same)
}

// acquireWork takes id with AcquireWork and fails t unless it acquired;
// the Work is rolled back when t ends.
func acquireWork(t *testing.T, s *Store, id string, fp []byte) replay.Work {
	t.Helper()
	r, w, err := s.AcquireWork(bg(), id, time.Minute, fp)
	if err != nil || r.State != replay.LeaseAcquired || w == nil || !validToken(r.Token) {
		t.Fatalf("AcquireWork(%q) = %+v, %v, %v; want acquired with a Work", id, r, w, err)
	}
	t.Cleanup(func() { w.Rollback(bg()) })
	return w
}

// busyAnswer is how a Record for a busy ID compares with the caller's
// fingerprint, as the idempotency middleware reads it: "same" (409, the
// holder may be the same request), "other" (422).
func busyAnswer(t *testing.T, r replay.Record, fp []byte) string {
	t.Helper()
	if r.State != replay.LeaseBusy {
		t.Fatalf("state = %v, want busy", r.State)
	}
	if len(r.Fingerprint) > 0 && !bytes.Equal(r.Fingerprint, fp) {
		return "other"
	}
	return "same"
}

// TestAcquireWork pins [Store.AcquireWork].
func TestAcquireWork(t *testing.T) {
	subtests(t, []subtest{
		{"agrees with every acquire", acquireWorkAgreesWithEveryAcquire},
		{"commits at most once", acquireWorkCommitsAtMostOnce},
		{"terminated connection keeps nothing", acquireWorkTerminatedConnectionKeepsNothing},
		{"refusals", acquireWorkRefusals},
		{"lease bounds the work", acquireWorkLeaseBoundsTheWork},
	})
}

// acquireWorkAgreesWithEveryAcquire: while a Work of AcquireWork holds
// an ID, every acquire of another Store on the table (AcquireWork,
// AcquireRecord, AcquireLease) finds it busy, and tells the same request
// (409) from another (422); while an AcquireRecord lease is live,
// AcquireWork finds it busy with its fingerprint; after the Work's
// Commit, every acquire finds the record. (After its Rollback:
// replaytest.RunWorkContract.)
func acquireWorkAgreesWithEveryAcquire(t *testing.T) {
	a, b := twinStores(t)
	fp, other := []byte("fp-first"), []byte("fp-other")
	answers := []struct {
		fp   []byte
		want string
	}{{fp, "same"}, {other, "other"}}
	t.Run("a Work holds the ID", func(t *testing.T) {
		id := "held"
		acquireWork(t, a, id, fp)
		tests := []struct {
			name    string
			acquire func(fp []byte) (replay.Record, error)
		}{
			{"AcquireWork", func(fp []byte) (replay.Record, error) {
				r, w, err := b.AcquireWork(bg(), id, time.Minute, fp)
				if w != nil {
					t.Error("a busy AcquireWork returned a Work")
				}
				return r, err
			}},
			{"AcquireRecord", func(fp []byte) (replay.Record, error) { return b.AcquireRecord(bg(), id, time.Minute, fp) }},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				for _, c := range answers {
					r, err := tt.acquire(c.fp)
					must(t, err)
					if got := busyAnswer(t, r, c.fp); got != c.want {
						t.Errorf("fingerprint %q: answer %s, want %s", c.fp, got, c.want)
					}
				}
			})
		}
		t.Run("AcquireLease", func(t *testing.T) { wantLease(t, b, id, replay.LeaseBusy, nil) })
		if row, ok := rowOf(t, a, id); ok {
			t.Fatalf("row %+v written while the Work holds the ID; want none", row)
		}
	})
	t.Run("an AcquireRecord lease is live", func(t *testing.T) {
		id := "leased"
		mustRecord(t, b, id, time.Minute, fp)
		for _, c := range answers {
			r, w, err := a.AcquireWork(bg(), id, time.Minute, c.fp)
			if err != nil || w != nil {
				t.Fatalf("AcquireWork = %v, %v; want busy, no Work", w, err)
			}
			if !bytes.Equal(r.Fingerprint, fp) || r.Wait <= 0 {
				t.Errorf("busy record = %+v; want the lease's fingerprint and its remaining time", r)
			}
			if got := busyAnswer(t, r, c.fp); got != c.want {
				t.Errorf("fingerprint %q: answer %s, want %s", c.fp, got, c.want)
			}
		}
	})
	t.Run("after Commit", func(t *testing.T) {
		id := "committed"
		w := acquireWork(t, a, id, fp)
		must(t, w.Commit(bg(), time.Now().Add(time.Hour), fp, []byte("result")))
		r, w2, err := b.AcquireWork(bg(), id, time.Minute, fp)
		if err != nil || w2 != nil || r.State != replay.LeaseDone || !bytes.Equal(r.Fingerprint, fp) || string(r.Result) != "result" {
			t.Fatalf("AcquireWork after Commit = %+v, %v, %v; want done with the record", r, w2, err)
		}
		wantRecord(t, b, id, replay.LeaseDone, fp, []byte("result"))
	})
}

// acquireWorkCommitsAtMostOnce: a Work whose ID was taken meanwhile
// by a live row it did not write (a Claim, which does not wait for the
// Work's lock) commits nothing and reports ErrLeaseLost; and of two
// instances racing for one ID with one request, at most one Work
// commits, and the loser is told busy with the same request.
func acquireWorkCommitsAtMostOnce(t *testing.T) {
	a, b := twinStores(t)
	table := chargeTable(t, a.pool)
	t.Run("a Claim of the ID while the Work runs", func(t *testing.T) {
		id := "claimed meanwhile"
		w := acquireWork(t, a, id, []byte("fp"))
		must(t, charge(w.Context(bg()), table, id, "work"))
		mustClaim(t, b, id, time.Now().Add(time.Hour))
		wantIs(t, w.Commit(bg(), time.Now().Add(time.Hour), []byte("fp"), []byte("r")), replay.ErrLeaseLost, "Commit = %v; want ErrLeaseLost")
		wantCharges(t, a.pool, table, id)
	})
	t.Run("racing instances", func(t *testing.T) {
		for i := range 20 {
			id := "race " + string(rune('a'+i))
			results := make(chan error, 2)
			for _, s := range []*Store{a, b} {
				go func() {
					r, w, err := s.AcquireWork(bg(), id, time.Minute, []byte("fp"))
					if err == nil && w == nil && r.State == replay.LeaseBusy && len(r.Fingerprint) > 0 {
						err = errors.New("the loser of a race of one request told it is another (422 for 409)")
					}
					if err != nil || w == nil {
						results <- err
						return
					}
					if r.State != replay.LeaseAcquired {
						results <- errors.New("a Work for a state other than acquired")
						return
					}
					if err := charge(w.Context(bg()), table, id, "racer"); err != nil {
						w.Rollback(bg())
						results <- err
						return
					}
					results <- w.Commit(bg(), time.Now().Add(time.Hour), []byte("fp"), []byte("r"))
				}()
			}
			for range 2 {
				must(t, <-results)
			}
			if got := chargesOf(t, a.pool, table, id); len(got) > 1 {
				t.Fatalf("%s: charges = %q; want at most one", id, got)
			}
		}
	})
}

// acquireWorkTerminatedConnectionKeepsNothing: the Work's backend
// terminated mid-work (pg_terminate_backend, as a crash of the holder's
// process or its connection's end) frees the ID with nothing kept, and
// the next AcquireWork runs the work once.
func acquireWorkTerminatedConnectionKeepsNothing(t *testing.T) {
	a, b := twinStores(t)
	table := chargeTable(t, a.pool)
	id := "terminated"
	w := acquireWork(t, a, id, []byte("fp"))
	must(t, charge(w.Context(bg()), table, id, "lost"))
	var pid int32
	must(t, b.pool.QueryRow(bg(), `SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 1
		AND (classid::bigint << 32 | objid::bigint) = $1::bigint`, a.idLock(a.key(id))).Scan(&pid)) // the Work's lock holder
	mustExec(t, b.pool, `SELECT pg_terminate_backend($1)`, pid)
	// pg_terminate_backend only signals the backend: wait for it to have
	// exited (its locks gone), so that neither the Commit below nor the
	// next AcquireWork races it.
	waitFor(t, 30*time.Second, func() (bool, string) {
		var held bool
		must(t, b.pool.QueryRow(bg(), `SELECT EXISTS (SELECT 1 FROM pg_locks WHERE pid = $1)`, pid).Scan(&held))
		return !held, fmt.Sprintf("backend %d still holds locks after pg_terminate_backend", pid)
	})
	wantIs(t, w.Commit(bg(), time.Now().Add(time.Hour), []byte("fp"), []byte("r")), ErrUnavailable, "Commit on a terminated backend = %v; want ErrUnavailable")
	w2 := acquireWork(t, b, id, []byte("fp"))
	must(t, charge(w2.Context(bg()), table, id, "retry"))
	must(t, w2.Commit(bg(), time.Now().Add(time.Hour), []byte("fp"), []byte("r")))
	wantCharges(t, a.pool, table, id, "retry")
}

// acquireWorkRefusals: every refusal opens no transaction and takes
// nothing.
func acquireWorkRefusals(t *testing.T) {
	s := newTestStore(t)
	cancelled, cancel := context.WithCancel(bg())
	cancel()
	tests := []struct {
		name  string
		s     *Store
		ctx   context.Context
		id    string
		lease time.Duration
		fp    []byte
		want  error
	}{
		{"empty id", s, bg(), "", time.Minute, nil, ErrInvalidClaim},
		{"zero lease", s, bg(), "x", 0, nil, replay.ErrExpired},
		{"negative lease", s, bg(), "x", -time.Second, nil, ErrInvalidClaim},
		{"oversize fingerprint", s, bg(), "x", time.Minute, make([]byte, replay.MaxFingerprintBytes+1), replay.ErrTooLarge},
		{"zero Store", &Store{}, bg(), "x", time.Minute, nil, ErrConfig},
		{"cancelled context", s, cancelled, "x", time.Minute, nil, ErrUnavailable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, w, err := tt.s.AcquireWork(tt.ctx, tt.id, tt.lease, tt.fp)
			if !errors.Is(err, tt.want) || w != nil || r.State != 0 {
				t.Fatalf("AcquireWork = %+v, %v, %v; want %v and no Work", r, w, err, tt.want)
			}
		})
	}
	acquireWork(t, s, "x", nil) // nothing was left held
}

// acquireWorkLeaseBoundsTheWork: a Work whose lease has passed since
// it began commits nothing (ErrLeaseLost), and a session left idle in the
// Work's transaction for its lease is ended by the server, which frees
// the ID with nothing kept.
func acquireWorkLeaseBoundsTheWork(t *testing.T) {
	a, b := twinStores(t)
	table := chargeTable(t, a.pool)
	const lease = 300 * time.Millisecond
	tests := []struct {
		name string
		// busy: statements keep the session busy past the lease, so the
		// server's idle timeout never fires and the fence refuses.
		busy bool
	}{
		{"commit after the lease", true},
		{"idle past the lease", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id := tt.name
			r, w, err := a.AcquireWork(bg(), id, lease, []byte("fp"))
			if err != nil || w == nil {
				t.Fatalf("AcquireWork = %+v, %v, %v", r, w, err)
			}
			defer w.Rollback(bg())
			ctx := w.Context(bg())
			must(t, charge(ctx, table, id, "late"))
			if tt.busy {
				tx, _ := TxFrom(ctx)
				mustExec(t, tx, "select pg_sleep($1::float8)", (lease + 100*time.Millisecond).Seconds())
			} else {
				time.Sleep(lease + 300*time.Millisecond)
				// The server ended the idle session: the ID is free.
				r2, w2, err := b.AcquireWork(bg(), id, time.Minute, []byte("fp"))
				if err != nil || w2 == nil {
					t.Fatalf("AcquireWork while the stalled Work's session is idle past its lease = %+v, %v; want acquired", r2, err)
				}
				w2.Rollback(bg())
			}
			err = w.Commit(bg(), time.Now().Add(time.Hour), []byte("fp"), []byte("r"))
			if tt.busy && !errors.Is(err, replay.ErrLeaseLost) || !tt.busy && err == nil {
				t.Fatalf("Commit = %v", err)
			}
			wantCharges(t, a.pool, table, id)
			if _, ok := rowOf(t, a, id); ok {
				t.Fatal("a row of the ID was written")
			}
		})
	}
}
