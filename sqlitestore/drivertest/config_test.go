package drivertest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ctoken/ctoken/replay"
	"github.com/ctoken/ctoken/sqlitestore"
)

// TestNewRefusesWeakSettings: New refuses, with ErrConfig and a message
// naming the fix, every connection setting that loses acknowledged claims
// or cannot work, set in the DSN as a user would.
func TestNewRefusesWeakSettings(t *testing.T) {
	tests := []struct {
		name    string
		path    string // "" for a file in a temporary directory
		pragmas []Pragma
		fix     string
	}{
		{"in-memory database", ":memory:", Safe, "open a file"},
		{"journal_mode MEMORY", "", With("journal_mode", "MEMORY"), "use WAL"},
		{"journal_mode OFF", "", With("journal_mode", "OFF"), "use WAL"},
		{"synchronous OFF", "", With("synchronous", "OFF"), "use FULL"},
		{"synchronous NORMAL with journal_mode DELETE", "", []Pragma{{"journal_mode", "DELETE"}, {"synchronous", "NORMAL"}, {"busy_timeout", "5000"}}, "use FULL"},
		{"synchronous NORMAL in WAL without AllowNormalSync", "", With("synchronous", "NORMAL"), "AllowNormalSync"},
		{"busy_timeout 0", "", With("busy_timeout", "0"), "busy_timeout"},
		{"query_only", "", With("query_only", "1"), "query_only"},
	}
	for _, d := range Drivers() {
		t.Run(d.Name, func(t *testing.T) {
			t.Parallel()
			for _, tc := range tests {
				t.Run(tc.name, func(t *testing.T) {
					t.Parallel()
					ctx := context.Background()
					path := tc.path
					if path == "" {
						// The table exists, made with the safe settings, so
						// the refusal is the setting's.
						var safe *sql.DB
						safe, path = openMigrated(t, d)
						safe.Close()
					}
					db := d.OpenWith(t, path, tc.pragmas)
					s, err := sqlitestore.New(ctx, db, sqlitestore.Options{})
					if err == nil {
						s.Close()
						t.Fatal("New accepted the setting")
					}
					if !errors.Is(err, sqlitestore.ErrConfig) || !strings.Contains(err.Error(), tc.fix) {
						t.Fatalf("New = %v; want ErrConfig naming %q", err, tc.fix)
					}
				})
			}
		})
	}
}

// TestNewRefusesInvalidOptions: New refuses, with ErrConfig naming what
// to change, a pool of one connection, a nil database, an invalid table
// name, a Prefix over MaxPrefixBytes, negative durations and a table
// Migrate has not made.
func TestNewRefusesInvalidOptions(t *testing.T) {
	tests := []struct {
		name string
		db   func(t *testing.T, d Driver) *sql.DB
		opts sqlitestore.Options
		want string
	}{
		{"pool of one connection", func(t *testing.T, d Driver) *sql.DB {
			db, _ := openMigrated(t, d)
			db.SetMaxOpenConns(1)
			return db
		}, sqlitestore.Options{}, "set 0 or at least 2"},
		{"nil database", func(*testing.T, Driver) *sql.DB { return nil }, sqlitestore.Options{}, "nil *sql.DB"},
		{"table name not an identifier", migrated, sqlitestore.Options{Table: "Replay-Table"}, "lower-case identifier"},
		{"table name reserved", migrated, sqlitestore.Options{Table: "sqlite_replay"}, "reserved"},
		{"Prefix over MaxPrefixBytes", migrated, sqlitestore.Options{Prefix: strings.Repeat("p", sqlitestore.MaxPrefixBytes+1)}, "Prefix"},
		{"negative Horizon", migrated, sqlitestore.Options{Horizon: -time.Second}, "negative Horizon"},
		{"negative RecheckInterval", migrated, sqlitestore.Options{RecheckInterval: -time.Second}, "negative RecheckInterval"},
		{"table missing", func(t *testing.T, d Driver) *sql.DB {
			return d.Open(t, filepath.Join(t.TempDir(), "replay.db"))
		}, sqlitestore.Options{}, "run Migrate"},
		{"named table missing", func(t *testing.T, d Driver) *sql.DB {
			return d.Open(t, filepath.Join(t.TempDir(), "replay.db"))
		}, sqlitestore.Options{Table: "other_replay"}, "run Migrate"},
	}
	for _, d := range Drivers() {
		t.Run(d.Name, func(t *testing.T) {
			t.Parallel()
			for _, tc := range tests {
				t.Run(tc.name, func(t *testing.T) {
					t.Parallel()
					s, err := sqlitestore.New(context.Background(), tc.db(t, d), tc.opts)
					if err == nil {
						s.Close()
						t.Fatal("New accepted the options")
					}
					if !errors.Is(err, sqlitestore.ErrConfig) || !strings.Contains(err.Error(), tc.want) {
						t.Fatalf("New = %v; want ErrConfig saying %q", err, tc.want)
					}
				})
			}
		})
	}
}

