package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"
)

const (
	markerKey     = `x'0000'` // an empty prefix, which no store has
	maxIdentBytes = 48
)

// Schema returns the SQL that creates the store's table (DefaultTable when
// table is empty) and its marker row with a new incarnation, for teams
// that run their own migrations: run it once per database, in one
// transaction. [Migrate] does, and records the incarnation beside the file.
func Schema(table string) (string, error) {
	stmts, err := schema(table, newToken(), 0)
	if err != nil {
		return "", err
	}
	return strings.Join(stmts, ";\n") + ";\n", nil
}

func schema(table, incarnation string, fence int64) ([]string, error) {
	t, err := quoteTable(table)
	if err != nil {
		return nil, err
	}
	index := `"` + unquote(t) + `_until"`
	return []string{
		`CREATE TABLE ` + t + ` (
	key   BLOB PRIMARY KEY,
	state TEXT NOT NULL CHECK (state IN ('m', 'c', 'l', 'w', 'd')),
	token TEXT NOT NULL,
	until INTEGER NOT NULL,
	fingerprint BLOB,
	result      BLOB,
	seq   INTEGER NOT NULL DEFAULT 0
) WITHOUT ROWID`,
		`CREATE INDEX ` + index + ` ON ` + t + ` (until)`,
		fmt.Sprintf(`INSERT INTO %s (key, state, token, until) VALUES (%s, 'm', '%s', %d)`, t, markerKey, incarnation, fence),
	}, nil
}

func quoteTable(table string) (string, error) {
	t, fault := tableName(table)
	if fault != "" {
		return "", fmt.Errorf("%w: %s", ErrConfig, fault)
	}
	return t, nil
}

// tableName is the quoted name, or what is wrong with it.
func tableName(table string) (quoted, fault string) {
	if table == "" {
		table = DefaultTable
	}
	if len(table) > maxIdentBytes {
		return "", fmt.Sprintf("table name of %d bytes, over %d: choose a shorter one", len(table), maxIdentBytes)
	}
	for i, c := range table {
		if !(c == '_' || c >= 'a' && c <= 'z' || i > 0 && c >= '0' && c <= '9') {
			return "", fmt.Sprintf("table name %q is not a lower-case identifier ([a-z_][a-z0-9_]*)", table)
		}
	}
	if strings.HasPrefix(table, "sqlite_") {
		return "", fmt.Sprintf("table name %q is reserved by SQLite: choose one that does not begin with sqlite_", table)
	}
	return `"` + table + `"`, ""
}

// unquote is the table's bare name.
func unquote(t string) string { return strings.Trim(strings.TrimPrefix(t, "main."), `"`) }

// Migrate creates the store's table (DefaultTable when table is empty)
// and its marker row if they do not exist; every process may call it. It
// refuses a database that lost claims with [ErrForgotten]: re-arming is
// an operator's decision ([Rearm]), never a deployment's.
func Migrate(ctx context.Context, db *sql.DB, table string) error {
	return migrate(ctx, db, table, false, 0)
}

// Rearm makes the table serve again after a loss ([ErrForgotten]), keeping
// its rows; it refuses every claim for fence, at least the stores' Horizon
// if the lost claims matter. Running stores refuse until rebuilt by [New].
// It refuses a table SQLite finds malformed (PRAGMA quick_check), with
// ErrForgotten naming the fix.
func Rearm(ctx context.Context, db *sql.DB, table string, fence time.Duration) error {
	if fence < 0 {
		return fmt.Errorf("%w: negative fence", ErrConfig)
	}
	return migrate(ctx, db, table, true, fence)
}

