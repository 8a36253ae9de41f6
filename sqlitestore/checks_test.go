package sqlitestore

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ctoken/ctoken/sqlitestore/internal/walfile"
)

func TestSettingsCheck(t *testing.T) {
	safe := settings{journal: "wal", synchronous: syncFull, busyTimeout: 5000, path: "/x/replay.db"}
	for _, tc := range []struct {
		name        string
		edit        func(*settings)
		allowNormal bool
		fix         string // in the error; "" for accepted
	}{
		{"wal full", func(*settings) {}, false, ""},
		{"wal extra", func(c *settings) { c.synchronous = syncExtra }, false, ""},
		{"delete full", func(c *settings) { c.journal = "delete" }, false, "synchronous=EXTRA"},
		{"delete extra", func(c *settings) { c.journal, c.synchronous = "delete", syncExtra }, false, ""},
		{"truncate full", func(c *settings) { c.journal = "truncate" }, false, ""},
		{"wal normal allowed", func(c *settings) { c.synchronous = syncNormal }, true, ""},
		{"memory database", func(c *settings) { c.path = "" }, false, "open a file"},
		{"journal memory", func(c *settings) { c.journal = "memory" }, false, "use WAL"},
		{"journal off", func(c *settings) { c.journal = "off" }, false, "use WAL"},
		{"synchronous off", func(c *settings) { c.synchronous = syncOff }, true, "use FULL"},
		{"wal normal", func(c *settings) { c.synchronous = syncNormal }, false, "AllowNormalSync"},
		{"delete normal", func(c *settings) { c.journal, c.synchronous = "delete", syncNormal }, true, "use FULL"},
		{"busy timeout zero", func(c *settings) { c.busyTimeout = 0 }, false, "busy_timeout"},
		{"query only", func(c *settings) { c.queryOnly = true }, false, "query_only"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := safe
			tc.edit(&c)
			switch err := configFaults(c.faults(tc.allowNormal)); {
			case tc.fix == "" && err != nil:
				t.Fatalf("check = %v; want accepted", err)
			case tc.fix != "" && (!errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tc.fix)):
				t.Fatalf("check = %v; want ErrConfig naming %q", err, tc.fix)
			}
		})
	}
}

// TestSettingsCheckNamesEveryRefusedSetting pins that settings with several
// faults are refused with one ErrConfig naming each with its fix (a DSN
// with synchronous=OFF and busy_timeout=0 does not meet busy_timeout only
// after its synchronous is fixed), and that an in-memory database's own
// journal is not named beside "open a file".
func TestSettingsCheckNamesEveryRefusedSetting(t *testing.T) {
	for _, tc := range []struct {
		name        string
		c           settings
		allowNormal bool
		names       []string
	}{
		{"synchronous OFF, busy_timeout 0", settings{journal: "wal", synchronous: syncOff, path: "/x/replay.db"}, false,
			[]string{"2 configuration faults", "synchronous=OFF acknowledges commits that a crash of the machine loses: use FULL", "busy_timeout=0 fails every call that meets another connection's write at once: set it, e.g. 5000 ms"}},
		{"every setting weak", settings{journal: "off", synchronous: syncNormal, queryOnly: true, path: "/x/replay.db"}, true,
			[]string{"4 configuration faults", "journal_mode=OFF loses or corrupts commits in a crash: use WAL", "synchronous=NORMAL with journal_mode=OFF can lose or corrupt commits in a power cut: use FULL",
				"busy_timeout=0", "the connection is query_only", "(set it on every connection, in the DSN: see the package documentation)"}},
		{"WAL NORMAL without AllowNormalSync, query_only", settings{journal: "wal", synchronous: syncNormal, busyTimeout: 5000, queryOnly: true, path: "/x/replay.db"}, false,
			[]string{"2 configuration faults", "use FULL (set it on every connection, in the DSN: see the package documentation), or accept the risk with Options.AllowNormalSync", "query_only"}},
		{"in-memory database, synchronous OFF", settings{journal: "memory", synchronous: syncOff, busyTimeout: 5000}, false,
			[]string{"2 configuration faults", "forgets every claim when it closes: open a file", "synchronous=OFF"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := configFaults(tc.c.faults(tc.allowNormal))
			if !errors.Is(err, ErrConfig) {
				t.Fatalf("check = %v; want ErrConfig", err)
			}
			for _, name := range tc.names {
				if !strings.Contains(err.Error(), name) {
					t.Errorf("check = %q; does not name %q", err, name)
				}
			}
			if strings.Contains(err.Error(), "journal_mode=MEMORY") {
				t.Errorf("check = %q; names the in-memory database's own journal", err)
			}
		})
	}
}

