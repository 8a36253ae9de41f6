package pgstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ctoken/ctoken/replay"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// wantCharges fails t unless the holders of key's committed charges are
// exactly holders, in order.
func wantCharges(t *testing.T, pool *pgxpool.Pool, table, key string, holders ...string) {
	t.Helper()
	if got := chargesOf(t, pool, table, key); !slices.Equal(got, holders) {
		t.Fatalf("charges of %q = %q; want %q", key, got, holders)
	}
}

// workCommitKeepsTheWorkAndTheRecordTogether: Commit writes the
// work's row and the done row (with its record, or none when both are
// nil) in one commit.
func workCommitKeepsTheWorkAndTheRecordTogether(t *testing.T) {
	s := newTestStore(t)
	table := chargeTable(t, s.pool)
	result := benchResult(4 << 10)
	tests := []struct {
		name        string
		fingerprint []byte
		result      []byte
		wantFP      []byte
	}{
		{"with a record", []byte("fp-record"), result, []byte("fp-record")},
		{"without a record", nil, nil, nil},
		{"a record without a fingerprint", nil, []byte("r"), []byte{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id := tt.name
			w, _ := acquire(t, s, id, time.Minute)
			ctx := w.Context(bg())
			must(t, charge(ctx, table, id, "first"))
			wantCharges(t, s.pool, table, id) // none visible before Commit
			must(t, w.Commit(bg(), time.Now().Add(time.Hour), tt.fingerprint, tt.result))
			wantCharges(t, s.pool, table, id, "first")
			row, ok := rowOf(t, s, id)
			if !ok || row.state != "d" || !bytes.Equal(row.fingerprint, tt.wantFP) || !bytes.Equal(row.result, tt.result) {
				t.Fatalf("row = %+v, %v; want done with the record", row, ok)
			}
			if (tt.result == nil) != (row.result == nil) || (tt.wantFP == nil) != (row.fingerprint == nil) {
				t.Fatalf("row = %+v: NULL columns differ from the record given", row)
			}
		})
	}
}

// workCommitAfterTheLeaseEndedRollsBack: a lease that ran out makes
// Commit roll the work back with ErrLeaseLost and leaves the expired
// lease as it was. (Another holder took the ID over: replaytest's
// TakenOverLeaseKeepsNothing, in TestStore, and
// workRacingHoldersCommitAtMostOnce.)
func workCommitAfterTheLeaseEndedRollsBack(t *testing.T) {
	s := newTestStore(t)
	table := chargeTable(t, s.pool)
	until := time.Now().Add(time.Hour)

	w, _ := acquire(t, s, "k2", 200*time.Millisecond)
	ctx := w.Context(bg())
	must(t, charge(ctx, table, "k2", "slow"))
	time.Sleep(400 * time.Millisecond) // the handler is slower than its lease
	wantIs(t, w.Commit(bg(), until, []byte("fp"), []byte("slow")), replay.ErrLeaseLost, "Commit after the lease ran out = %v, want ErrLeaseLost")
	wantCharges(t, s.pool, table, "k2")
	if row, _ := rowOf(t, s, "k2"); row.state != "l" {
		t.Fatalf("row state = %q, want the expired lease left as it was", row.state)
	}
	wantRecord(t, s, "k2", replay.LeaseAcquired, nil, nil) // free again
}

// workRacingHoldersCommitAtMostOnce: a first holder commits as its
// lease runs out while a second holder keeps trying to take the ID over
// and commit its own work: in every round at most one Commit returns
// nil, and the charges committed are exactly those of the Commits that
// returned nil, with the record of the same holder.
func workRacingHoldersCommitAtMostOnce(t *testing.T) {
	s := newTestStore(t)
	table := chargeTable(t, s.pool)
	until := time.Now().Add(time.Hour)
	const rounds = 20
	const lease = 60 * time.Millisecond
	var firstWon, secondWon int
	for i := range rounds {
		id := fmt.Sprintf("race-%d", i)
		w1, _ := acquire(t, s, id, lease)
		must(t, charge(w1.Context(bg()), table, id, "first"))
		var wg sync.WaitGroup
		var err1, err2 error
		second := false
		wg.Go(func() {
			time.Sleep(lease - 5*time.Millisecond + time.Duration(i%10)*time.Millisecond)
			err1 = w1.Commit(bg(), until, []byte("fp"), []byte("first"))
		})
		wg.Go(func() {
			for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); {
				r, err := s.AcquireRecord(bg(), id, time.Minute, []byte("fp"))
				if err != nil {
					err2 = err
					return
				}
				if r.State == replay.LeaseDone {
					return
				}
				if r.State == replay.LeaseBusy {
					time.Sleep(time.Millisecond)
					continue
				}
				w2, err := s.BeginWork(bg(), id, r.Token)
				if err != nil {
					err2 = err
					return
				}
				if err := charge(w2.Context(bg()), table, id, "second"); err != nil {
					err2 = err
					w2.Rollback(bg())
					return
				}
				second = true
				err2 = w2.Commit(bg(), until, []byte("fp"), []byte("second"))
				return
			}
		})
		wg.Wait()
		if err1 != nil && !errors.Is(err1, replay.ErrLeaseLost) {
			t.Fatalf("round %d: first Commit = %v", i, err1)
		}
		if err2 != nil {
			t.Fatalf("round %d: second holder: %v", i, err2)
		}
		var want []string
		if err1 == nil {
			want = append(want, "first")
			firstWon++
		}
		if second {
			want = append(want, "second")
			secondWon++
		}
		got := chargesOf(t, s.pool, table, id)
		if len(got) != 1 || len(want) != 1 || got[0] != want[0] {
			t.Fatalf("round %d: charges %q, Commits that returned nil %q; want one, the same", i, got, want)
		}
		wantRecord(t, s, id, replay.LeaseDone, []byte("fp"), []byte(want[0]))
	}
	t.Logf("%d rounds: the first holder committed %d, the second %d", rounds, firstWon, secondWon)
}

