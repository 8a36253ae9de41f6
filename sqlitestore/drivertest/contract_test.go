package drivertest

import (
	"context"
	"database/sql"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/ctoken/ctoken"
	"github.com/ctoken/ctoken/exchange/exchangetest"
	"github.com/ctoken/ctoken/idempotency/idempotencytest"
	"github.com/ctoken/ctoken/mcptoken"
	"github.com/ctoken/ctoken/mcptoken/mcptokentest"
	"github.com/ctoken/ctoken/replay"
	"github.com/ctoken/ctoken/replay/replaytest"
	"github.com/ctoken/ctoken/sqlitestore"
	"github.com/ctoken/ctoken/webhook/webhooktest"
)

// openMigrated opens a new database file in a temporary directory with
// the safe settings and runs Migrate on it. It returns the pool and the
// file's path.
func openMigrated(t testing.TB, d Driver) (*sql.DB, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "replay.db")
	db := d.Open(t, path)
	if err := sqlitestore.Migrate(context.Background(), db, ""); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
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

// TestContracts runs idempotencytest's, mcptokentest's, exchangetest's,
// webhooktest's and replaytest's claim, work, lease, record, renew, read and request-state
// contracts on a store over a real file, on the test binary's driver.
func TestContracts(t *testing.T) {
	for _, d := range Drivers() {
		t.Run(d.Name, func(t *testing.T) {
			t.Parallel()
			store := func(t *testing.T) *sqlitestore.Store {
				db, _ := openMigrated(t, d)
				return mustStore(t, db, sqlitestore.Options{})
			}
			t.Run("work", func(t *testing.T) {
				t.Parallel()
				replaytest.RunWorkContract(t, func(t *testing.T) (replaytest.WorkStore, replaytest.Effects) {
					s, db := workStore(t, d, sqlitestore.Options{})
					return s, sqliteEffects{db}
				})
			})
			t.Run("idempotency", func(t *testing.T) {
				t.Parallel()
				idempotencytest.RunContract(t, func(t *testing.T) (replay.Recorder, replay.Recorder) { return twoInstances(t, d) })
			})
			t.Run("mcp idempotency", func(t *testing.T) {
				t.Parallel()
				mcptokentest.RunContract(t, func(t *testing.T) (replay.Recorder, replay.Recorder) { return twoInstances(t, d) })
			})
			t.Run("mcp tasks", func(t *testing.T) {
				t.Parallel()
				mcptokentest.RunTasksContract(t, func(t *testing.T) (replay.Recorder, replay.Recorder) { return twoInstances(t, d) })
			})
			t.Run("mcp tasks work refused", func(t *testing.T) {
				// A Work holds SQLite's only writer for a task's whole
				// run: Transactional tasks are refused, not stalled.
				t.Parallel()
				keys, err := ctoken.NewKeyring(ctoken.RandomKey())
				if err != nil {
					t.Fatal(err)
				}
				ts, err := mcptoken.NewTasks(mcptoken.TasksConfig{Keys: keys, Store: store(t)})
				if err != nil {
					t.Fatal(err)
				}
				run := func(context.Context, *mcptoken.TaskCall) (json.RawMessage, error) { return json.RawMessage(`{}`), nil }
				if err := ts.Add(mcptoken.TaskTool{Name: "tx", Run: run, Transactional: true}); !errors.Is(err, ctoken.ErrConfig) {
					t.Fatalf("Add of a Transactional task tool = %v; want ctoken.ErrConfig", err)
				}
			})
			t.Run("exchange", func(t *testing.T) {
				t.Parallel()
				exchangetest.RunContract(t, func(t *testing.T) (replay.Store, replay.Store) { return twoInstances(t, d) })
			})
			t.Run("webhook", func(t *testing.T) {
				t.Parallel()
				webhooktest.RunContract(t, func(t *testing.T) (replay.Store, replay.Store) { return twoInstances(t, d) })
			})
			t.Run("claim", func(t *testing.T) {
				t.Parallel()
				replaytest.RunClaimContract(t, func(t *testing.T) replay.Store { return store(t) })
			})
			t.Run("lease", func(t *testing.T) {
				t.Parallel()
				replaytest.RunLeaseContract(t, func(t *testing.T) replaytest.Store { return store(t) })
			})
			t.Run("record", func(t *testing.T) {
				t.Parallel()
				replaytest.RunRecordContract(t, func(t *testing.T) replaytest.RecordStore { return store(t) })
			})
			t.Run("renew", func(t *testing.T) {
				t.Parallel()
				replaytest.RunRenewContract(t, func(t *testing.T) replaytest.RenewStore { return store(t) })
			})
			t.Run("read", func(t *testing.T) {
				t.Parallel()
				replaytest.RunReadContract(t, func(t *testing.T) replaytest.ReadStore { return store(t) })
			})
			t.Run("request state", func(t *testing.T) {
				t.Parallel()
				replaytest.RunRequestStateContract(t, func(t *testing.T) replay.Store { return store(t) })
			})
		})
	}
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
	for _, d := range Drivers() {
		t.Run(d.Name, func(t *testing.T) {
			t.Parallel()
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
							if _, err := db.ExecContext(context.Background(), w.sql); err != nil {
								t.Fatalf("%s: %v", w.sql, err)
							}
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
}

// TestSweep: Sweep deletes expired rows, 1 000 a call at most (in steps
// of 100, each a write of its own), never a live row, the marker or a
// Work's row; claims of the swept IDs are first again, live ones not. The
// store's sweeper reports each sweep as a replay.EventSwept.
func TestSweep(t *testing.T) {
	runOnEveryDriver(t, []driverCase{{"deletes expired rows only, 1 000 a call", func(t *testing.T, d Driver) {
		ctx := context.Background()
		db, _ := openMigrated(t, d)
		s := mustStore(t, db, sqlitestore.Options{SweepInterval: -1})
		until := time.Now().Add(time.Hour)
		live := idList("live-", 5)
		claimAll(t, s, live, until)
		// 2 450 expired rows, written as the store writes a claim (its
		// key: the prefix's length, the prefix, the ID), until long past.
		const expired = 2450
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		for i := range expired {
			key := binary.BigEndian.AppendUint16(nil, uint16(len(s.Prefix())))
			key = append(append(key, s.Prefix()...), fmt.Sprint("old-", i)...)
			if _, err := tx.ExecContext(ctx, `INSERT INTO ctoken_replay (key, state, token, until) VALUES (?, 'c', '', 1)`, key); err != nil {
				t.Fatal(err)
			}
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		var got []int64
		for {
			n, err := s.Sweep(ctx)
			if err != nil {
				t.Fatalf("Sweep = %d, %v", n, err)
			}
			if n == 0 {
				break
			}
			got = append(got, n)
		}
		if fmt.Sprint(got) != "[1000 1000 450]" {
			t.Fatalf("Sweep deleted %v rows in turn; want [1000 1000 450]", got)
		}
		for _, id := range live {
			if first, err := s.Claim(ctx, id, until); first || err != nil {
				t.Fatalf("Claim(%s) after the sweep = %v, %v; want not first", id, first, err)
			}
		}
		if first, err := s.Claim(ctx, "old-7", until); !first || err != nil {
			t.Fatalf("Claim of a swept ID = %v, %v; want first", first, err)
		}
	}}, {"the sweeper reports each sweep to the Observer", func(t *testing.T, d Driver) {
		ctx := context.Background()
		db, _ := openMigrated(t, d)
		swept := make(chan replay.Event, 16)
		s := mustStore(t, db, sqlitestore.Options{SweepInterval: 20 * time.Millisecond, Observer: func(e replay.Event) {
			if e.Kind == replay.EventSwept {
				select {
				case swept <- e:
				default:
				}
			}
		}})
		for i := range 3 {
			key := binary.BigEndian.AppendUint16(nil, uint16(len(s.Prefix())))
			key = append(append(key, s.Prefix()...), fmt.Sprint("old-", i)...)
			if _, err := db.ExecContext(ctx, `INSERT INTO ctoken_replay (key, state, token, until) VALUES (?, 'c', '', 1)`, key); err != nil {
				t.Fatal(err)
			}
		}
		var deleted int64
		for deadline := time.After(10 * time.Second); deleted < 3; {
			select {
			case e := <-swept:
				if e.Store != "sqlitestore" || e.Table != sqlitestore.DefaultTable || e.Shard != -1 || e.Reason != nil {
					t.Fatalf("EventSwept %+v; want one of sqlitestore's %s table, no shard, no error", e, sqlitestore.DefaultTable)
				}
				deleted += e.Deleted
			case <-deadline:
				t.Fatalf("the sweeper reported %d rows deleted in 10 s; want 3", deleted)
			}
		}
		if deleted != 3 {
			t.Fatalf("the sweeper reported %d rows deleted; want 3", deleted)
		}
	}}})
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