func migrate(ctx context.Context, db *sql.DB, table string, rearm bool, fence time.Duration) (err error) {
	if db == nil {
		return fmt.Errorf("%w: nil *sql.DB", ErrConfig)
	}
	ctx = orBackground(ctx)
	t, err := quoteTable(table)
	if err != nil {
		return err
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		return unavailable(ctx, err)
	}
	defer conn.Close()
	set, err := readSettings(ctx, conn)
	if err != nil {
		return err
	}
	if set.path == "" {
		return fmt.Errorf("%w: an in-memory or temporary database forgets every claim when it closes: open a file", ErrConfig)
	}
	// Migrate knows no Horizon: its refusals name DefaultHorizon's fence.
	defer func() { err = place{set.path, t, DefaultHorizon}.lift(err) }()
	q := connQuerier{ctx, conn}
	// The sidecar is read under the write lock, as New's (guard.open).
	if _, err := q.exec(`BEGIN IMMEDIATE`); err != nil {
		return unavailable(ctx, err)
	}
	done := false
	defer func() {
		if !done {
			_, _ = conn.ExecContext(context.WithoutCancel(ctx), `ROLLBACK`)
		}
	}()
	side, haveSide, err := readSidecar(sidecarFile(set.path, t))
	if err != nil && !rearm {
		return err
	}
	s := &Store{table: t}
	inc, _, seq, err := s.marker(q)
	missing := errors.Is(err, errNoTable)
	if err != nil && !missing && !(rearm && errors.Is(err, ErrForgotten)) {
		return unavailable(ctx, malformed(err, set.path, t))
	}
	if rearm && !missing {
		// A malformed table would fail the calls New then serves.
		if err := checkTable(q, place{set.path, t, fence}); err != nil {
			return unavailable(ctx, err)
		}
	}
	var stmts []string
	switch {
	case rearm:
		inc = newToken()
		until := time.Now().Add(fence).UnixNano()
		if missing {
			stmts, _ = schema(unquote(t), inc, until)
		} else {
			stmts = []string{
				`DELETE FROM ` + t + ` WHERE key = ` + markerKey,
				fmt.Sprintf(`INSERT INTO %s (key, state, token, until, seq) VALUES (%s, 'm', '%s', %d, %d)`, t, markerKey, inc, until, max(seq, side.Seq)+1),
			}
		}
	case !rearm && lostRefusal(set.path, side) != nil:
		return lostRefusal(set.path, side)
	case missing && haveSide:
		return fmt.Errorf("%w: the table %s is missing from %s, which a store used before (the file was deleted or replaced)", ErrForgotten, unquote(t), set.path)
	case missing:
		inc = newToken()
		stmts, _ = schema(unquote(t), inc, 0)
	case !haveSide && seq > 0:
		return fmt.Errorf("%w: %s", ErrForgotten, noSidecar(set.path, t, seq))
	case haveSide && side.Incarnation != inc:
		return fmt.Errorf("%w: %s is not the database a store used at this path before", ErrForgotten, set.path)
	case haveSide && seq < side.Seq:
		return fmt.Errorf("%w: %s is older than the database a store last saw at this path (a restored backup or copy)", ErrForgotten, set.path)
	}
	for _, stmt := range stmts {
		if _, err := q.exec(stmt); err != nil {
			return unavailable(ctx, err)
		}
	}
	if _, err := q.exec(`COMMIT`); err != nil {
		return unavailable(ctx, err)
	}
	done = true
	if rearm {
		// The loss is decided: kept WALs no longer refuse.
		if err := removeWALLinks(set.path, t); err != nil {
			return fmt.Errorf("%w: removing the WALs kept beside %s: %w", ErrUnavailable, set.path, err)
		}
	}
	if !haveSide || rearm || side.Incarnation != inc {
		var seqNow int64
		if _, _, seqNow, err = s.marker(q); err != nil {
			return unavailable(ctx, err)
		}
		if err := writeSidecar(sidecarFile(set.path, t), sidecar{Incarnation: inc, Seq: seqNow}, true); err != nil {
			return fmt.Errorf("%w: recording the incarnation beside the database: %w", ErrUnavailable, err)
		}
	}
	return nil
}
