package drivertest

import (
	"context"
	"database/sql"
	sqldriver "database/sql/driver"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ctoken/ctoken/replay"
	"github.com/ctoken/ctoken/sqlitestore"
)

// TestNew pins New on every driver: the connection settings and options
// it refuses, AllowNormalSync, sidecars whose names could meet, a
// connection lowered after New, and a Store not built with New. (Tables
// of their own in one file: TestWALLoss's two tables.)
func TestNew(t *testing.T) {
	subtests(t, []subtest{
		{"refuses", newRefuses},
		{"sidecar names never collide", sidecarNamesNeverCollide},
		{"refuses a file without locks", newRefusesAFileWithoutLocks},
		{"waits for another writer as long as busy_timeout", newWaitsForAnotherWriter},
		{"WithTx refuses a lowered connection", withTxRefusesALoweredConnection},
		{"allow normal sync", allowNormalSync},
		{"normal sync after a crash of the machine", normalSyncAfterAMachineCrash},
		{"lowered connection refuses", loweredConnectionRefuses},
		{"zero Store refuses", zeroStoreRefuses},
		{"Close gives the writer's connection back as the pool opened it", closeGivesTheConnectionBack},
	})
}

// closeGivesTheConnectionBack: the store runs its writer's checkpoints
// itself (wal_autocheckpoint=0 on that connection, see sqlitestore's
// writer.go); after Close every connection of the pool, the writer's
// among them, checkpoints again at the pace the DSN set (16 pages; the
// mattn driver takes no such DSN parameter, and its connections keep
// SQLite's 1000).
func closeGivesTheConnectionBack(t *testing.T) {
	ctx := context.Background()
	db := driver.OpenWith(t, filepath.Join(t.TempDir(), "replay.db"), With("wal_autocheckpoint", "16"))
	must(t, sqlitestore.Migrate(ctx, db, ""))
	var want int
	must(t, db.QueryRowContext(ctx, `PRAGMA wal_autocheckpoint`).Scan(&want))
	if want == 0 {
		t.Fatal("the pool's connections run no automatic checkpoint")
	}
	s := mustStore(t, db, sqlitestore.Options{SweepInterval: -1})
	claimAll(t, s, idList("id-", 50), time.Now().Add(time.Hour))
	s.Close()
	n := db.Stats().OpenConnections
	if n == 0 {
		t.Fatal("the pool holds no connection after Close")
	}
	for i := range n {
		c := heldConn(t, db)
		var pages int
		must(t, c.QueryRowContext(ctx, `PRAGMA wal_autocheckpoint`).Scan(&pages))
		if pages != want {
			t.Errorf("connection %d of %d: wal_autocheckpoint = %d after Close; want the pool's %d", i+1, n, pages, want)
		}
	}
}