// commitRefusedOnlyWhenNothingWasCommitted: the pipeline's errors
// that make Commit report replay.ErrRolledBack. A server error to the
// fence (or BEGIN) proves COMMIT never ran; of COMMIT's, only an ERROR
// proves it rolled back: a FATAL or PANIC may come after the commit was
// written, and an error without a server answer (the connection lost)
// leaves the outcome unknown.
// notSent is an error pgconn reports before it sent anything.
type notSent struct{}

func (notSent) Error() string     { return "conn closed" }
func (notSent) SafeToRetry() bool { return true }

func commitRefusedOnlyWhenNothingWasCommitted(t *testing.T) {
	pgErr := func(severity string) error {
		return fmt.Errorf("wrapped: %w", &pgconn.PgError{Severity: severity, SeverityUnlocalized: severity, Code: "57P01", Message: "m"})
	}
	lost := errors.New("unexpected EOF")
	tests := []struct {
		name                string
		fenceErr, commitErr error
		want                bool
	}{
		{"no error", nil, nil, false},
		{"the fence answered an ERROR", pgErr("ERROR"), nil, true},
		{"the fence answered a FATAL", pgErr("FATAL"), lost, true},
		{"COMMIT answered an ERROR", nil, pgErr("ERROR"), true},
		{"COMMIT answered a FATAL", nil, pgErr("FATAL"), false},
		{"COMMIT answered a PANIC", nil, pgErr("PANIC"), false},
		{"COMMIT answered an ERROR, localized severity only", nil, &pgconn.PgError{Severity: "ERROR"}, true},
		{"COMMIT answered a FATAL, localized severity only", nil, &pgconn.PgError{Severity: "FATAL"}, false},
		{"the connection lost during COMMIT", nil, lost, false},
		{"the connection closed before the pipeline was sent", fmt.Errorf("wrapped: %w", notSent{}), nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := commitRefused(tt.fenceErr, tt.commitErr); got != tt.want {
				t.Fatalf("commitRefused(%v, %v) = %v, want %v", tt.fenceErr, tt.commitErr, got, tt.want)
			}
		})
	}
}

