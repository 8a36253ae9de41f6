package pgstore

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ctoken/ctoken/replay"
)

func countRows(t testing.TB, s *Store, where string) int {
	t.Helper()
	var n int
	must(t, s.pool.QueryRow(bg(), `SELECT count(*) FROM `+s.table+` WHERE `+where).Scan(&n))
	return n
}

// TestSweep pins [Store.Sweep] and the sweeper.
func TestSweep(t *testing.T) {
	subtests(t, []subtest{
		{"deletes only expired rows", sweepDeletesOnlyExpiredRows},
		{"locks only the rows it deletes", sweepLocksOnlyTheRowsItDeletes},
		{"sweeper runs until Close", sweeperRunsUntilClose},
		{"claim racing a sweep is decided again", claimRacingASweepIsDecidedAgain},
	})
}

// sweepDeletesOnlyExpiredRows: expired claims, leases and done rows go;
// live ones and the marker stay; several sweepers at once neither block
// each other nor delete a row twice.
func sweepDeletesOnlyExpiredRows(t *testing.T) {
	pool := needServer(t).pool(t)
	name := migratedTable(t, pool)
	s := storeOn(t, pool, func(o *Options) { o.Table = name; o.SweepBatch = 7 })
	const expired, live = 500, 50
	for i := range expired + live {
		mustClaim(t, s, fmt.Sprint("id-", i), time.Now().Add(time.Hour))
	}
	l := mustLease(t, s, "lease", time.Minute)
	must(t, s.ConfirmLease(bg(), "lease", l.Token, time.Now().Add(time.Hour)))
	// Expire the first claims and the done row on the database's clock.
	keys := [][]byte{s.key("lease")}
	for i := range expired {
		keys = append(keys, s.key(fmt.Sprint("id-", i)))
	}
	mustExec(t, pool, `UPDATE "`+name+`" SET until = now() - interval '1 second' WHERE key = ANY($1)`, keys)
	// Which rows are expired is the database's answer, not a guess.
	wantGone := countRows(t, s, "until < now() AND state <> 'm'")
	var wg sync.WaitGroup
	var total atomic.Int64
	for range 4 {
		wg.Go(func() {
			n, err := s.Sweep(bg())
			if err != nil {
				t.Error(err)
			}
			total.Add(n)
		})
	}
	wg.Wait()
	if total.Load() != int64(wantGone) || wantGone != expired+1 {
		t.Fatalf("sweepers deleted %d rows, want the %d expired ones", total.Load(), wantGone)
	}
	if n := countRows(t, s, "until < now() AND state <> 'm'"); n != 0 {
		t.Fatalf("%d expired rows left", n)
	}
	if n := countRows(t, s, "state = 'm'"); n != 1 {
		t.Fatalf("%d marker rows, want 1", n)
	}
	if n := countRows(t, s, "until > now() AND state = 'c'"); n != live {
		t.Fatalf("%d live claims left, want %d", n, live)
	}
	wantClaim(t, s, fmt.Sprint("id-", expired), time.Now().Add(time.Hour), false, nil) // live: kept
	mustClaim(t, s, "id-0", time.Now().Add(time.Hour))
}

// sweeperRunsUntilClose: the store's goroutine sweeps on its interval
// and stops at Close.
func sweeperRunsUntilClose(t *testing.T) {
	pool := needServer(t).pool(t)
	name := migratedTable(t, pool)
	var mu sync.Mutex
	var deleted, sweeps int64
	s := storeOn(t, pool, func(o *Options) {
		o.Table = name
		o.SweepInterval = 50 * time.Millisecond
		o.Observer = func(e replay.Event) {
			if e.Kind != replay.EventSwept {
				return
			}
			if e.Reason != nil {
				t.Errorf("sweep: %v", e.Reason)
			}
			if e.Store != "pgstore" || e.Table != "public."+name || e.Shard != -1 {
				t.Errorf("EventSwept of store %q, table %q, shard %d; want pgstore, %q, -1", e.Store, e.Table, e.Shard, "public."+name)
			}
			mu.Lock()
			deleted += e.Deleted
			sweeps++
			mu.Unlock()
		}
	})
	for i := range 100 {
		mustClaim(t, s, fmt.Sprint("id-", i), time.Now().Add(time.Hour))
	}
	mustExec(t, pool, `UPDATE "`+name+`" SET until = now() - interval '1 second' WHERE state = 'c'`)
	waitFor(t, 10*time.Second, func() (bool, string) {
		return countRows(t, s, "state = 'c'") == 0, "the sweeper did not delete the expired rows"
	})
	s.Close()
	s.Close() // idempotent
	mu.Lock()
	if deleted != 100 || sweeps == 0 {
		t.Errorf("the Observer saw %d rows deleted in %d sweeps, want 100", deleted, sweeps)
	}
	mu.Unlock()
	mustClaim(t, s, "after-close", time.Now().Add(time.Hour))
	mustExec(t, pool, `UPDATE "`+name+`" SET until = now() - interval '1 second' WHERE state = 'c'`)
	time.Sleep(200 * time.Millisecond)
	if n := countRows(t, s, "state = 'c'"); n != 1 {
		t.Fatalf("%d rows after Close, want the one expired row left unswept", n)
	}
}

