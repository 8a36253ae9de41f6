package pgstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ctoken/ctoken/replay"
	"github.com/jackc/pgx/v5/pgconn"
)

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
			if err := charge(ctx, table, id, "first"); err != nil {
				t.Fatal(err)
			}
			if got := chargesOf(t, s.pool, table, id); len(got) != 0 {
				t.Fatalf("charges before Commit = %q, want none visible", got)
			}
			if err := w.Commit(bg(), time.Now().Add(time.Hour), tt.fingerprint, tt.result); err != nil {
				t.Fatal(err)
			}
			if got := chargesOf(t, s.pool, table, id); len(got) != 1 {
				t.Fatalf("charges after Commit = %q, want one", got)
			}
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

// workCommitAfterTheLeaseEndedRollsBack: a lease that ran out
// (whether or not another holder took the ID over) makes Commit roll the
// work back with ErrLeaseLost; a second holder's work commits.
func workCommitAfterTheLeaseEndedRollsBack(t *testing.T) {
	s := newTestStore(t)
	table := chargeTable(t, s.pool)
	until := time.Now().Add(time.Hour)

	t.Run("taken over by a second holder", func(t *testing.T) {
		w1, _ := acquire(t, s, "k1", time.Minute)
		if err := charge(w1.Context(bg()), table, "k1", "first"); err != nil {
			t.Fatal(err)
		}
		expire(t, s, "k1")
		w2, _ := acquire(t, s, "k1", time.Minute)
		if err := charge(w2.Context(bg()), table, "k1", "second"); err != nil {
			t.Fatal(err)
		}
		if err := w2.Commit(bg(), until, []byte("fp"), []byte("second")); err != nil {
			t.Fatal(err)
		}
		if err := w1.Commit(bg(), until, []byte("fp"), []byte("first")); !errors.Is(err, replay.ErrLeaseLost) {
			t.Fatalf("first holder's Commit = %v, want ErrLeaseLost", err)
		}
		if got := chargesOf(t, s.pool, table, "k1"); len(got) != 1 || got[0] != "second" {
			t.Fatalf("charges = %q, want only the second holder's", got)
		}
		wantRecord(t, s, "k1", replay.LeaseDone, []byte("fp"), []byte("second"))
	})

	t.Run("a handler that outlives its lease", func(t *testing.T) {
		w, _ := acquire(t, s, "k2", 200*time.Millisecond)
		ctx := w.Context(bg())
		if err := charge(ctx, table, "k2", "slow"); err != nil {
			t.Fatal(err)
		}
		time.Sleep(400 * time.Millisecond) // the handler is slower than its lease
		if err := w.Commit(bg(), until, []byte("fp"), []byte("slow")); !errors.Is(err, replay.ErrLeaseLost) {
			t.Fatalf("Commit after the lease ran out = %v, want ErrLeaseLost", err)
		}
		if got := chargesOf(t, s.pool, table, "k2"); len(got) != 0 {
			t.Fatalf("charges = %q, want none", got)
		}
		if row, _ := rowOf(t, s, "k2"); row.state != "l" {
			t.Fatalf("row state = %q, want the expired lease left as it was", row.state)
		}
		wantRecord(t, s, "k2", replay.LeaseAcquired, nil, nil) // free again
	})
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
		if err := charge(w1.Context(bg()), table, id, "first"); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		var err1, err2 error
		second := false
		wg.Add(2)
		go func() {
			defer wg.Done()
			time.Sleep(lease - 5*time.Millisecond + time.Duration(i%10)*time.Millisecond)
			err1 = w1.Commit(bg(), until, []byte("fp"), []byte("first"))
		}()
		go func() {
			defer wg.Done()
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
		}()
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
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := commitRefused(tt.fenceErr, tt.commitErr); got != tt.want {
				t.Fatalf("commitRefused(%v, %v) = %v, want %v", tt.fenceErr, tt.commitErr, got, tt.want)
			}
		})
	}
}

// workCommitRunsWithTheAcceptedSynchronousCommit: a handler's SET
// LOCAL synchronous_commit = off does not reach the work's COMMIT, which
// runs with the setting New accepted; a deferred trigger, which fires at
// COMMIT, reads it.
func workCommitRunsWithTheAcceptedSynchronousCommit(t *testing.T) {
	s := newTestStore(t)
	seen := newTable(t, s.pool, "seen_", "setting text NOT NULL")
	fn := seen + "_f"
	if _, err := s.pool.Exec(bg(), `CREATE FUNCTION `+fn+`() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN INSERT INTO `+seen+` VALUES (current_setting('synchronous_commit')); RETURN NULL; END $$`); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.pool.Exec(context.Background(), `DROP FUNCTION IF EXISTS `+fn+`() CASCADE`) })
	table := chargeTable(t, s.pool)
	if _, err := s.pool.Exec(bg(), `CREATE CONSTRAINT TRIGGER at_commit AFTER INSERT ON `+table+`
		DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION `+fn+`()`); err != nil {
		t.Fatal(err)
	}
	spoofSchema(t, s.pool)
	for i, sql := range []string{"set local synchronous_commit = off", "select set_config('synchronous_commit', 'off', true)",
		// A set_config of the handler's schema ahead of pg_catalog.
		"set local search_path = ctoken_spoof, pg_catalog, public; set local synchronous_commit = off"} {
		t.Run(sql, func(t *testing.T) {
			id := "sync-" + strconv.Itoa(i)
			w, _ := acquire(t, s, id, time.Minute)
			ctx := w.Context(bg())
			tx, _ := TxFrom(ctx)
			for _, sql := range strings.Split(sql, "; ") {
				if _, err := tx.Exec(ctx, sql); err != nil {
					t.Fatal(err)
				}
			}
			if err := charge(ctx, table, id, "h"); err != nil {
				t.Fatal(err)
			}
			if err := w.Commit(bg(), time.Now().Add(time.Hour), nil, nil); err != nil {
				t.Fatal(err)
			}
			var got string
			if err := s.pool.QueryRow(bg(), `SELECT setting FROM `+seen+` ORDER BY ctid DESC LIMIT 1`).Scan(&got); err != nil {
				t.Fatal(err)
			}
			if want := s.Durability().SynchronousCommit; got != want {
				t.Fatalf("COMMIT ran with synchronous_commit %q, want %q", got, want)
			}
		})
	}
}