// workCommitRunsWithTheAcceptedSynchronousCommit: no code of the handler
// runs between the fence and COMMIT, and COMMIT runs with the
// synchronous_commit New accepted, on both paths, whatever the handler did
// (SET LOCAL, set_config, a schema of its own, deferred triggers, a trigger
// on the store's table). A deferred trigger (seen) records the store's row
// and the WAL insert position: the row must not be done yet (it fired
// before the fence), and the WAL must be flushed past that position when
// Commit returns; on a server of its own whose WAL writer waits 10 s, only
// the COMMIT's own wait flushes it.
func workCommitRunsWithTheAcceptedSynchronousCommit(t *testing.T) {
	p := ownServer(t, "-c", "wal_writer_delay=10s", "-c", "wal_writer_flush_after=1GB")
	pool := p.pool(t)
	spoofSchema(t, pool)
	for _, way := range workWays {
		t.Run(way.name, func(t *testing.T) {
			// A table of its own: a row below puts a trigger on it.
			name := migratedTable(t, pool)
			s := storeOn(t, pool, func(o *Options) { o.Table = name })
			seen := newTable(t, pool, "seen_", "k bytea NOT NULL, setting text NOT NULL, state text NOT NULL, lsn pg_lsn NOT NULL")
			work := newTable(t, pool, "work_", "k bytea NOT NULL, off boolean NOT NULL")
			mustExec(t, pool, `CREATE FUNCTION `+seen+`_f() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN
				INSERT INTO `+seen+` VALUES (NEW.k, current_setting('synchronous_commit'),
					coalesce((SELECT state FROM `+s.table+` WHERE key = NEW.k), ''), pg_current_wal_insert_lsn());
				RETURN NULL; END $$`)
			mustExec(t, pool, `CREATE FUNCTION `+seen+`_off() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN
				PERFORM set_config('synchronous_commit', 'off', true); RETURN NULL; END $$`)
			mustExec(t, pool, `CREATE CONSTRAINT TRIGGER b_seen AFTER INSERT ON `+work+`
				DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION `+seen+`_f()`)
			mustExec(t, pool, `CREATE CONSTRAINT TRIGGER a_off AFTER INSERT ON `+work+`
				DEFERRABLE INITIALLY DEFERRED FOR EACH ROW WHEN (NEW.off) EXECUTE FUNCTION `+seen+`_off()`)
			t.Cleanup(func() {
				pool.Exec(context.Background(), `DROP FUNCTION IF EXISTS `+seen+`_f() CASCADE`)
				pool.Exec(context.Background(), `DROP FUNCTION IF EXISTS `+seen+`_off() CASCADE`)
			})
			for i, tt := range []struct {
				name string
				sql  []string // the handler's, before its insert into work
				off  bool     // a_off fires
				// onStore is a trigger function setting synchronous_commit
				// off, fired by the store's table (so by the fence)
				onStore bool
				want    string // the setting seen records
			}{
				{name: "set local synchronous_commit = off", sql: []string{"set local synchronous_commit = off"}, want: "off"},
				{name: "set_config", sql: []string{"select set_config('synchronous_commit', 'off', true)"}, want: "off"},
				// A set_config of the handler's schema ahead of pg_catalog.
				{name: "search_path", sql: []string{"set local search_path = ctoken_spoof, pg_catalog, public", "set local synchronous_commit = off"}, want: "off"},
				{name: "a deferred trigger fires before the fence", want: s.Durability().SynchronousCommit},
				{name: "a deferred trigger setting it off", off: true, want: "off"},
				{name: "the handler's SET CONSTRAINTS ALL DEFERRED", sql: []string{"set constraints all deferred"}, off: true, want: "off"},
				{name: "a trigger on the store's table setting it off", onStore: true, want: s.Durability().SynchronousCommit},
			} {
				t.Run(tt.name, func(t *testing.T) {
					if tt.onStore {
						trg := fmt.Sprintf("ctoken_test_off_%d", i)
						mustExec(t, pool, `CREATE TRIGGER `+trg+` AFTER INSERT OR UPDATE ON `+s.table+`
							FOR EACH ROW EXECUTE FUNCTION `+seen+`_off()`)
						t.Cleanup(func() { pool.Exec(context.Background(), `DROP TRIGGER IF EXISTS `+trg+` ON `+s.table) })
					}
					id := fmt.Sprintf("sync-%d", i)
					w := way.begin(t, s, id)
					ctx := w.Context(bg())
					tx, _ := TxFrom(ctx)
					for _, sql := range tt.sql {
						mustExec(t, tx, sql)
					}
					mustExec(t, tx, `INSERT INTO `+work+` VALUES ($1, $2)`, s.key(id), tt.off)
					must(t, w.Commit(bg(), time.Now().Add(time.Hour), nil, nil))
					var setting, state string
					var flushed bool
					must(t, pool.QueryRow(bg(), `SELECT setting, state, pg_current_wal_flush_lsn() >= lsn FROM `+seen+` WHERE k = $1`, s.key(id)).Scan(&setting, &state, &flushed))
					if state == "d" {
						t.Errorf("the handler's deferred trigger saw the store's row done: it fired after the fence, at COMMIT")
					}
					if setting != tt.want {
						t.Errorf("the handler's deferred trigger saw synchronous_commit %q, want %q", setting, tt.want)
					}
					if !flushed {
						t.Errorf("WAL not flushed past the work's when Commit returned: COMMIT did not run with synchronous_commit %q", s.Durability().SynchronousCommit)
					}
					if row, _ := rowOf(t, s, id); row.state != "d" {
						t.Fatalf("row state = %q, want done", row.state)
					}
				})
			}
		})
	}
}

