package drivertest

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/ctoken/ctoken/sqlitestore"
)

// driversSetEveryConnection: the DSN of each driver sets the safe
// pragmas on every connection the pool opens, and the store accepts it.
func driversSetEveryConnection(t *testing.T) {
	eachDriver(t, func(t *testing.T, d Driver) {
		ctx := context.Background()
		db := d.Open(t, filepath.Join(t.TempDir(), "x.db"))
		var conns []interface{ Close() error }
		for range 4 {
			c, err := db.Conn(ctx)
			if err != nil {
				t.Fatal(err)
			}
			conns = append(conns, c)
			var journal string
			var sync, busy int
			for _, q := range []struct {
				pragma string
				dst    any
			}{{"journal_mode", &journal}, {"synchronous", &sync}, {"busy_timeout", &busy}} {
				if err := c.QueryRowContext(ctx, "PRAGMA "+q.pragma).Scan(q.dst); err != nil {
					t.Fatal(err)
				}
			}
			if journal != "wal" || sync != 2 || busy != 5000 {
				t.Fatalf("connection runs journal_mode=%s synchronous=%d busy_timeout=%d; want wal, 2, 5000", journal, sync, busy)
			}
		}
		for _, c := range conns {
			c.Close()
		}
		if err := sqlitestore.Migrate(ctx, db, ""); err != nil {
			t.Fatal(err)
		}
		s, err := sqlitestore.New(ctx, db, sqlitestore.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
	})
}
