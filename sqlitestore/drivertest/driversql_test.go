package drivertest

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ctoken/ctoken/sqlitestore"
)

// readPragmas reads the three settings the store checks from one
// connection.
func readPragmas(t *testing.T, c *sql.Conn) (journal string, sync, busy int) {
	t.Helper()
	ctx := context.Background()
	for _, q := range []struct {
		pragma string
		dst    any
	}{{"journal_mode", &journal}, {"synchronous", &sync}, {"busy_timeout", &busy}} {
		if err := c.QueryRowContext(ctx, "PRAGMA "+q.pragma).Scan(q.dst); err != nil {
			t.Fatalf("PRAGMA %s: %v", q.pragma, err)
		}
	}
	return journal, sync, busy
}

// TestDriver pins what the store needs of the test binary's driver: its
// DSN setting every connection of the pool, the SQL the store runs, and
// Schema's SQL run by a team's own migration.
func TestDriver(t *testing.T) {
	subtests(t, []subtest{
		{"DSN sets every connection", dsnSetsEveryConnection},
		{"SQL the store needs", driverSQL},
		{"Schema runs through ExecContext", schemaRunsThroughExecContext},
	})
}

// dsnSetsEveryConnection: the driver's DSN applies each pragma to
// every connection the pool opens, not to the first one only. The values
// but Safe's differ from every default (SQLite's synchronous FULL and
// journal_mode DELETE, mattn's busy_timeout 5000) and, but for WAL, none
// is kept in the file, so only a DSN read on each connection can produce
// them. The weak settings are the ones the refusal tests open with. On
// Safe's pool, Migrate and New then accept the settings.
func dsnSetsEveryConnection(t *testing.T) {
	eachDriver(t, func(t *testing.T, d Driver) {
		for _, tc := range []struct {
			name    string
			pragmas []Pragma
			journal string
			sync    int
			busy    int
		}{
			{"Safe", Safe, "wal", 2, 5000},
			{"WAL EXTRA 4321", []Pragma{{"journal_mode", "WAL"}, {"synchronous", "EXTRA"}, {"busy_timeout", "4321"}}, "wal", 3, 4321},
			{"TRUNCATE EXTRA 1234", []Pragma{{"journal_mode", "TRUNCATE"}, {"synchronous", "EXTRA"}, {"busy_timeout", "1234"}}, "truncate", 3, 1234},
			{"weak: MEMORY OFF 0", []Pragma{{"journal_mode", "MEMORY"}, {"synchronous", "OFF"}, {"busy_timeout", "0"}}, "memory", 0, 0},
			{"weak: WAL NORMAL 1", []Pragma{{"journal_mode", "WAL"}, {"synchronous", "NORMAL"}, {"busy_timeout", "1"}}, "wal", 1, 1},
		} {
			t.Run(tc.name, func(t *testing.T) {
				ctx := context.Background()
				db := d.OpenWith(t, filepath.Join(t.TempDir(), "x.db"), tc.pragmas)
				// Four connections held at once: four the pool opened.
				for i := range 4 {
					c := heldConn(t, db)
					j, s, b := readPragmas(t, c)
					if j != tc.journal || s != tc.sync || b != tc.busy {
						t.Fatalf("connection %d runs journal_mode=%s synchronous=%d busy_timeout=%d; want %s, %d, %d", i, j, s, b, tc.journal, tc.sync, tc.busy)
					}
				}
				if n := db.Stats().OpenConnections; n != 4 {
					t.Fatalf("%d connections open; want 4", n)
				}
				if tc.name == "Safe" {
					must(t, sqlitestore.Migrate(ctx, db, ""))
					mustStore(t, db, sqlitestore.Options{})
				}
			})
		}
	})
}

