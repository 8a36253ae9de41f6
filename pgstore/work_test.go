package pgstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ctoken/ctoken/replay"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The work of these tests is a charge: one row per run of a handler in a
// table of its own beside the store's, written through the Work's
// transaction.

// newTable creates a table named prefix and random hex, with columns, on
// pool, dropped when t ends, and returns its name.
func newTable(t testing.TB, pool *pgxpool.Pool, prefix, columns string) string {
	t.Helper()
	b := make([]byte, 6)
	rand.Read(b)
	name := prefix + hex.EncodeToString(b)
	mustExec(t, pool, `CREATE TABLE `+name+` (`+columns+`)`)
	t.Cleanup(func() { pool.Exec(context.Background(), `DROP TABLE IF EXISTS `+name) })
	return name
}

// chargeTable creates a table of charges on pool, dropped when t ends.
func chargeTable(t testing.TB, pool *pgxpool.Pool) string {
	t.Helper()
	return newTable(t, pool, "charges_", "key text NOT NULL, holder text NOT NULL")
}

// charge inserts a charge of key by holder in the transaction ctx carries.
func charge(ctx context.Context, table, key, holder string) error {
	tx, err := TxFrom(ctx)
	if err != nil {
		return err
	}
	_, err = tx.Exec(ctx, `INSERT INTO `+table+` (key, holder) VALUES ($1, $2)`, key, holder)
	return err
}

// chargesOf returns the holders of key's charges, as committed.
func chargesOf(t testing.TB, pool *pgxpool.Pool, table, key string) []string {
	t.Helper()
	rows, err := pool.Query(bg(), `SELECT holder FROM `+table+` WHERE key = $1 ORDER BY holder`, key)
	must(t, err)
	holders, err := pgx.CollectRows(rows, pgx.RowTo[string])
	must(t, err)
	return holders
}

// wantChargeCount fails t unless key has n charges committed in table.
func wantChargeCount(t testing.TB, pool *pgxpool.Pool, table, key string, n int) {
	t.Helper()
	if got := chargesOf(t, pool, table, key); len(got) != n {
		t.Fatalf("charges of %q = %q, want %d", key, got, n)
	}
}

// storeWithCharges is newTestStore with a table of charges beside it.
func storeWithCharges(t *testing.T) (*Store, string) {
	t.Helper()
	s := newTestStore(t)
	return s, chargeTable(t, s.pool)
}

// refuseAll makes s's rechecks refuse with ErrUnavailable.
func refuseAll(s *Store) {
	refusal := fmt.Errorf("%w: test refusal", ErrUnavailable)
	s.refusal.Store(&refusal)
}

// acquire takes id's lease with a record and begins its work.
func acquire(t testing.TB, s *Store, id string, lease time.Duration) (replay.Work, string) {
	t.Helper()
	r := mustRecord(t, s, id, lease, []byte("fp-"+id))
	w, err := s.BeginWork(bg(), id, r.Token)
	wantIs(t, err, nil, "BeginWork(%q) = %v", id)
	t.Cleanup(func() { w.Rollback(bg()) })
	return w, r.Token
}

// acquireTx is acquire's work (for a minute) with its context and the
// handler's transaction.
func acquireTx(t testing.TB, s *Store, id string) (replay.Work, context.Context, pgx.Tx) {
	t.Helper()
	w, _ := acquire(t, s, id, time.Minute)
	ctx := w.Context(bg())
	tx, err := TxFrom(ctx)
	must(t, err)
	return w, ctx, tx
}

// workEnd is one end of a work, by name.
type workEnd struct {
	name string
	end  func(replay.Work) error
}

// workEnds are the two ends of a work, Commit (of no record, for an hour)
// and Rollback, each called with ctx.
func workEnds(ctx context.Context) []workEnd {
	return []workEnd{
		{"Commit", func(w replay.Work) error { return w.Commit(ctx, time.Now().Add(time.Hour), nil, nil) }},
		{"Rollback", func(w replay.Work) error { return w.Rollback(ctx) }},
	}
}