// TestTablesShareAFile: two stores with tables of their own
// (Options.Table) in one database file are each migrated, built, used,
// closed and built again; neither takes the other for a loss.
func TestTablesShareAFile(t *testing.T) {
	for _, d := range Drivers() {
		t.Run(d.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db, _ := openMigrated(t, d)
			if err := sqlitestore.Migrate(ctx, db, "second_replay"); err != nil {
				t.Fatalf("Migrate of a second table in the file = %v", err)
			}
			until := time.Now().Add(time.Minute)
			for round := range 2 {
				for _, table := range []string{"", "second_replay"} {
					s, err := sqlitestore.New(ctx, db, sqlitestore.Options{Table: table})
					if err != nil {
						t.Fatalf("round %d: New(Table %q) = %v", round, table, err)
					}
					first, err := s.Claim(ctx, "shared-id", until)
					s.Close()
					if err != nil || first != (round == 0) {
						t.Fatalf("round %d: Claim in table %q = %v, %v; want first only in round 0", round, table, first, err)
					}
				}
			}
		})
	}
}

func migrated(t *testing.T, d Driver) *sql.DB {
	db, _ := openMigrated(t, d)
	return db
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

// warns returns how many Warn records hold substr in their message.
func (h *logRecords) warns(substr string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, r := range h.records {
		if r.Level == slog.LevelWarn && strings.Contains(r.Message, substr) {
			n++
		}
	}
	return n
}

// TestAllowNormalSync: synchronous=NORMAL in WAL mode is accepted only
// with Options.AllowNormalSync, and New then logs a Warn naming the
// option; the store serves.
func TestAllowNormalSync(t *testing.T) {
	for _, d := range Drivers() {
		t.Run(d.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			safe, path := openMigrated(t, d)
			safe.Close()
			db := d.OpenWith(t, path, With("synchronous", "NORMAL"))
			logs := &logRecords{}
			s := mustStore(t, db, sqlitestore.Options{AllowNormalSync: true, Logger: slog.New(logs)})
			if n := logs.warns("AllowNormalSync"); n != 1 {
				t.Fatalf("New logged %d Warn records naming AllowNormalSync; want 1", n)
			}
			if first, err := s.Claim(ctx, "a", time.Now().Add(time.Minute)); !first || err != nil {
				t.Fatalf("Claim = %v, %v; want first", first, err)
			}
		})
	}
}

// heldPool fills db's pool (limited to size connections) with
// connections held by the test, runs PRAGMA synchronous = level on one of
// them and gives that one back, so the store's next writes, and its
// checker, get that connection and no other. release gives back the
// others.
func heldPool(t *testing.T, db *sql.DB, size int, level string) (release func()) {
	t.Helper()
	ctx := context.Background()
	db.SetMaxOpenConns(size)
	conns := make([]*sql.Conn, size)
	for i := range conns {
		c, err := db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		conns[i] = c
	}
	if _, err := conns[0].ExecContext(ctx, `PRAGMA synchronous = `+level); err != nil {
		t.Fatal(err)
	}
	conns[0].Close()
	var once sync.Once
	release = func() {
		once.Do(func() {
			for _, c := range conns[1:] {
				c.Close()
			}
		})
	}
	t.Cleanup(release)
	return release
}