// driverSQL: what the store's SQL needs of the driver and of the
// SQLite it carries: RETURNING (SQLite 3.35), BEGIN IMMEDIATE run with
// ExecContext on a *sql.Conn taking the write lock until COMMIT or
// ROLLBACK run the same way, and database/sql's BeginTx refused on a
// connection inside such a transaction.
func driverSQL(t *testing.T) {
	eachDriver(t, func(t *testing.T, d Driver) {
		ctx := context.Background()
		db := d.OpenWith(t, filepath.Join(t.TempDir(), "x.db"), With("busy_timeout", "50"))

		var version string
		must(t, db.QueryRowContext(ctx, "SELECT sqlite_version()").Scan(&version))
		var major, minor, patch int
		if _, err := fmt.Sscanf(version, "%d.%d.%d", &major, &minor, &patch); err != nil || major != 3 || minor < 35 {
			t.Fatalf("SQLite %s; want 3.35 or newer (RETURNING)", version)
		}
		t.Logf("SQLite %s", version)

		mustExec(t, ctx, db, "CREATE TABLE t (k INTEGER PRIMARY KEY, v INTEGER NOT NULL)")
		var k, v int
		if err := db.QueryRowContext(ctx, "INSERT INTO t (v) VALUES (?) RETURNING k, v", 7).Scan(&k, &v); err != nil || v != 7 {
			t.Fatalf("INSERT … RETURNING = %d, %d, %v; want v 7", k, v, err)
		}
		if err := db.QueryRowContext(ctx, "UPDATE t SET v = v + 1 WHERE k = ? RETURNING v", k).Scan(&v); err != nil || v != 8 {
			t.Fatalf("UPDATE … RETURNING = %d, %v; want 8", v, err)
		}
		if err := db.QueryRowContext(ctx, "UPDATE t SET v = v + 1 WHERE k = -1 RETURNING v").Scan(&v); err != sql.ErrNoRows {
			t.Fatalf("UPDATE … RETURNING of no row: %v; want sql.ErrNoRows", err)
		}

		c1, c2 := heldConn(t, db), heldConn(t, db)
		count := func(c *sql.Conn) int {
			t.Helper()
			var n int
			must(t, c.QueryRowContext(ctx, "SELECT count(*) FROM t").Scan(&n))
			return n
		}

		mustExec(t, ctx, c1, "BEGIN IMMEDIATE")
		mustExec(t, ctx, c1, "INSERT INTO t (v) VALUES (1)")
		if _, err := c2.ExecContext(ctx, "BEGIN IMMEDIATE"); err == nil || !strings.Contains(strings.ToLower(err.Error()), "locked") {
			t.Fatalf("a second BEGIN IMMEDIATE while the first holds the write lock: %v; want database is locked", err)
		}
		if n := count(c2); n != 1 {
			t.Fatalf("another connection sees %d rows during the transaction; want 1 (the uncommitted one hidden)", n)
		}
		if tx, err := c1.BeginTx(ctx, nil); err == nil {
			tx.Rollback()
			t.Fatal("BeginTx on a connection inside BEGIN IMMEDIATE succeeded; want cannot start a transaction within a transaction")
		}
		mustExec(t, ctx, c1, "ROLLBACK")
		if n := count(c2); n != 1 {
			t.Fatalf("%d rows after ROLLBACK; want 1", n)
		}
		mustExec(t, ctx, c2, "BEGIN IMMEDIATE") // the first ROLLBACK released the lock
		mustExec(t, ctx, c2, "INSERT INTO t (v) VALUES (2)")
		mustExec(t, ctx, c2, "COMMIT")
		if n := count(c1); n != 2 {
			t.Fatalf("%d rows after COMMIT; want 2", n)
		}
	})
}

// schemaRunsThroughExecContext: Schema's SQL, several statements in
// one string and no arguments, run by a team's own migration with one
// ExecContext inside BEGIN IMMEDIATE … COMMIT, creates the table, its
// index and the marker row on every driver (each runs every statement of
// an argument-less string; with arguments they differ, so the store
// itself sends one statement a call).
func schemaRunsThroughExecContext(t *testing.T) {
	eachDriver(t, func(t *testing.T, d Driver) {
		ctx := context.Background()
		db := d.Open(t, filepath.Join(t.TempDir(), "x.db"))
		schema, err := sqlitestore.Schema("team_replay")
		must(t, err)
		c := heldConn(t, db)
		mustExec(t, ctx, c, "BEGIN IMMEDIATE;\n"+schema+"COMMIT;\n") // Schema's SQL in one ExecContext
		objects := countRows(t, db, `SELECT count(*) FROM sqlite_schema WHERE tbl_name = 'team_replay' AND name IN ('team_replay', 'team_replay_until')`)
		markers := countRows(t, db, `SELECT count(*) FROM "team_replay" WHERE state = 'm'`)
		if objects != 2 || markers != 1 {
			t.Fatalf("after Schema's SQL: %d of the table and its index, %d marker rows; want 2 and 1", objects, markers)
		}
	})
}