// newRefuses: New refuses, with ErrConfig naming each fault with its
// fix: connection settings that lose acknowledged claims or cannot work
// (set in the DSN as a user would; each setting alone is
// TestSettingsCheck's, in package sqlitestore), an in-memory or a nil
// database, table names, a table Migrate has not made, and several
// faults at once in one error: settings two by two, and options beside a
// setting (a pool of one connection, a Prefix over MaxPrefixBytes,
// negative durations, a table name that is not an identifier).
func newRefuses(t *testing.T) {
	tests := []struct {
		name    string
		file    string   // "" a migrated file, "memory", "nil" (no database) or "unmigrated"
		pragmas []Pragma // nil: Safe
		pool    int      // db.SetMaxOpenConns, 0 to leave
		opts    sqlitestore.Options
		want    []string
	}{
		{"in-memory database", "memory", nil, 0, sqlitestore.Options{}, []string{"open a file"}},
		{"synchronous FULL with journal_mode DELETE", "", []Pragma{{"journal_mode", "DELETE"}, {"synchronous", "FULL"}, {"busy_timeout", "5000"}}, 0, sqlitestore.Options{}, []string{"synchronous=EXTRA"}},
		{"nil database", "nil", nil, 0, sqlitestore.Options{}, []string{"nil *sql.DB"}},
		{"table name not an identifier", "", nil, 0, sqlitestore.Options{Table: "Replay-Table"}, []string{"lower-case identifier"}},
		{"table name reserved", "", nil, 0, sqlitestore.Options{Table: "sqlite_replay"}, []string{"reserved"}},
		{"table missing", "unmigrated", nil, 0, sqlitestore.Options{}, []string{"run Migrate"}},
		{"named table missing", "unmigrated", nil, 0, sqlitestore.Options{Table: "other_replay"}, []string{"run Migrate"}},
		{"synchronous OFF, busy_timeout 0", "", []Pragma{{"journal_mode", "WAL"}, {"synchronous", "OFF"}, {"busy_timeout", "0"}}, 0, sqlitestore.Options{},
			[]string{"2 configuration faults", "synchronous=OFF", "use FULL", "busy_timeout=0", "set it, e.g. 5000 ms"}},
		{"journal OFF, query_only", "", []Pragma{{"journal_mode", "OFF"}, {"synchronous", "FULL"}, {"busy_timeout", "5000"}, {"query_only", "1"}}, 0, sqlitestore.Options{},
			[]string{"2 configuration faults", "journal_mode=OFF", "use WAL", "query_only"}},
		{"options and settings", "", With("synchronous", "NORMAL"), 1,
			sqlitestore.Options{Table: "Replay", Prefix: strings.Repeat("p", sqlitestore.MaxPrefixBytes+1), Horizon: -time.Second, RecheckInterval: -time.Second},
			[]string{"6 configuration faults", "lower-case identifier", "Prefix of", "negative Horizon", "negative RecheckInterval",
				"set 0 or at least 2", "AllowNormalSync"}},
	}
	eachDriver(t, func(t *testing.T, d Driver) {
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				pragmas := tc.pragmas
				if pragmas == nil {
					pragmas = Safe
				}
				var db *sql.DB
				switch tc.file {
				case "memory":
					db = d.OpenWith(t, ":memory:", pragmas)
				case "unmigrated":
					db = d.OpenWith(t, filepath.Join(t.TempDir(), "replay.db"), pragmas)
				case "":
					// The table exists, made with the safe settings, so
					// the refusal is the setting's or the options'.
					safe, path := openMigrated(t, d)
					safe.Close()
					db = d.OpenWith(t, path, pragmas)
				}
				if tc.pool != 0 {
					db.SetMaxOpenConns(tc.pool)
				}
				s, err := sqlitestore.New(context.Background(), db, tc.opts)
				if err == nil {
					s.Close()
					t.Fatal("New accepted the fault")
				}
				if !errors.Is(err, sqlitestore.ErrConfig) || !errors.Is(err, replay.ErrConfig) {
					t.Fatalf("New = %v; want ErrConfig", err)
				}
				for _, want := range tc.want {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("New = %q; does not name %q", err, want)
					}
				}
			})
		}
	})
}

// sidecarNamesNeverCollide: the table audit in replay.db and the
// default table in replay.db-audit (sidecar names a naive scheme would
// share) are each migrated, built, used, closed and built again; neither
// takes the other for a loss, and each keeps its claims.
func sidecarNamesNeverCollide(t *testing.T) {
	eachDriver(t, func(t *testing.T, d Driver) {
		ctx := context.Background()
		dir := t.TempDir()
		stores := []struct{ path, table string }{
			{filepath.Join(dir, "replay.db"), "audit"},
			{filepath.Join(dir, "replay.db-audit"), ""},
		}
		dbs := make([]*sql.DB, len(stores))
		for i, st := range stores {
			dbs[i] = d.Open(t, st.path)
			if err := sqlitestore.Migrate(ctx, dbs[i], st.table); err != nil {
				t.Fatalf("Migrate(%s, table %q) = %v", filepath.Base(st.path), st.table, err)
			}
		}
		until := time.Now().Add(time.Minute)
		for round := range 2 {
			for i, st := range stores {
				s, err := sqlitestore.New(ctx, dbs[i], sqlitestore.Options{Table: st.table})
				if err != nil {
					t.Fatalf("round %d: New(%s, table %q) = %v", round, filepath.Base(st.path), st.table, err)
				}
				first, err := s.Claim(ctx, "id-"+strconv.Itoa(i), until)
				s.Close()
				if err != nil || first != (round == 0) {
					t.Fatalf("round %d: Claim in %s, table %q = %v, %v; want first only in round 0", round, filepath.Base(st.path), st.table, first, err)
				}
			}
		}
		for _, name := range []string{".replay.db-ctoken.audit", ".replay.db-audit-ctoken"} {
			if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
				t.Errorf("sidecar %s: %v", name, err)
			}
		}
	})
}