// workTriggerRaisingTheFenceTextIsNotTheFence: a handler's AFTER trigger
// on the store's table fires inside the fence (on the done row it writes)
// and fails with the text of the fence's own refusal ("escaped"). The
// transaction is rolled back, so Commit must report it rolled back, and
// must not record the key as done (as it does for a true escape, whose
// writes may be kept): the retry runs the work. The trigger raises only
// in the work's transaction (a setting the handler set locally), not in
// the store's own later ones.
func workTriggerRaisingTheFenceTextIsNotTheFence(t *testing.T) {
	pool := needServer(t).pool(t)
	table := chargeTable(t, pool)
	for k, way := range workWays {
		t.Run(way.name, func(t *testing.T) {
			name := migratedTable(t, pool)
			s := storeOn(t, pool, func(o *Options) { o.Table = name })
			fn := name + "_raise"
			mustExec(t, pool, `CREATE FUNCTION `+fn+`() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN
				IF pg_catalog.current_setting('ctoken_test.raise', true) = 'on' THEN
					RAISE EXCEPTION 'invalid input syntax for type integer: "`+errFence+`escaped"' USING ERRCODE = '22P02';
				END IF;
				RETURN NULL; END $$`)
			mustExec(t, pool, `CREATE TRIGGER raise_fence AFTER INSERT OR UPDATE ON `+s.table+`
				FOR EACH ROW WHEN (NEW.state = 'd') EXECUTE FUNCTION `+fn+`()`)
			t.Cleanup(func() { pool.Exec(context.Background(), `DROP FUNCTION IF EXISTS `+fn+`() CASCADE`) })
			id := fmt.Sprintf("raise-%d", k)
			w := way.begin(t, s, id)
			ctx := w.Context(bg())
			must(t, charge(ctx, table, id, "work"))
			tx, _ := TxFrom(ctx)
			mustExec(t, tx, `select pg_catalog.set_config('ctoken_test.raise', 'on', true)`)
			err := w.Commit(bg(), time.Now().Add(time.Hour), []byte("fp"), []byte("r"))
			if !errors.Is(err, replay.ErrRolledBack) || errors.Is(err, errEscaped) {
				t.Fatalf("Commit = %v; want ErrRolledBack (the trigger's failure aborted the transaction), not an escape", err)
			}
			wantCharges(t, pool, table, id)
			if row, _ := rowOf(t, s, id); row.state == "d" {
				t.Fatalf("row = %+v: the key is recorded as done, though the work rolled back", row)
			}
		})
	}
}

// workDeferredConstraintFailureRollsBack: a deferred constraint of the
// handler (a foreign key DEFERRABLE INITIALLY DEFERRED) that the work
// violates fails Commit as a failed statement of the work does (now at
// the SET CONSTRAINTS before the fence, no longer at COMMIT): rolled
// back, nothing kept, the lease as it was (BeginWork's row held, no row
// for AcquireWork), and the retry runs and commits.
func workDeferredConstraintFailureRollsBack(t *testing.T) {
	pool := needServer(t).pool(t)
	for _, path := range []string{"BeginWork", "AcquireWork"} {
		t.Run(path, func(t *testing.T) {
			s := storeOn(t, pool)
			table := chargeTable(t, pool)
			parent := newTable(t, pool, "parent_", "id int PRIMARY KEY")
			child := newTable(t, pool, "child_", "pid int NOT NULL REFERENCES "+parent+" DEFERRABLE INITIALLY DEFERRED")
			t.Cleanup(func() { pool.Exec(context.Background(), `DROP TABLE IF EXISTS `+child) })
			id := "deferred-fk"
			var token string
			begin := func(t *testing.T) replay.Work {
				if path == "AcquireWork" {
					return acquireWork(t, s, id, []byte("fp"))
				}
				if token == "" {
					var w replay.Work
					w, token = acquire(t, s, id, time.Minute)
					return w
				}
				w, err := s.BeginWork(bg(), id, token)
				must(t, err)
				t.Cleanup(func() { w.Rollback(bg()) })
				return w
			}
			w := begin(t)
			ctx := w.Context(bg())
			must(t, charge(ctx, table, id, "violating"))
			tx, _ := TxFrom(ctx)
			mustExec(t, tx, `INSERT INTO `+child+` VALUES (1)`)
			err := w.Commit(bg(), time.Now().Add(time.Hour), nil, nil)
			for _, want := range []error{ErrUnavailable, replay.ErrRolledBack, pgx.ErrTxCommitRollback} {
				wantIs(t, err, want, "Commit: want %v, got %v", want)
			}
			var pgErr *pgconn.PgError
			if !errors.As(err, &pgErr) || pgErr.Code != "23503" {
				t.Fatalf("Commit = %v, want the foreign key violation", err)
			}
			wantCharges(t, pool, table, id)
			wantLease := "l"
			if path == "AcquireWork" {
				wantLease = ""
			}
			if row, _ := rowOf(t, s, id); row.state != wantLease {
				t.Fatalf("lease row state = %q, want %q", row.state, wantLease)
			}
			w = begin(t)
			ctx = w.Context(bg())
			must(t, charge(ctx, table, id, "retry"))
			must(t, w.Commit(bg(), time.Now().Add(time.Hour), nil, nil))
			wantCharges(t, pool, table, id, "retry")
		})
	}
}