// TestTableName pins the table name: a lower-case identifier, quoted, or
// refused with ErrConfig, and the one Schema writes into its SQL.
func TestTableName(t *testing.T) {
	t.Run("quoted or refused", func(t *testing.T) {
		for _, ok := range []string{"", "ctoken_replay", "_t", "a1"} {
			if _, err := quoteTable(ok); err != nil {
				t.Errorf("quoteTable(%q) = %v; want accepted", ok, err)
			}
		}
		for _, bad := range []string{"1a", "A", "a-b", `a"b`, "a.b", "sqlite_master", strings.Repeat("a", maxIdentBytes+1), "é"} {
			if _, err := quoteTable(bad); !errors.Is(err, ErrConfig) {
				t.Errorf("quoteTable(%q) = %v; want ErrConfig", bad, err)
			}
		}
	})
	t.Run("Schema names the table", func(t *testing.T) {
		sql, err := Schema("my_table")
		must(t, err)
		for _, want := range []string{`CREATE TABLE "my_table"`, `CREATE INDEX "my_table_until" ON "my_table"`, `VALUES (x'0000', 'm', '`} {
			if !strings.Contains(sql, want) {
				t.Errorf("Schema lacks %q:\n%s", want, sql)
			}
		}
		if _, err := Schema("Bad"); !errors.Is(err, ErrConfig) {
			t.Fatalf("Schema(Bad) = %v; want ErrConfig", err)
		}
	})
}

func TestNanosHoldsTheEnds(t *testing.T) {
	for _, tc := range []struct {
		t    time.Time
		want int64
	}{
		{time.Unix(0, 42), 42},
		{time.Unix(1<<62, 0), math.MaxInt64},
		{time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC), math.MaxInt64},
		{time.Date(1000, 1, 1, 0, 0, 0, 0, time.UTC), math.MinInt64},
		{time.Unix(0, math.MaxInt64), math.MaxInt64},
	} {
		if got := nanos(tc.t); got != tc.want {
			t.Errorf("nanos(%v) = %d; want %d", tc.t, got, tc.want)
		}
	}
}