// newRefusesAFileWithoutLocks: a DSN that turns SQLite's file locks off
// (the URI parameter nolock=1, the unix-none VFS) never gives a store:
// New refuses it with ErrConfig naming the locks, or the driver refuses
// the DSN, or the parameter has no effect on this driver and two
// connections still cannot both take the write lock.
func newRefusesAFileWithoutLocks(t *testing.T) {
	eachDriver(t, func(t *testing.T, d Driver) {
		for _, param := range []string{"nolock=1", "vfs=unix-none"} {
			t.Run(param, func(t *testing.T) {
				ctx := context.Background()
				path := filepath.Join(t.TempDir(), "replay.db")
				// EXTRA: without locks SQLite cannot run WAL (it needs
				// shared memory) and falls back to DELETE, which New
				// accepts with EXTRA only; the lock check is then what
				// refuses.
				db, err := sql.Open(d.SQLName, d.DSN(path, With("synchronous", "EXTRA"))+"&"+param)
				must(t, err)
				t.Cleanup(func() { db.Close() })
				if err := sqlitestore.Migrate(ctx, db, ""); err != nil {
					t.Logf("%s: Migrate = %v (the driver refused the DSN)", param, err)
					return
				}
				s, err := sqlitestore.New(ctx, db, sqlitestore.Options{})
				switch {
				case errors.Is(err, sqlitestore.ErrConfig) && strings.Contains(err.Error(), "without locks"):
					t.Logf("%s: New = %v", param, err)
					return
				case err != nil:
					t.Fatalf("%s: New = %v; want ErrConfig naming the locks, or a store on a locked file", param, err)
				}
				s.Close()
				a, b := conns(t, db)
				mustExec(t, ctx, a, `BEGIN IMMEDIATE`)
				defer a.ExecContext(ctx, `ROLLBACK`)
				mustExec(t, ctx, b, `PRAGMA busy_timeout = 0`)
				if _, err := b.ExecContext(ctx, `BEGIN IMMEDIATE`); err == nil {
					t.Fatalf("%s: New served a store, and two connections both took the write lock", param)
				}
				t.Logf("%s: no effect on this driver (New served; the file locks)", param)
			})
		}
	})
}

// newWaitsForAnotherWriter: New's first write waits for another
// process's write lock as long as the DSN's busy_timeout (5 s) allows,
// not only Options.Timeout (1 s here): two processes starting
// together both get a store. The lock is held for two seconds; the bounds
// are generous, not the mechanism (New's reads before the lock take
// milliseconds).
func newWaitsForAnotherWriter(t *testing.T) {
	eachDriver(t, func(t *testing.T, d Driver) {
		ctx := context.Background()
		db, path := openMigrated(t, d)
		other := d.Open(t, path)
		holder := heldConn(t, other)
		mustExec(t, ctx, holder, `BEGIN IMMEDIATE`)
		done := make(chan error, 1)
		go func() {
			s, err := sqlitestore.New(ctx, db, sqlitestore.Options{Timeout: time.Second, SweepInterval: -1})
			if err == nil {
				s.Close()
			}
			done <- err
		}()
		time.Sleep(2 * time.Second)
		select {
		case err := <-done:
			t.Fatalf("New returned %v while another connection held the write lock; want it waiting", err)
		default:
		}
		mustExec(t, ctx, holder, `ROLLBACK`)
		if err := <-done; err != nil {
			t.Fatalf("New while another connection held the write lock for 2 s (busy_timeout 5 s, Timeout 1 s) = %v; want a store", err)
		}
	})
}

// conns returns two connections of db, closed (and dropped from the pool)
// when the test ends.
func conns(t *testing.T, db *sql.DB) (*sql.Conn, *sql.Conn) {
	t.Helper()
	cs := [2]*sql.Conn{heldConn(t, db), heldConn(t, db)}
	for _, c := range cs {
		// Runs before heldConn's Close (cleanups run last first).
		t.Cleanup(func() { c.Raw(func(any) error { return sqldriver.ErrBadConn }) })
	}
	return cs[0], cs[1]
}