// TestLoweredConnectionRefuses: a connection of the pool whose
// synchronous was lowered after New (PRAGMA run on one pooled connection)
// makes every write that reaches it refuse, before the next recheck;
// none is accepted.
func TestLoweredConnectionRefuses(t *testing.T) {
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
	for _, d := range Drivers() {
		t.Run(d.Name, func(t *testing.T) {
			t.Parallel()
			for _, tc := range tests {
				t.Run(tc.name, func(t *testing.T) {
					t.Parallel()
					ctx := context.Background()
					safe, path := openMigrated(t, d)
					safe.Close()
					db := d.OpenWith(t, path, With("synchronous", tc.opened))
					// No recheck runs during the test (it would refuse
					// every call once it met the connection): what is
					// checked is that every write reads its connection's
					// setting.
					s := mustStore(t, db, sqlitestore.Options{AllowNormalSync: tc.allowNormal, SweepInterval: -1,
						RecheckInterval: time.Hour, Logger: slog.New(&logRecords{})})
					until := time.Now().Add(time.Minute)
					lease, err := s.AcquireLease(ctx, "leased", time.Minute)
					if err != nil || lease.State != replay.LeaseAcquired {
						t.Fatalf("AcquireLease before the change = %+v, %v", lease, err)
					}
					heldPool(t, db, 4, tc.lowered)
					for i := range 20 {
						id := fmt.Sprint("fresh-", i)
						if first, err := s.Claim(ctx, id, until); first || err == nil || !strings.Contains(err.Error(), "synchronous") {
							t.Fatalf("Claim on a connection with synchronous=%s = %v, %v; want an error naming synchronous", tc.lowered, first, err)
						}
						if l, err := s.AcquireLease(ctx, id, time.Minute); l.State == replay.LeaseAcquired || err == nil {
							t.Fatalf("AcquireLease on a connection with synchronous=%s = %+v, %v; want an error", tc.lowered, l, err)
						}
						if err := s.ConfirmLease(ctx, "leased", lease.Token, until); err == nil {
							t.Fatalf("ConfirmLease on a connection with synchronous=%s succeeded; want an error", tc.lowered)
						}
						if w, err := s.BeginWork(ctx, "leased", lease.Token); err == nil {
							w.Rollback(ctx)
							t.Fatalf("BeginWork on a connection with synchronous=%s succeeded; want an error", tc.lowered)
						}
					}
				})
			}
		})
	}
}

// TestZeroStoreRefuses: a Store not built with New refuses every method
// with ErrConfig, without panicking.
func TestZeroStoreRefuses(t *testing.T) {
	ctx := context.Background()
	s := &sqlitestore.Store{}
	until := time.Now().Add(time.Minute)
	calls := map[string]func() error{
		"Claim": func() error {
			first, err := s.Claim(ctx, "a", until)
			if first {
				return errors.New("first")
			}
			return err
		},
		"Release": func() error { return s.Release(ctx, "a") },
		"AcquireLease": func() error {
			l, err := s.AcquireLease(ctx, "a", time.Second)
			if l.State == replay.LeaseAcquired {
				return errors.New("acquired")
			}
			return err
		},
		"AcquireRecord": func() error {
			r, err := s.AcquireRecord(ctx, "a", time.Second, []byte("fp"))
			if r.State == replay.LeaseAcquired {
				return errors.New("acquired")
			}
			return err
		},
		"ConfirmLease":  func() error { return s.ConfirmLease(ctx, "a", "token", until) },
		"ConfirmRecord": func() error { return s.ConfirmRecord(ctx, "a", "token", until, []byte("fp"), []byte("result")) },
		"ReleaseLease":  func() error { return s.ReleaseLease(ctx, "a", "token") },
		"BeginWork": func() error {
			w, err := s.BeginWork(ctx, "a", "token")
			if w != nil {
				return errors.New("a Work")
			}
			return err
		},
		"Sweep": func() error { _, err := s.Sweep(ctx); return err },
	}
	for name, call := range calls {
		t.Run(name, func(t *testing.T) {
			if err := call(); !errors.Is(err, sqlitestore.ErrConfig) {
				t.Fatalf("%s on a zero Store = %v; want ErrConfig", name, err)
			}
		})
	}
	t.Run("Close", func(t *testing.T) {
		s.Close()
		s.Close()
		if _, err := s.Claim(ctx, "a", until); !errors.Is(err, sqlitestore.ErrConfig) {
			t.Fatalf("Claim after Close of a zero Store = %v; want ErrConfig", err)
		}
	})
}
