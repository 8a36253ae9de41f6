package drivertest

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/ctoken/ctoken/replay"
	"github.com/ctoken/ctoken/sqlitestore"
)

// shadowStatements make a temporary table of the store's name, holding a
// copy of the store's rows (its marker included), on the connection that
// runs them: an unqualified name would then resolve to it (SQLite looks
// in temp before main).
var shadowStatements = []string{
	`CREATE TEMP TABLE ` + sqlitestore.DefaultTable + ` (key BLOB PRIMARY KEY, state TEXT NOT NULL, token TEXT NOT NULL, until INTEGER NOT NULL, fingerprint BLOB, result BLOB, seq INTEGER NOT NULL DEFAULT 0) WITHOUT ROWID`,
	`INSERT INTO temp.` + sqlitestore.DefaultTable + ` SELECT * FROM main.` + sqlitestore.DefaultTable,
}

// TestTempTableShadow: a temporary table of the store's
// name, made by a handler in its Work or on a WithTx transaction's
// connection, never receives the store's rows: a claim accepted after it
// is in the file, where every other Store sees it.
func TestTempTableShadow(t *testing.T) {
	type claimer func(t *testing.T, s *sqlitestore.Store, db *sql.DB, id string) bool
	// inWork makes the table in a Work of AcquireWork (acquired) or of
	// BeginWork, beside the handler's app row, and claims id after it.
	inWork := func(acquired bool) claimer {
		return func(t *testing.T, s *sqlitestore.Store, db *sql.DB, id string) bool {
			ctx := context.Background()
			w, tx := workOf(t, s, "job", acquired, nil)
			for _, q := range shadowStatements {
				mustExec(t, ctx, tx, q)
			}
			insertApp(t, tx, "job")
			must(t, w.Commit(ctx, time.Now().Add(time.Hour), nil, nil))
			// The record is in the file, not in the temporary table.
			if n := appRows(t, db, "job"); n != 1 {
				t.Fatalf("app rows after Commit = %d; want 1", n)
			}
			first, err := s.Claim(ctx, id, time.Now().Add(time.Hour))
			if err != nil {
				t.Fatalf("Claim after the Work = %v", err)
			}
			return first
		}
	}
	tests := []struct {
		name  string
		claim claimer
	}{
		{"made by a handler in an AcquireWork Work", inWork(true)},
		{"made by a handler in a BeginWork Work", inWork(false)},
		{"on the connection of a WithTx transaction", func(t *testing.T, s *sqlitestore.Store, db *sql.DB, id string) bool {
			ctx := context.Background()
			tx, err := db.BeginTx(ctx, nil)
			must(t, err)
			defer tx.Rollback()
			for _, q := range shadowStatements {
				mustExec(t, ctx, tx, q)
			}
			first, err := s.Claim(sqlitestore.WithTx(ctx, tx), id, time.Now().Add(time.Hour))
			if err != nil {
				t.Fatalf("Claim in WithTx = %v", err)
			}
			must(t, tx.Commit())
			return first
		}},
	}
	eachDriver(t, func(t *testing.T, d Driver) {
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				db, path := openMigrated(t, d)
				mustExec(t, context.Background(), db, `CREATE TABLE app (id TEXT PRIMARY KEY)`)
				s := mustStore(t, db, sqlitestore.Options{SweepInterval: -1})
				other := mustStore(t, d.Open(t, path), sqlitestore.Options{SweepInterval: -1})
				if !tc.claim(t, s, db, "token") {
					t.Fatal("the first claim of the token was not first")
				}
				claimedAll(t, other, []string{"token"}, time.Now().Add(time.Hour), "by another Store (the claim is in the file)")
				if r, err := other.AcquireRecord(context.Background(), "token", time.Minute, nil); err != nil || r.State != replay.LeaseDone {
					t.Fatalf("another Store's AcquireRecord of the claimed token = %+v, %v; want done", r, err)
				}
			})
		}
	})
}