// TestWork pins the transactional work (a replay.Work) a Store begins. (A
// process killed before its Commit keeps nothing: replaytest's
// RunWorkContract, in TestStore, for a Work that ends uncommitted and a lease
// that ran out; TestEffectsOnce/app kills for the kill.)
func TestWork(t *testing.T) {
	subtests(t, []subtest{
		{"commit keeps the work and the record together", workCommitKeepsTheWorkAndTheRecordTogether},
		{"commit after the lease ended rolls back", workCommitAfterTheLeaseEndedRollsBack},
		{"racing holders commit at most once", workRacingHoldersCommitAtMostOnce},
		{"refusals", workRefusals},
		{"commit refused only when nothing committed", commitRefusedOnlyWhenNothingWasCommitted},
		{"ends with a done context", workEndsWithADoneContext},
		{"first end wins", workFirstEndWins},
		{"one charge per key through a server kill", workKeepsOneChargePerKeyThroughAPostgresKill},
		{"temp table of the store's name takes nothing", workTempTableOfTheStoresNameTakesNothing},
		{"session state does not outlive the work", workSessionStateDoesNotOutliveTheWork},
		{"commit runs with the accepted level", workCommitRunsWithTheAcceptedSynchronousCommit},
		{"a deferred constraint that fails rolls back", workDeferredConstraintFailureRollsBack},
		{"a trigger raising the fence's text is not the fence", workTriggerRaisingTheFenceTextIsNotTheFence},
	})
}

// workRefusals: every rejection path of BeginWork and Commit, and
// what each leaves behind.
func workRefusals(t *testing.T) {
	s, table := storeWithCharges(t)
	until := time.Now().Add(time.Hour)

	t.Run("BeginWork", func(t *testing.T) {
		r := mustRecord(t, s, "b", time.Minute, nil)
		refusing := newTestStore(t)
		refuseAll(refusing)
		cancelled, cancel := context.WithCancel(bg())
		cancel()
		tests := []struct {
			name  string
			s     *Store
			ctx   context.Context
			id    string
			token string
			want  []error
		}{
			{"empty id", s, bg(), "", r.Token, []error{ErrInvalidClaim}},
			{"oversize id", s, bg(), strings.Repeat("x", MaxIDBytes+1), r.Token, []error{ErrInvalidClaim}},
			{"a token never minted", s, bg(), "b", "not-a-token", []error{replay.ErrLeaseLost}},
			{"a recheck refusing", refusing, bg(), "b", r.Token, []error{ErrUnavailable}},
			{"a zero Store", &Store{}, bg(), "b", r.Token, []error{ErrConfig}},
			{"a cancelled context", s, cancelled, "b", r.Token, []error{ErrUnavailable, context.Canceled}},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				w, err := tt.s.BeginWork(tt.ctx, tt.id, tt.token)
				for _, want := range tt.want {
					if w != nil || !errors.Is(err, want) {
						t.Fatalf("BeginWork = %v, %v; want %v", w, err, want)
					}
				}
			})
		}
		if row, _ := rowOf(t, s, "b"); row.state != "l" {
			t.Fatalf("lease row = %+v, want left as it was", row)
		}
	})

	t.Run("Commit", func(t *testing.T) {
		tests := []struct {
			name        string
			handler     func(ctx context.Context) // runs in the work, after its charge
			until       time.Time
			fp, result  []byte
			prepare     func(s *Store, id string)
			want        []error
			wantLease   string // the lease row's state afterwards
			unavailable bool
		}{
			{name: "an empty result", until: until, fp: []byte("fp"), result: []byte{}, want: []error{ErrInvalidClaim, replay.ErrTooLarge, replay.ErrRolledBack}, wantLease: "l"},
			{name: "an oversize result", until: until, result: make([]byte, replay.MaxResultBytes+1), want: []error{ErrInvalidClaim, replay.ErrTooLarge, replay.ErrRolledBack}, wantLease: "l"},
			{name: "an oversize fingerprint", until: until, fp: make([]byte, replay.MaxFingerprintBytes+1), result: []byte("r"), want: []error{ErrInvalidClaim, replay.ErrTooLarge, replay.ErrRolledBack}, wantLease: "l"},
			{name: "an until already past", until: time.Now().Add(-time.Second), want: []error{ErrInvalidClaim, replay.ErrExpired, replay.ErrRolledBack}, wantLease: "l"},
			{name: "a statement of the work failed", until: until, handler: func(ctx context.Context) {
				tx, _ := TxFrom(ctx)
				if _, err := tx.Exec(ctx, `SELECT 1/0`); err == nil {
					t.Error("1/0 succeeded")
				}
			}, want: []error{ErrUnavailable, pgx.ErrTxCommitRollback, replay.ErrRolledBack}, wantLease: "l"},
			{name: "a recheck refusing", until: until, prepare: func(s *Store, _ string) { refuseAll(s) },
				want: []error{ErrUnavailable, replay.ErrRolledBack}, wantLease: "l"},
			{name: "the lease released", until: until, prepare: func(s *Store, id string) {
				mustExec(t, s.pool, `DELETE FROM `+s.table+` WHERE key = $1`, s.key(id))
			}, want: []error{replay.ErrLeaseLost}, wantLease: ""},
			{name: "the lease's ID confirmed by another", until: until, prepare: func(s *Store, id string) {
				mustExec(t, s.pool, `UPDATE `+s.table+` SET state = 'd', token = $2 WHERE key = $1`, s.key(id), strings.Repeat("0", tokenLen))
			}, want: []error{replay.ErrLeaseLost}, wantLease: "d"},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				s := storeOn(t, s.pool)
				w, _ := acquire(t, s, "c", time.Minute)
				ctx := w.Context(bg())
				must(t, charge(ctx, table, s.prefix, "refused"))
				if tt.handler != nil {
					tt.handler(ctx)
				}
				if tt.prepare != nil {
					tt.prepare(s, "c")
				}
				err := w.Commit(bg(), tt.until, tt.fp, tt.result)
				for _, want := range tt.want {
					if !errors.Is(err, want) {
						t.Fatalf("Commit = %v, want %v", err, want)
					}
				}
				wantChargeCount(t, s.pool, table, s.prefix, 0) // the work rolled back
				if row, _ := rowOf(t, s, "c"); row.state != tt.wantLease {
					t.Fatalf("lease row state = %q, want %q", row.state, tt.wantLease)
				}
				if again := w.Rollback(bg()); again != err {
					t.Fatalf("Rollback after Commit = %v, want Commit's outcome %v", again, err)
				}
			})
		}
	})

	t.Run("a table that forgot its claims", func(t *testing.T) {
		name := migratedTable(t, s.pool)
		f := storeOn(t, s.pool, func(o *Options) { o.Table = name })
		w, _ := acquire(t, f, "f", time.Minute)
		must(t, charge(w.Context(bg()), table, "forgotten", "x"))
		mustExec(t, s.pool, `DELETE FROM "`+name+`" WHERE state = 'm'`)
		if err := w.Commit(bg(), until, nil, nil); !errors.Is(err, ErrForgotten) || !errors.Is(err, ErrUnavailable) {
			t.Fatalf("Commit = %v, want ErrForgotten", err)
		}
		wantChargeCount(t, s.pool, table, "forgotten", 0)
	})
}