func TestSidecar(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "replay.db")
	t.Run("missing", func(t *testing.T) {
		if _, ok, err := readSidecar(sidecarFile(db, DefaultTable)); ok || err != nil {
			t.Fatalf("readSidecar = %v, %v; want none", ok, err)
		}
	})
	t.Run("written and read back", func(t *testing.T) {
		must(t, writeSidecar(sidecarFile(db, DefaultTable), sidecar{Incarnation: "inc", Seq: 7}, false))
		c, ok, err := readSidecar(sidecarFile(db, DefaultTable))
		if !ok || err != nil || c != (sidecar{Incarnation: "inc", Seq: 7}) {
			t.Fatalf("readSidecar = %+v, %v, %v", c, ok, err)
		}
	})
	t.Run("a lower sequence never replaces a higher one", func(t *testing.T) {
		must(t, writeSidecar(sidecarFile(db, DefaultTable), sidecar{Incarnation: "inc", Seq: 3}, false))
		if c, _, _ := readSidecar(sidecarFile(db, DefaultTable)); c.Seq != 7 {
			t.Fatalf("sequence %d after writing 3 over 7; want 7", c.Seq)
		}
	})
	t.Run("force replaces it", func(t *testing.T) {
		must(t, writeSidecar(sidecarFile(db, DefaultTable), sidecar{Incarnation: "other", Seq: 1}, true))
		if c, _, _ := readSidecar(sidecarFile(db, DefaultTable)); c != (sidecar{Incarnation: "other", Seq: 1}) {
			t.Fatalf("sidecar %+v after a forced write", c)
		}
	})
	t.Run("no temporary file is left", func(t *testing.T) {
		entries, _ := os.ReadDir(dir)
		if len(entries) != 1 {
			t.Fatalf("directory holds %d entries; want the sidecar alone", len(entries))
		}
	})
	for _, junk := range []string{"", "{}", `{"incarnation":"x","seq":-1}`, "not json", `{"incarnation":""}`} {
		t.Run("refuses "+junk, func(t *testing.T) {
			must(t, os.WriteFile(sidecarFile(db, DefaultTable), []byte(junk), 0o600))
			if _, ok, err := readSidecar(sidecarFile(db, DefaultTable)); ok || !errors.Is(err, ErrForgotten) {
				t.Fatalf("readSidecar(%q) = %v, %v; want ErrForgotten", junk, ok, err)
			}
		})
	}
}

// FuzzReadSidecar: no input panics, and an accepted sidecar has an
// incarnation and a sequence that is not negative.
func FuzzReadSidecar(f *testing.F) {
	f.Add([]byte(`{"incarnation":"0123","seq":5}`))
	f.Add([]byte(`{"incarnation":"a","seq":9223372036854775807}`))
	f.Add([]byte(`[]`))
	db := filepath.Join(f.TempDir(), "replay.db")
	f.Fuzz(func(t *testing.T, b []byte) {
		must(t, os.WriteFile(sidecarFile(db, DefaultTable), b, 0o600))
		c, ok, err := readSidecar(sidecarFile(db, DefaultTable))
		if ok != (err == nil) {
			t.Fatalf("ok %v with err %v", ok, err)
		}
		if ok && (c.Incarnation == "" || c.Seq < 0) {
			t.Fatalf("accepted %+v", c)
		}
	})
}

// TestMigrateRefusesNilDB: Migrate on a nil *sql.DB is ErrConfig (New's
// refusal of one: drivertest's TestNew).
func TestMigrateRefusesNilDB(t *testing.T) {
	if err := Migrate(t.Context(), nil, ""); !errors.Is(err, ErrConfig) {
		t.Fatalf("Migrate(nil) = %v; want ErrConfig", err)
	}
}

// FuzzWALRows: no WAL file, however malformed (its freelist too), panics
// the judgement of a kept WAL; an empty file holds no sequence and no row,
// and any other shorter than a WAL header is refused as damaged.
func FuzzWALRows(f *testing.F) {
	f.Add([]byte{}, uint8(0))
	f.Add(append([]byte{0x37, 0x7f, 0x06, 0x82, 0, 0x2d, 0xe2, 0x18, 0, 0, 0x10, 0}, make([]byte, 4096)...), uint8(8))
	link := filepath.Join(f.TempDir(), "wal")
	f.Fuzz(func(t *testing.T, b []byte, reserved uint8) {
		must(t, os.WriteFile(link, b, 0o600))
		seq, rows, cut, err := walRows(link, "inc", int(reserved), 0)
		switch {
		case len(b) == 0 && (seq != 0 || rows != nil || cut != 0 || err != nil):
			t.Fatalf("walRows of an empty file = %d, %d rows, %d cut, %v; want 0, none, nil", seq, len(rows), cut, err)
		case len(b) > 0 && len(b) < 32 && !errors.Is(err, walfile.ErrDamaged):
			t.Fatalf("walRows of %d bytes = %v; want ErrDamaged (shorter than a header)", len(b), err)
		}
	})
}