// claimRacingASweepIsDecidedAgain: a claim (or acquire) that waits for
// the lock of an expired row which a sweeper then deletes does not report
// the ID as taken: it runs again and takes the free ID.
func claimRacingASweepIsDecidedAgain(t *testing.T) {
	admin := needServer(t).pool(t)
	s := newTestStore(t)
	for _, step := range []string{"claim", "acquire"} {
		id := "raced-" + step
		mustClaim(t, s, id, time.Now().Add(time.Hour))
		mustExec(t, admin, `UPDATE `+s.table+` SET until = now() - interval '1 second' WHERE key = $1`, s.key(id))
		// A sweeper's batch: the expired row locked, then deleted.
		tx := mustBegin(t, admin)
		mustExec(t, tx, `SELECT 1 FROM `+s.table+` WHERE key = $1 FOR UPDATE`, s.key(id))
		type result struct {
			ok  bool
			err error
		}
		done := make(chan result, 1)
		go func() {
			if step == "claim" {
				first, err := s.Claim(bg(), id, time.Now().Add(time.Hour))
				done <- result{first, err}
				return
			}
			l, err := s.AcquireLease(bg(), id, time.Minute)
			done <- result{l.State == replay.LeaseAcquired, err}
		}()
		waitForLockWaiter(t, admin)
		mustExec(t, tx, `DELETE FROM `+s.table+` WHERE key = $1`, s.key(id))
		must(t, tx.Commit(bg()))
		if r := <-done; !r.ok || r.err != nil {
			t.Fatalf("%s racing a sweep = %v, %v; want the free ID taken", step, r.ok, r.err)
		}
	}
}

// sweepLocksOnlyTheRowsItDeletes: while a sweep batch is open (its
// transaction not yet committed), claims of other IDs — new, live, and
// another sweeper's batch — go through at once; nothing takes a table
// lock.
func sweepLocksOnlyTheRowsItDeletes(t *testing.T) {
	pool := needServer(t).pool(t)
	name := migratedTable(t, pool)
	s := storeOn(t, pool, func(o *Options) { o.Table = name; o.SweepBatch = 10; o.Timeout = 5 * time.Second })
	for i := range 30 {
		mustClaim(t, s, fmt.Sprint("old-", i), time.Now().Add(time.Hour))
	}
	mustClaim(t, s, "live", time.Now().Add(time.Hour))
	mustExec(t, pool, `UPDATE "`+name+`" SET until = now() - interval '1 second' WHERE key <> $1 AND state = 'c'`, s.key("live"))
	tx := mustBegin(t, pool)
	tag, err := tx.Exec(bg(), s.sweep, 10)
	if err != nil || tag.RowsAffected() != 10 {
		t.Fatalf("open batch deleted %d rows (%v), want 10", tag.RowsAffected(), err)
	}
	// Another sweeper skips the locked rows and takes the next ten.
	n, err := s.Sweep(bg())
	if err != nil || n != 20 {
		t.Fatalf("a second sweeper beside an open batch deleted %d rows (%v), want the other 20", n, err)
	}
	// The batch stays open during these claims: one that waited for it
	// would fail at the store's timeout.
	mustClaim(t, s, "new", time.Now().Add(time.Hour))
	wantClaim(t, s, "live", time.Now().Add(time.Hour), false, nil)
}