// workEndsWithADoneContext: Commit or Rollback called with a context
// already done still ends the transaction (the connection is closed, so
// nothing is committed) and gives the connection back to the pool.
func workEndsWithADoneContext(t *testing.T) {
	s, table := storeWithCharges(t)
	done, cancel := context.WithCancel(bg())
	cancel()
	for _, e := range workEnds(done) {
		name, end := e.name, e.end
		t.Run(name, func(t *testing.T) {
			id := "done-" + name
			w, _ := acquire(t, s, id, time.Minute)
			must(t, charge(w.Context(bg()), table, id, "x"))
			if err := end(w); !errors.Is(err, ErrUnavailable) || !errors.Is(err, context.Canceled) {
				t.Fatalf("%s with a done context = %v, want ErrUnavailable and context.Canceled", name, err)
			}
			if n := s.pool.Stat().AcquiredConns(); n != 0 {
				t.Fatalf("%d connections still acquired, want the work's given back", n)
			}
			wantChargeCount(t, s.pool, table, id, 0)
			if row, _ := rowOf(t, s, id); row.state != "l" {
				t.Fatalf("lease row state = %q, want the lease left as it was", row.state)
			}
		})
	}
}

// workFirstEndWins: the first of Commit and Rollback decides; later
// calls return its outcome and change nothing.
func workFirstEndWins(t *testing.T) {
	s, table := storeWithCharges(t)
	until := time.Now().Add(time.Hour)
	w, _ := acquire(t, s, "cc", time.Minute)
	must(t, charge(w.Context(bg()), table, "cc", "x"))
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if i%2 == 0 {
				errs[i] = w.Commit(bg(), until, nil, nil)
			} else {
				errs[i] = w.Rollback(bg())
			}
		}()
	}
	wg.Wait()
	n := len(chargesOf(t, s.pool, table, "cc"))
	row, _ := rowOf(t, s, "cc")
	if n == 1 && row.state != "d" || n == 0 && row.state != "l" || n > 1 {
		t.Fatalf("%d charges with a row in state %q: the work and the lease's end disagree", n, row.state)
	}
	for _, err := range errs {
		wantIs(t, err, nil, "concurrent ends: %v")
	}
}

