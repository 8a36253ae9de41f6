package drivertest

// What New finds of a WAL deleted after a crash, case by case: the child
// process makes one kind of acknowledged step land in the WAL alone (the
// database file holding everything before it), is SIGKILLed, and the
// parent deletes the WAL (a loss New must refuse) or does what loses
// nothing (New must serve).

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ctoken/ctoken/replay"
	"github.com/ctoken/ctoken/sqlitestore"
)

// walLossChild: a store (or two) on the file with automatic checkpoints
// off and no recheck (as faultJob.HoldInWAL), the WAL copied into the file
// once; then the scenario's acknowledged steps, "done", and it waits to be
// SIGKILLed.
func walLossChild(job faultJob) error {
	ctx := context.Background()
	db, err := sql.Open(driver.SQLName, driver.DSN(job.DB, With("wal_autocheckpoint", "0")))
	if err != nil {
		return err
	}
	opts := sqlitestore.Options{RecheckInterval: time.Hour, SweepInterval: -1}
	if job.Scenario == "with tx, no idle connection" {
		// Every connection closes when given back: SQLite deletes the
		// WAL New saw (after copying it) and makes a new one.
		db.SetMaxIdleConns(0)
	}
	s, err := sqlitestore.New(ctx, db, opts)
	if err != nil {
		return fmt.Errorf("New: %w", err)
	}
	var s2 *sqlitestore.Store
	if job.Scenario == "two tables" {
		o2 := opts
		o2.Table = "other_table"
		if s2, err = sqlitestore.New(ctx, db, o2); err != nil {
			return fmt.Errorf("New other_table: %w", err)
		}
	}
	if job.Scenario != "with tx, no idle connection" {
		if err := checkpointTruncate(db); err != nil {
			return err
		}
	}
	say := func(f string, a ...any) { os.Stdout.WriteString(fmt.Sprintf(f, a...) + "\n") }
	id := func(i int) string { return fmt.Sprintf("x-%d", i) }
	switch job.Scenario {
	case "claim": // fresh claims, or claims over expired rows the parent left
		for i := range job.N {
			first, err := s.Claim(ctx, id(i), time.Now().Add(time.Hour))
			if err != nil || !first {
				return fmt.Errorf("Claim(%s) = %v, %v", id(i), first, err)
			}
			say("claimed %s", id(i))
		}
	case "confirm": // leases acquired and copied into the file, then confirmed
		tokens := map[string]string{}
		for i := range job.N {
			l, err := s.AcquireLease(ctx, id(i), job.Lease)
			if err != nil || l.State != replay.LeaseAcquired {
				return fmt.Errorf("AcquireLease(%s) = %+v, %v", id(i), l, err)
			}
			tokens[id(i)] = l.Token
		}
		if err := checkpointTruncate(db); err != nil {
			return err
		}
		for i := range job.N {
			if err := s.ConfirmLease(ctx, id(i), tokens[id(i)], time.Now().Add(time.Hour)); err != nil {
				return fmt.Errorf("ConfirmLease(%s) = %v", id(i), err)
			}
			say("confirmed %s", id(i))
		}
	case "escape": // a Work whose transaction escaped: refused until Release
		r, w, err := s.AcquireWork(ctx, "esc", job.Lease, []byte("fp"))
		if err != nil || w == nil {
			return fmt.Errorf("AcquireWork = %+v, %v", r, err)
		}
		tx, err := sqlitestore.TxFrom(w.Context(ctx))
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `ROLLBACK`); err != nil {
			return fmt.Errorf("ROLLBACK: %v", err)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO effects (id) VALUES ('after')`); err != nil {
			return fmt.Errorf("insert after ROLLBACK: %v", err)
		}
		if err := w.Rollback(ctx); !errors.Is(err, sqlitestore.ErrUnavailable) {
			return fmt.Errorf("Rollback after the escape = %v; want ErrUnavailable", err)
		}
		if first, err := s.Claim(ctx, "esc", time.Now().Add(time.Hour)); first {
			return fmt.Errorf("Claim of the escaped ID = first (%v)", err)
		}
		say("escaped esc")
	case "two tables": // claims in other_table and in the store's table
		for i := range job.N {
			if first, err := s2.Claim(ctx, id(i), time.Now().Add(time.Hour)); err != nil || !first {
				return fmt.Errorf("Claim other(%s) = %v, %v", id(i), first, err)
			}
			if first, err := s.Claim(ctx, "y-"+id(i), time.Now().Add(time.Hour)); err != nil || !first {
				return fmt.Errorf("Claim(%s) = %v, %v", id(i), first, err)
			}
			say("claimed %s", id(i))
		}
	case "release": // many claims, then 70 % of them released one by one
		pad := strings.Repeat("p", 60)
		for i := range job.N {
			if first, err := s.Claim(ctx, pad+id(i), time.Now().Add(time.Hour)); err != nil || !first {
				return fmt.Errorf("Claim(%s) = %v, %v", id(i), first, err)
			}
		}
		if err := checkpointTruncate(db); err != nil {
			return err
		}
		for i := range job.N {
			if i%10 < 7 {
				if err := s.Release(ctx, pad+id(i)); err != nil {
					return fmt.Errorf("Release(%s) = %v", id(i), err)
				}
			}
		}
		say("released")
	case "with tx", "with tx, no idle connection": // claims in the caller's transactions only (WithTx)
		if job.Scenario == "with tx, no idle connection" { // on a WAL made after New's
			hold, err := db.Conn(ctx) // a connection kept open: the WAL stays
			if err != nil {
				return err
			}
			defer hold.Close()
			if err := hold.PingContext(ctx); err != nil {
				return err
			}
		}
		for i := range job.N {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			first, err := s.Claim(sqlitestore.WithTx(ctx, tx), id(i), time.Now().Add(time.Hour))
			if err != nil || !first {
				return fmt.Errorf("Claim in tx(%s) = %v, %v", id(i), first, err)
			}
			if err := tx.Commit(); err != nil {
				return err
			}
			say("claimed %s", id(i))
		}
	default:
		return fmt.Errorf("unknown scenario %q", job.Scenario)
	}
	say("done")
	time.Sleep(2 * faultPatience) // until killed
	return nil
}

// walSession opens path, runs stmts and closes the pool (its last
// connection: SQLite copies the WAL into the file and deletes it).
func walSession(t *testing.T, path string, stmts ...string) {
	t.Helper()
	db := driver.Open(t, path)
	for _, q := range stmts {
		mustExec(t, context.Background(), db, q)
	}
	must(t, db.Close())
}

// wantNewRefusesAfterWALDeleted deletes the WAL and shared memory and
// checks that New refuses with ErrForgotten; when it serves, the test
// fails and the store is returned, so the caller can count what it
// accepts again.
func wantNewRefusesAfterWALDeleted(t *testing.T, path string) *sqlitestore.Store {
	t.Helper()
	removeFiles(t, path+"-wal", path+"-shm")
	s, err := sqlitestore.New(context.Background(), driver.Open(t, path), sqlitestore.Options{SweepInterval: -1})
	if errors.Is(err, sqlitestore.ErrForgotten) {
		return nil
	}
	if err != nil {
		t.Fatalf("New = %v", err)
	}
	t.Cleanup(func() { s.Close() })
	t.Errorf("New served after the WAL holding acknowledged steps was deleted")
	return s
}

// claimsLost runs the child's scenario of 30 claims on path and wants
// New to refuse once the WAL is deleted; when it serves, it counts the
// claims accepted again.
func claimsLost(t *testing.T, path, scenario string) {
	t.Helper()
	runToDone(t, faultJob{Scenario: scenario, DB: path, N: 30})
	if s := wantNewRefusesAfterWALDeleted(t, path); s != nil {
		again := 0
		for _, id := range idList("x-", 30) {
			if first, _ := s.Claim(context.Background(), id, time.Now().Add(time.Hour)); first {
				again++
			}
		}
		t.Errorf("%d of 30 acknowledged claims accepted again", again)
	}
}

// TestWALLoss: a WAL deleted after a crash is refused whatever the lost
// steps wrote (claims over expired rows of the same keys; confirmations
// of leases already in the file; an escaped Work, refused for good;
// claims of keys another table also holds; claims made only in callers'
// transactions; fresh claims are TestLoss's "after a crash, rm -wal
// -shm"), and what loses nothing is served (pages freed by
// releases, then reused; two tables' stores restarted one after the
// other, each after a migration step on a handle of its own), but for
// another table's store releasing its rows after a clean recovery, which
// refuses.
func TestWALLoss(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		test func(t *testing.T)
	}{
		{"claims over expired rows of their keys are found", func(t *testing.T) {
			path := faultDB(t, driver)
			db := driver.Open(t, path)
			s := mustStore(t, db, sqlitestore.Options{SweepInterval: -1})
			short := time.Now().Add(time.Second)
			claimAll(t, s, idList("x-", 30), short)
			s.Close()
			db.Close() // no connection of this process on the file when its WAL goes
			time.Sleep(time.Until(short.Add(200 * time.Millisecond)))
			claimsLost(t, path, "claim")
		}},
		{"confirmations of leases in the file are found", func(t *testing.T) {
			path := faultDB(t, driver)
			lease := time.Second
			runToDone(t, faultJob{Scenario: "confirm", DB: path, N: 30, Lease: lease})
			if s := wantNewRefusesAfterWALDeleted(t, path); s != nil {
				time.Sleep(lease + 200*time.Millisecond)
				again := 0
				for i := range 30 {
					if l, err := s.AcquireLease(ctx, fmt.Sprintf("x-%d", i), time.Minute); err == nil && l.State == replay.LeaseAcquired {
						again++
					}
				}
				t.Errorf("%d of 30 confirmed IDs acquired again", again)
			}
		}},
		{"an escaped Work is found after its until", func(t *testing.T) {
			path := faultDB(t, driver)
			runToDone(t, faultJob{Scenario: "escape", DB: path, Lease: time.Second})
			if s := wantNewRefusesAfterWALDeleted(t, path); s != nil {
				if first, _ := s.Claim(ctx, "esc", time.Now().Add(time.Hour)); first {
					t.Error("the escaped ID is first again")
				}
			}
		}},
		{"claims of keys another table holds are found", func(t *testing.T) {
			path := faultDB(t, driver)
			db := driver.Open(t, path)
			must(t, sqlitestore.Migrate(ctx, db, "other_table"))
			other := mustStore(t, db, sqlitestore.Options{Table: "other_table", SweepInterval: -1})
			claimAll(t, other, idList("x-", 30), time.Now().Add(time.Hour))
			other.Close()
			db.Close()
			claimsLost(t, path, "claim")
		}},
		{"claims made only in callers' transactions are found", func(t *testing.T) {
			claimsLost(t, faultDB(t, driver), "with tx")
		}},
		{"claims made only in callers' transactions on a WAL made after New's are found", func(t *testing.T) {
			claimsLost(t, faultDB(t, driver), "with tx, no idle connection")
		}},
		{"another table's releases after the WAL was deleted refuse this table", func(t *testing.T) {
			path := faultDB(t, driver)
			db := driver.Open(t, path)
			must(t, sqlitestore.Migrate(ctx, db, "other_table"))
			db.Close()
			runToDone(t, faultJob{Scenario: "two tables", DB: path, N: 30})
			walSession(t, path, `SELECT count(*) FROM sqlite_master`)
			db = driver.Open(t, path)
			other := mustStore(t, db, sqlitestore.Options{Table: "other_table", SweepInterval: -1})
			for i := range 10 {
				must(t, other.Release(ctx, fmt.Sprintf("x-%d", i)))
			}
			other.Close()
			db.Close()
			// The released rows, live in this table's kept WAL, are in no
			// table: they read as lost (docs/sqlitestore.md, known limits).
			wantForgotten(t, driver.Open(t, path), sqlitestore.Options{SweepInterval: -1}, nil, "New", "lacks 10 of the", "ctoken-sqlite rearm")
		}},
		{"pages freed by releases, then reused, lose nothing", func(t *testing.T) {
			path := faultDB(t, driver)
			runToDone(t, faultJob{Scenario: "release", DB: path, N: 800})
			walSession(t, path, `SELECT count(*) FROM sqlite_master`)
			walSession(t, path, `INSERT INTO effects (id) SELECT 'app-' || i || '-' || hex(randomblob(300)) FROM (WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 300) SELECT i FROM n)`)
			var kept []string
			for i := range 800 {
				if i%10 >= 7 {
					kept = append(kept, strings.Repeat("p", 60)+fmt.Sprintf("x-%d", i))
				}
			}
			serves(t, path, "", kept)
		}},
		{"two tables' stores restarted, each after its own migration step, lose nothing", func(t *testing.T) {
			path := faultDB(t, driver)
			db := driver.Open(t, path)
			must(t, sqlitestore.Migrate(ctx, db, "other_table"))
			db.Close()
			runToDone(t, faultJob{Scenario: "two tables", DB: path, N: 30})
			// Each restart: Migrate on a handle of its own (closed: SQLite
			// copies the WAL into the file and deletes it), then the store,
			// which writes; the second table's restart follows the first's.
			for round := range 2 {
				// The IDs the two tables scenario claimed in each table.
				for _, tt := range []struct{ table, claimed string }{{"", "y-x-"}, {"other_table", "x-"}} {
					migrated := driver.Open(t, path)
					must(t, sqlitestore.Migrate(ctx, migrated, tt.table))
					migrated.Close()
					s := serves(t, path, tt.table, idList(tt.claimed, 30))
					claimAll(t, s, idList(fmt.Sprint("r", round, tt.table, "-"), 20), time.Now().Add(time.Hour))
				}
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.test(t)
		})
	}
}

// serves: New on table serves (nothing was lost) and refuses each of
// ids, acknowledged before the crash; the store stays open until the test
// ends.
func serves(t *testing.T, path, table string, ids []string) *sqlitestore.Store {
	t.Helper()
	s := mustStore(t, driver.Open(t, path), sqlitestore.Options{Table: table, SweepInterval: -1})
	claimedAll(t, s, ids, time.Now().Add(time.Hour), fmt.Sprintf("in %q", table))
	return s
}