// withTxRefusesALoweredConnection: a claim written with WithTx in a
// transaction whose connection runs synchronous below FULL (set on that
// connection after New) or another journal_mode is refused, with
// ErrConfig and ErrUnavailable naming the setting; nothing is written.
func withTxRefusesALoweredConnection(t *testing.T) {
	eachDriver(t, func(t *testing.T, d Driver) {
		for _, pragma := range []string{"synchronous = OFF", "synchronous = NORMAL"} {
			t.Run(pragma, func(t *testing.T) {
				ctx := context.Background()
				db, _ := openMigrated(t, d)
				s := mustStore(t, db, sqlitestore.Options{SweepInterval: -1})
				c, _ := conns(t, db)
				mustExec(t, ctx, c, `PRAGMA `+pragma)
				tx, err := c.BeginTx(ctx, nil)
				must(t, err)
				first, err := s.Claim(sqlitestore.WithTx(ctx, tx), "lowered", time.Now().Add(time.Minute))
				if first || !errors.Is(err, sqlitestore.ErrConfig) || !errors.Is(err, replay.ErrConfig) || !errors.Is(err, sqlitestore.ErrUnavailable) || !strings.Contains(err.Error(), "synchronous") {
					t.Fatalf("Claim in a transaction on a connection with %s = %v, %v; want ErrConfig naming synchronous", pragma, first, err)
				}
				must(t, tx.Commit())
				claimAll(t, s, []string{"lowered"}, time.Now().Add(time.Minute))
			})
		}
	})
}

// normalSyncAfterAMachineCrash: while a store with synchronous=NORMAL
// (AllowNormalSync) runs, its sidecar names the kernel's boot id; a Close
// that put every commit on the disk clears it. A boot id other than the
// machine's (written here as a crash and reboot would leave it: the store
// abandoned without Close) makes New refuse with ErrForgotten, a FULL
// store's too, until Rearm; a clean Close followed by a reboot does not.
func normalSyncAfterAMachineCrash(t *testing.T) {
	boot := repairBoot(t)
	eachDriver(t, func(t *testing.T, d Driver) {
		ctx := context.Background()
		_, path := openMigrated(t, d)
		db := d.OpenWith(t, path, With("synchronous", "NORMAL"))
		opts := sqlitestore.Options{AllowNormalSync: true, SweepInterval: -1, Logger: slog.New(slog.DiscardHandler)}
		s := mustStore(t, db, opts)
		claimAll(t, s, []string{"before"}, time.Now().Add(time.Hour))
		if id := sidecarMap(t, path)["boot"]; id != boot {
			t.Fatalf("the sidecar's boot id while a NORMAL store runs = %q; want the kernel's", id)
		}
		s.Close()
		if id, _ := sidecarMap(t, path)["boot"].(string); id != "" {
			t.Fatalf("the sidecar's boot id after Close = %q; want none", id)
		}
		// A clean Close, then a reboot: New serves.
		mustStore(t, db, opts).Close()
		// A store abandoned without Close, then a crash and a reboot:
		// the sidecar names a boot that is not the machine's (written
		// with no store running, which would write it back).
		setSidecarField(t, path, "boot", "a-boot-before-the-crash")
		for _, o := range []sqlitestore.Options{opts, {SweepInterval: -1}} {
			pool := db
			if !o.AllowNormalSync {
				pool = d.Open(t, path)
			}
			wantForgotten(t, pool, o, nil, fmt.Sprintf("New (AllowNormalSync %v) after a crash of the machine under a NORMAL store", o.AllowNormalSync), "NORMAL")
		}
		must(t, sqlitestore.Rearm(ctx, db, "", 0))
		s3 := mustStore(t, db, opts)
		claimAll(t, s3, []string{"after"}, time.Now().Add(time.Hour))
	})
}

// logRecords is a slog.Handler that keeps every record.
type logRecords struct {
	mu      sync.Mutex
	records []slog.Record
}

func (h *logRecords) Enabled(context.Context, slog.Level) bool { return true }
func (h *logRecords) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.records = append(h.records, r.Clone())
	return nil
}
func (h *logRecords) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *logRecords) WithGroup(string) slog.Handler      { return h }

// count returns how many records of level hold substr in their message.
func (h *logRecords) count(level slog.Level, substr string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, r := range h.records {
		if r.Level == level && strings.Contains(r.Message, substr) {
			n++
		}
	}
	return n
}

// attr returns the value of attribute key of the last record of level
// whose message holds substr, "" when none has it.
func (h *logRecords) attr(level slog.Level, substr, key string) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	v := ""
	for _, r := range h.records {
		if r.Level == level && strings.Contains(r.Message, substr) {
			r.Attrs(func(a slog.Attr) bool {
				if a.Key == key {
					v = a.Value.String()
				}
				return true
			})
		}
	}
	return v
}