// workKeepsOneChargePerKeyThroughAPostgresKill: workers run keys
// through AcquireRecord, BeginWork, one charge and Commit, retrying every
// key until it is done, while the server is SIGKILLed and restarted
// mid-load (the keys keep coming until 50 more are taken after the
// restart, at most maxKeys). Afterwards every key is done, has exactly
// one charge and the record of the holder whose charge it is.
func workKeepsOneChargePerKeyThroughAPostgresKill(t *testing.T) {
	p := ownServer(t)
	pool := p.pool(t)
	s := storeOn(t, pool, func(o *Options) { o.Timeout = 2 * time.Second })
	table := chargeTable(t, pool)
	const maxKeys = 5000
	const workers = 8
	const lease = 500 * time.Millisecond
	until := time.Now().Add(time.Hour)
	var next, finished, unknown, lost, failed, stopAt atomic.Int64
	stopAt.Store(maxKeys)
	deadline := time.Now().Add(60 * time.Second)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= stopAt.Load() {
					return
				}
				id := fmt.Sprintf("k%04d", i)
				for attempt := 0; time.Now().Before(deadline); attempt++ {
					holder := fmt.Sprintf("w%d-a%d", w, attempt)
					r, err := s.AcquireRecord(bg(), id, lease, []byte("fp"))
					if err != nil {
						failed.Add(1)
						time.Sleep(20 * time.Millisecond)
						continue
					}
					if r.State == replay.LeaseDone {
						finished.Add(1)
						break
					}
					if r.State == replay.LeaseBusy {
						time.Sleep(20 * time.Millisecond)
						continue
					}
					work, err := s.BeginWork(bg(), id, r.Token)
					if err != nil {
						failed.Add(1)
						continue // the lease ends by itself
					}
					if err := charge(work.Context(bg()), table, id, holder); err != nil {
						failed.Add(1)
						work.Rollback(bg())
						continue
					}
					err = work.Commit(bg(), until, []byte("fp"), []byte(holder))
					if err == nil {
						finished.Add(1)
						break
					}
					if errors.Is(err, replay.ErrLeaseLost) {
						lost.Add(1)
					} else {
						unknown.Add(1)
					}
				}
			}
		}()
	}
	for next.Load() < 50 {
		time.Sleep(time.Millisecond)
	}
	must(t, p.restart())
	stopAt.Store(min(next.Load()+50, maxKeys))
	wg.Wait()
	keys := min(next.Load(), stopAt.Load())
	t.Logf("%d of %d keys done; Commits with an unknown outcome: %d, with the lease lost: %d; other steps failed: %d",
		finished.Load(), keys, unknown.Load(), lost.Load(), failed.Load())
	if unknown.Load()+failed.Load() == 0 {
		t.Fatal("no step failed: the kill did not hit the load")
	}
	if finished.Load() != keys {
		t.Fatalf("%d of %d keys done within the deadline", finished.Load(), keys)
	}
	for i := range keys {
		id := fmt.Sprintf("k%04d", i)
		holders := chargesOf(t, pool, table, id)
		row, ok := rowOf(t, s, id)
		if len(holders) != 1 || !ok || row.state != "d" || string(row.result) != holders[0] {
			t.Fatalf("key %s: charges %q, row %+v (found %v); want exactly one charge and its holder's record", id, holders, row, ok)
		}
	}
}

// BenchmarkWorkFirstRequest measures the first request of the
// transactional mode against its floor, in alternation (see paired):
// "floor" is the handler's own transaction without the store (BEGIN, one
// INSERT of a charge, COMMIT: three round trips, one commit); "work" is
// AcquireRecord, BeginWork, the same INSERT through TxFrom and Commit with
// a 4 KiB result: three round trips too (the acquire; BEGIN pipelined
// with the INSERT; the fence pipelined with COMMIT), and two commits, the
// lease's and the work's. "floor+lease" is the least any design that
// commits the lease before the work can cost: a bare autocommit INSERT …
// ON CONFLICT DO NOTHING of a lease row into the store's table, then the
// floor (four round trips, two commits). "work-unpipelined" is "work"
// with the fence and COMMIT sent one after the other (the design not
// taken: four round trips). "separate" is the mode without the
// transaction, for reference: AcquireRecord, the handler's own
// transaction, ConfirmRecord (five round trips, three commits). x/floor
// is the ratio of the medians.
func BenchmarkWorkFirstRequest(b *testing.B) {
	b.Run("sync-commit", func(b *testing.B) { benchWork(b, newTestStore(b)) })
	// Without waiting for the WAL flush (synchronous_commit off for the
	// floor and the store alike), which shows the round trips without the
	// disk's noise.
	b.Run("async-commit", func(b *testing.B) {
		pool := needServer(b).pool(b, "synchronous_commit", "off")
		benchWork(b, storeOn(b, pool, asyncCommit))
	})
}

