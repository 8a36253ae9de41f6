package drivertest

import (
	"context"
	"database/sql"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/ctoken/ctoken"
	"github.com/ctoken/ctoken/mcptoken"
	"github.com/ctoken/ctoken/replay"
	"github.com/ctoken/ctoken/replay/replaytest"
	"github.com/ctoken/ctoken/sqlitestore"
	"github.com/ctoken/ctoken/storetest"
)

// openMigrated opens a new database file in a temporary directory with
// the safe settings and runs Migrate on it. It returns the pool and the
// file's path.
func openMigrated(t testing.TB, d Driver) (*sql.DB, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "replay.db")
	db := d.Open(t, path)
	must(t, sqlitestore.Migrate(context.Background(), db, ""))
	return db, path
}

// mustStore builds a Store on db and closes it when the test ends.
func mustStore(t testing.TB, db *sql.DB, opts sqlitestore.Options) *sqlitestore.Store {
	t.Helper()
	s, err := sqlitestore.New(context.Background(), db, opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestStore runs storetest's suite on a store over a real file, on each
// of the test binary's drivers, and pins the one refusal of the suite's
// kits that SQLite makes: a Work holds the database's only writer, so
// Transactional MCP tasks are refused, not stalled.
func TestStore(t *testing.T) {
	eachDriver(t, func(t *testing.T, d Driver) {
		store := func(t *testing.T) *sqlitestore.Store {
			db, _ := openMigrated(t, d)
			return mustStore(t, db, sqlitestore.Options{})
		}
		t.Run("mcp tasks work refused", func(t *testing.T) {
			keys, err := ctoken.NewKeyring(ctoken.RandomKey())
			must(t, err)
			ts, err := mcptoken.NewTasks(mcptoken.TasksConfig{Keys: keys, Store: store(t)})
			must(t, err)
			run := func(context.Context, *mcptoken.TaskCall) (json.RawMessage, error) { return json.RawMessage(`{}`), nil }
			if err := ts.Add(mcptoken.TaskTool{Name: "tx", Run: run, Transactional: true}); !errors.Is(err, ctoken.ErrConfig) {
				t.Fatalf("Add of a Transactional task tool = %v; want ctoken.ErrConfig", err)
			}
		})
		storetest.Exercise(t, storetest.Harness{
			NewStore:     func(t *testing.T) replay.Store { return store(t) },
			NewInstances: func(t *testing.T) (replay.Store, replay.Store) { return twoInstances(t, d) },
			NewWork: func(t *testing.T) (replaytest.WorkStore, replaytest.Effects) {
				s, db := workStore(t, d, sqlitestore.Options{})
				return s, sqliteEffects{db}
			},
		})
	})
}

// forgetHorizon is the horizon of the stores the forget contract runs
// on: above replaytest.ForgetHorizonMax, since a store that lost its data
// refuses until an operator re-arms it, and never serves again by itself
// (the contract's check that service comes back applies to stores that
// do). The contract then checks for the horizon less two seconds that no
// ID claimed, confirmed or leased before the loss is accepted again.
const forgetHorizon = replaytest.ForgetHorizonMax + time.Second

// TestForgetContract runs replaytest's forget contract for each way the
// table can lose what it held while a store runs on it: the table
// emptied, dropped, or only its marker row deleted.
func TestForgetContract(t *testing.T) {
	ways := []struct {
		name, sql string
	}{
		{"table emptied", `DELETE FROM ctoken_replay`},
		{"table dropped", `DROP TABLE ctoken_replay`},
		{"marker row deleted", `DELETE FROM ctoken_replay WHERE key = x'0000'`},
	}
	eachDriver(t, func(t *testing.T, d Driver) {
		// The ways run at once, each for the contract's ~9 s of
		// mostly waiting, in goroutines rather than as parallel
		// subtests, so they do not hold -parallel's slots (GOMAXPROCS)
		// from the rest of the package.
		var wg sync.WaitGroup
		defer wg.Wait()
		for _, w := range ways {
			wg.Go(func() {
				t.Run(w.name, func(t *testing.T) {
					db, _ := openMigrated(t, d)
					var s *sqlitestore.Store
					replaytest.RunForgetContract(t, func(t *testing.T) replaytest.Store {
						s = mustStore(t, db, sqlitestore.Options{Horizon: forgetHorizon, SweepInterval: -1})
						return s
					}, func(t *testing.T) {
						mustExec(t, context.Background(), db, w.sql)
					})
					// The refusal is the loss's, not a passing error.
					if _, err := s.Claim(context.Background(), "after-the-contract", time.Now().Add(time.Second)); !errors.Is(err, sqlitestore.ErrForgotten) {
						t.Fatalf("Claim after the loss = %v; want ErrForgotten", err)
					}
				})
			})
		}
	})
}

// TestSweep: one Sweep deletes every expired row, never a live row, the
// marker or a Work's row; claims of the swept IDs are first again, live
// ones not; with a caller's transaction it deletes in it. The store's
// sweeper drains a backlog of many steps in one sweep while the
// application's claims are answered, reports it as a replay.EventSwept
// of its table, and stops at Close mid-backlog.
func TestSweep(t *testing.T) {
	runOnEveryDriver(t, []driverCase{{"deletes every expired row and no other", func(t *testing.T, d Driver) {
		ctx := context.Background()
		db, _ := openMigrated(t, d)
		s := mustStore(t, db, sqlitestore.Options{SweepInterval: -1})
		until := time.Now().Add(time.Hour)
		live := idList("live-", 5)
		claimAll(t, s, live, until)
		insertExpired(t, db, s, 2450)
		if n, err := s.Sweep(ctx); n != 2450 || err != nil {
			t.Fatalf("Sweep = %d, %v; want the 2 450 expired rows", n, err)
		}
		if n, err := s.Sweep(ctx); n != 0 || err != nil {
			t.Fatalf("Sweep again = %d, %v; want 0", n, err)
		}
		claimedAll(t, s, live, until, "after the sweep")
		claimAll(t, s, []string{"old-7"}, until)
	}}, {"in a caller's transaction, deletes with it", func(t *testing.T, d Driver) {
		ctx := context.Background()
		db, _ := openMigrated(t, d)
		s := mustStore(t, db, sqlitestore.Options{SweepInterval: -1})
		insertExpired(t, db, s, 250)
		for _, commit := range []bool{false, true} {
			tx, err := db.BeginTx(ctx, nil)
			must(t, err)
			if n, err := s.Sweep(sqlitestore.WithTx(ctx, tx)); n != 250 || err != nil {
				tx.Rollback()
				t.Fatalf("Sweep in a transaction = %d, %v; want the 250 expired rows", n, err)
			}
			want := 0
			if commit {
				err = tx.Commit()
			} else {
				err, want = tx.Rollback(), 250
			}
			must(t, err)
			if left := expiredRows(t, db); left != want {
				t.Fatalf("%d expired rows after the transaction (commit %v); want %d", left, commit, want)
			}
		}
	}}, {"the sweeper drains a backlog of many steps while claims are answered", func(t *testing.T, d Driver) {
		ctx := context.Background()
		db, _ := openMigrated(t, d)
		const backlog = 5000
		swept := make(chan replay.Event, 16)
		// The claims wait behind the Work that writes the backlog, seconds
		// on a slow machine.
		s := mustStore(t, db, sqlitestore.Options{SweepInterval: 10 * time.Millisecond, Timeout: time.Minute, Observer: func(e replay.Event) {
			if e.Kind == replay.EventSwept && (e.Deleted != 0 || e.Reason != nil) {
				select {
				case swept <- e:
				default:
				}
			}
		}})
		until := time.Now().Add(time.Hour)
		claimAll(t, s, idList("live-", 5), until)
		// The claims, until the backlog is gone: each answered first, and
		// at least one while the backlog was partly swept. Once the claims
		// run, a Work holds the store's writer and writes the backlog in
		// its transaction: the claims and the sweep wait behind it, so the
		// sweep never ends before the claims begin.
		stop, running, claimed := make(chan struct{}), make(chan struct{}), make(chan [2]int, 1)
		go func() {
			n, mid := 0, 0
			defer func() { claimed <- [2]int{n, mid} }()
			for !isClosed(stop) {
				if first, err := s.Claim(ctx, fmt.Sprint("during-", n), until); !first || err != nil {
					t.Errorf("Claim(during-%d) while sweeping = %v, %v; want first", n, first, err)
					return
				}
				if n++; n == 1 {
					close(running)
				}
				if left := expiredRows(t, db); left > 0 && left < backlog {
					mid++
				}
			}
		}()
		select {
		case <-running:
			w, tx := workOf(t, s, "backlog", true, nil)
			insertExpired(t, tx, nil, backlog)
			must(t, w.Commit(ctx, until, nil, nil))
		case got := <-claimed:
			t.Fatalf("the claims stopped after %d", got[0])
		}
		select {
		case e := <-swept:
			if e.Deleted != backlog || e.Reason != nil {
				t.Errorf("the first sweep that deleted rows: %d, %v; want the whole backlog of %d in one sweep", e.Deleted, e.Reason, backlog)
			}
			if e.Store != "sqlitestore" || e.Table != sqlitestore.DefaultTable || e.Shard != -1 {
				t.Errorf("EventSwept %+v; want one of sqlitestore's %s table, no shard", e, sqlitestore.DefaultTable)
			}
		case <-time.After(time.Minute):
			t.Errorf("no sweep deleted the backlog within a minute")
		}
		close(stop)
		got := <-claimed
		if rows := countRows(t, db, `SELECT count(*) FROM ctoken_replay`); rows != 1+5+1+got[0] {
			t.Fatalf("%d rows after the sweep; want the marker, 5 live claims, the Work's and the %d claimed during it", rows, got[0])
		}
		if got[1] == 0 {
			t.Fatalf("none of the %d claims was answered while the backlog was partly swept", got[0])
		}
	}}, {"Close stops the sweeper mid-backlog", func(t *testing.T, d Driver) {
		ctx := context.Background()
		db, _ := openMigrated(t, d)
		const backlog = 20000
		insertExpired(t, db, nil, backlog)
		s := mustStore(t, db, sqlitestore.Options{SweepInterval: 10 * time.Millisecond, Timeout: 10 * time.Minute})
		// Once the sweep has begun, a Work holds the writer: the sweep's
		// next step waits behind it until Close.
		for deadline := time.Now().Add(time.Minute); expiredRows(t, db) == backlog; {
			if time.Now().After(deadline) {
				t.Fatalf("the sweeper deleted none of %d expired rows within a minute", backlog)
			}
		}
		_, w, err := s.AcquireWork(ctx, "holds-the-writer", time.Hour, []byte("fp"))
		must(t, err)
		left := expiredRows(t, db)
		if left == 0 {
			t.Fatalf("the sweep of %d rows ended before a Work could stop it (the machine stalled the test)", backlog)
		}
		closed := make(chan struct{})
		go func() { s.Close(); close(closed) }()
		within(t, closed, time.Minute, "Close did not return within a minute while the sweep waited for the writer")
		if err := w.Rollback(ctx); err != nil {
			t.Logf("Rollback after Close: %v", err)
		}
		if after := expiredRows(t, db); after != left {
			t.Fatalf("%d expired rows after Close, %d when it was called; want the sweep stopped", after, left)
		}
	}}})
}

// insertExpired writes n expired rows ("old-0" …) in one statement, as
// the store writes a claim (its key: the prefix's length, the prefix, the
// ID), until long past; s nil: DefaultPrefix.
func insertExpired(t testing.TB, db interface {
	ExecContext(context.Context, string, ...any) (sql.Result, error)
}, s *sqlitestore.Store, n int) {
	t.Helper()
	prefix := sqlitestore.DefaultPrefix
	if s != nil {
		prefix = s.Prefix()
	}
	key := binary.BigEndian.AppendUint16(nil, uint16(len(prefix)))
	mustExec(t, context.Background(), db, `WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i + 1 < ?)`+
		` INSERT INTO ctoken_replay (key, state, token, until) SELECT unhex(? || hex('old-' || i)), 'c', '', 1 FROM n`,
		n, hex.EncodeToString(append(key, prefix...)))
}

// expiredRows counts the rows insertExpired wrote that remain.
func expiredRows(t testing.TB, db *sql.DB) int {
	t.Helper()
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM ctoken_replay WHERE until = 1`).Scan(&n); err != nil {
		t.Error(err)
	}
	return n
}

// sqliteEffects is replaytest.Effects on the app table of workStore: one
// row per effect, written through TxFrom.
type sqliteEffects struct{ db *sql.DB }

func (e sqliteEffects) Write(ctx context.Context, id string) error {
	tx, err := sqlitestore.TxFrom(ctx)
	if err != nil {
		return err
	}
	_, err = tx.ExecContext(ctx, `INSERT INTO app (id) VALUES (?)`, id)
	return err
}

func (e sqliteEffects) Count(t *testing.T, id string) int { return appRows(t, e.db, id) }

// twoInstances returns two Stores on one migrated file, each with its own
// pool, as two instances of a service on one machine have.
func twoInstances(t *testing.T, d Driver) (*sqlitestore.Store, *sqlitestore.Store) {
	t.Helper()
	db, path := openMigrated(t, d)
	return mustStore(t, db, sqlitestore.Options{SweepInterval: -1}), mustStore(t, d.Open(t, path), sqlitestore.Options{SweepInterval: -1})
}