// allowNormalSync: synchronous=NORMAL in WAL mode is accepted only
// with Options.AllowNormalSync, and New then logs a Warn naming the
// option; the store serves.
func allowNormalSync(t *testing.T) {
	eachDriver(t, func(t *testing.T, d Driver) {
		safe, path := openMigrated(t, d)
		safe.Close()
		db := d.OpenWith(t, path, With("synchronous", "NORMAL"))
		logs := &logRecords{}
		var events []replay.Event
		s := mustStore(t, db, sqlitestore.Options{AllowNormalSync: true, Logger: slog.New(logs), Observer: func(e replay.Event) { events = append(events, e) }})
		if n := logs.count(slog.LevelWarn, "AllowNormalSync"); n != 1 {
			t.Fatalf("New logged %d Warn records naming AllowNormalSync; want 1", n)
		}
		// New reports it synchronously: read before the checker runs.
		if len(events) != 1 || events[0].Kind != replay.EventRiskAccepted || events[0].Option != "AllowNormalSync" || !strings.Contains(events[0].Risk, "NORMAL") || events[0].Kind.String() != "risk_accepted" ||
			events[0].Store != "sqlitestore" || events[0].Table != sqlitestore.DefaultTable || events[0].Shard != -1 {
			t.Fatalf("New reported %+v to the Observer; want one replay.EventRiskAccepted naming AllowNormalSync", events)
		}
		claimAll(t, s, []string{"a"}, time.Now().Add(time.Minute))
	})
}

// heldPool fills what is left of db's pool (limited to size connections,
// one of which the store holds for its writer) with connections held by
// the test until it ends, runs PRAGMA synchronous = level on one of them
// and gives that one back, so the store's checker gets that connection
// and no other.
func heldPool(t *testing.T, db *sql.DB, size int, level string) {
	t.Helper()
	db.SetMaxOpenConns(size)
	conns := make([]*sql.Conn, size-1)
	for i := range conns {
		conns[i] = heldConn(t, db)
	}
	mustExec(t, context.Background(), conns[0], `PRAGMA synchronous = `+level)
	conns[0].Close()
}

// lowerWriter lowers the synchronous setting of the store's writer
// connection the only way a caller can reach it: a handler's statements in
// a Work (SQLite refuses the PRAGMA inside a transaction, so the handler
// ends it first and begins another), then the Work rolled back.
func lowerWriter(t *testing.T, s *sqlitestore.Store, id, level string) {
	t.Helper()
	ctx := context.Background()
	w, tx := workOf(t, s, id, false, nil)
	mustExec(t, ctx, tx, `ROLLBACK; PRAGMA synchronous = `+level+`; BEGIN`)
	must(t, w.Rollback(ctx))
}