func benchWork(b *testing.B, s *Store) {
	table := chargeTable(b, s.pool)
	insert := `INSERT INTO ` + table + ` (key, holder) VALUES ($1, 'bench')`
	until := time.Now().Add(time.Hour)
	fp := make([]byte, 32)
	result := benchResult(4 << 10)
	id := func(p string, i int) string { return p + strconv.Itoa(1_000_000_000+i) }
	begin := func(key string) replay.Work {
		r := mustRecord(b, s, key, time.Minute, fp)
		w, err := s.BeginWork(bg(), key, r.Token)
		must(b, err)
		tx, err := TxFrom(w.Context(bg()))
		must(b, err)
		mustExec(b, tx, insert, key)
		return w
	}
	floor := func(key string) {
		tx, err := s.pool.Begin(bg())
		must(b, err)
		mustExec(b, tx, insert, key)
		must(b, tx.Commit(bg()))
	}
	lease := `INSERT INTO ` + s.table + ` (key, state, token, until, fingerprint) VALUES ($1, 'l', $2, now() + interval '1 minute', $3) ON CONFLICT (key) DO NOTHING`
	token := strings.Repeat("0", tokenLen)
	paired(b, []string{"floor", "work", "floor+lease", "work-unpipelined", "separate"},
		func(i int) { floor(id("f", i)) },
		func(i int) {
			must(b, begin(id("w", i)).Commit(bg(), until, fp, result))
		},
		func(i int) {
			if tag, err := s.pool.Exec(bg(), lease, s.key(id("l", i)), token, fp); err != nil || tag.RowsAffected() != 1 {
				b.Fatal(tag, err)
			}
			floor(id("l", i))
		},
		func(i int) {
			w := begin(id("u", i)).(*work)
			w.stop()
			defer w.pc.Release()
			var zero int
			must(b, w.conn.QueryRow(bg(), fenceSQL(s.table), w.key, w.token, pgTime(until), fp, result, &w.xid, "").Scan(&zero))
			mustExec(b, w.conn, "commit")
		},
		func(i int) {
			key := id("s", i)
			r := mustRecord(b, s, key, time.Minute, fp)
			floor(key) // the handler's own transaction
			must(b, s.ConfirmRecord(bg(), key, r.Token, until, fp, result))
		})
}

// workTempTableOfTheStoresNameTakesNothing: a handler that creates a
// temporary table of the store's name (with a marker row) in the work
// receives neither the fence nor the record: Commit writes the done row
// in the store's table, and a retry finds the key done.
func workTempTableOfTheStoresNameTakesNothing(t *testing.T) {
	s, table := storeWithCharges(t)
	for _, onCommit := range []string{" ON COMMIT DROP", ""} {
		t.Run("temp table"+onCommit, func(t *testing.T) {
			id := "temp" + strings.ReplaceAll(onCommit, " ", "-")
			w, ctx, tx := acquireTx(t, s, id)
			mustExec(t, tx, `CREATE TEMP TABLE `+DefaultTable+` (LIKE public.`+DefaultTable+` INCLUDING ALL)`+onCommit)
			mustExec(t, tx, `INSERT INTO `+DefaultTable+` (key, state, token, until) SELECT key, state, token, until FROM public.`+DefaultTable+` WHERE key = $1 OR key = decode('0000', 'hex')`, s.key(id))
			must(t, charge(ctx, table, id, "first"))
			must(t, w.Commit(bg(), time.Now().Add(time.Hour), []byte("fp"), []byte("r")))
			wantRecord(t, s, id, replay.LeaseDone, []byte("fp"), []byte("r"))
			wantChargeCount(t, s.pool, table, id, 1)
		})
	}
}