// loweredConnectionRefuses: no write is committed on a connection
// whose synchronous was lowered after New. The store's writer connection,
// lowered by a handler's statements inside a Work, refuses the next write of
// every kind with an error naming synchronous, before any recheck, and is
// closed: the write after it runs on a fresh connection of the DSN's
// settings, and finds nothing of the refused one. A connection of the
// pool lowered is found by the next recheck, which refuses every call.
func loweredConnectionRefuses(t *testing.T) {
	tests := []struct {
		name        string
		opened      string // the DSN's synchronous
		allowNormal bool
		lowered     string
	}{
		{"FULL lowered to OFF", "FULL", false, "OFF"},
		{"FULL lowered to NORMAL", "FULL", false, "NORMAL"},
		{"NORMAL allowed, lowered to OFF", "NORMAL", true, "OFF"},
	}
	eachDriver(t, func(t *testing.T, d Driver) {
		for _, tc := range tests {
			t.Run(tc.name+"/the writer's connection", func(t *testing.T) {
				t.Parallel()
				ctx := context.Background()
				safe, path := openMigrated(t, d)
				safe.Close()
				db := d.OpenWith(t, path, With("synchronous", tc.opened))
				// No recheck runs during the test: what is checked is
				// that every write reads its connection's setting.
				s := mustStore(t, db, sqlitestore.Options{AllowNormalSync: tc.allowNormal, SweepInterval: -1,
					RecheckInterval: time.Hour, Logger: slog.New(&logRecords{})})
				until := time.Now().Add(time.Minute)
				lease := mustLease(t, s, "leased", time.Minute) // before the change
				// refusal is a refused call's error, or one saying what got
				// through.
				refusal := func(through bool, got any, err error) error {
					if through || err == nil {
						return fmt.Errorf("= %+v, %v", got, err)
					}
					return err
				}
				calls := []struct {
					name string
					call func(id string) error
				}{
					{"Claim", func(id string) error { first, err := s.Claim(ctx, id, until); return refusal(first, first, err) }},
					{"AcquireLease", func(id string) error {
						l, err := s.AcquireLease(ctx, id, time.Minute)
						return refusal(l.State == replay.LeaseAcquired, l, err)
					}},
					{"ConfirmLease", func(string) error { return refusal(false, nil, s.ConfirmLease(ctx, "leased", lease.Token, until)) }},
					{"BeginWork", func(string) error {
						w, err := s.BeginWork(ctx, "leased", lease.Token)
						if err == nil {
							w.Rollback(ctx)
						}
						return refusal(false, w, err)
					}},
				}
				for i, c := range calls {
					id := fmt.Sprint("fresh-", i)
					lowerWriter(t, s, fmt.Sprint("lower-", i), tc.lowered)
					if err := c.call(id); !strings.Contains(err.Error(), "synchronous") {
						t.Fatalf("%s on the writer's connection with synchronous=%s: %v; want an error naming synchronous", c.name, tc.lowered, err)
					}
					claimAll(t, s, []string{id}, until)
				}
			})
			t.Run(tc.name+"/a connection of the pool", func(t *testing.T) {
				t.Parallel()
				ctx := context.Background()
				safe, path := openMigrated(t, d)
				safe.Close()
				db := d.OpenWith(t, path, With("synchronous", tc.opened))
				events := make(chan replay.Event, 64)
				s := mustStore(t, db, sqlitestore.Options{AllowNormalSync: tc.allowNormal, SweepInterval: -1,
					RecheckInterval: 20 * time.Millisecond, Logger: slog.New(&logRecords{}),
					Observer: func(e replay.Event) {
						if e.Kind != replay.EventRiskAccepted {
							events <- e
						}
					}})
				until := time.Now().Add(time.Minute)
				claimAll(t, s, []string{"before"}, until)
				heldPool(t, db, 4, tc.lowered)
				deadline := time.Now().Add(5 * time.Second)
				for i := 0; ; i++ {
					first, err := s.Claim(ctx, fmt.Sprint("fresh-", i), until)
					if err != nil && strings.Contains(err.Error(), "synchronous") && !first {
						break
					}
					if err != nil || time.Now().After(deadline) {
						t.Fatalf("Claim %v after a pool connection was lowered to synchronous=%s = %v, %v; want the recheck's refusal naming synchronous", time.Since(deadline.Add(-5*time.Second)), tc.lowered, first, err)
					}
					time.Sleep(5 * time.Millisecond)
				}
				for i := range 5 {
					if first, err := s.Claim(ctx, fmt.Sprint("refused-", i), until); first || !strings.Contains(fmt.Sprint(err), "synchronous") {
						t.Fatalf("Claim after the recheck's refusal = %v, %v; want an error naming synchronous", first, err)
					}
				}
				// The checker reports the refusal right after it sets it
				// (a failsafe bound, not a timing: a second on any machine).
				e := within(t, events, 30*time.Second, "the Observer was not told of the refusal")
				if e.Kind != replay.EventRefusing || !strings.Contains(fmt.Sprint(e.Reason), "synchronous") || !errors.Is(e.Reason, sqlitestore.ErrUnavailable) {
					t.Fatalf("the Observer's first event = %+v; want replay.EventRefusing naming synchronous", e)
				}
				// The lowered connection closed (it was the pool's idle
				// one), the checker's next connection is a new one: the
				// checks hold again, and the Observer hears so.
				db.SetMaxIdleConns(0)
				if e := within(t, events, 30*time.Second, "the Observer was not told the store serves again"); e.Kind != replay.EventServing || e.Reason != nil || e.Kind.String() != "serving" {
					t.Fatalf("the Observer's event after the fix = %+v; want replay.EventServing", e)
				}
				claimAll(t, s, []string{"after"}, until)
			})
		}
	})
}

// zeroStoreRefuses: a Store not built with New refuses every method
// with ErrConfig, without panicking, before and after Close.
func zeroStoreRefuses(t *testing.T) {
	s := &sqlitestore.Store{}
	everyCallRefuses(t, s, "a", sqlitestore.ErrConfig)
	s.Close()
	s.Close()
	if _, err := s.Claim(context.Background(), "a", time.Now().Add(time.Minute)); !errors.Is(err, sqlitestore.ErrConfig) {
		t.Fatalf("Claim after Close of a zero Store = %v; want ErrConfig", err)
	}
}
