package pgstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// markerSQL is the marker row's key (key layout 2): two zero bytes, the
// length of an empty prefix, which no store has. legacyMarkerSQL is the
// marker's key in layout 1 (before version 2): the empty key.
const (
	markerSQL       = `decode('0000', 'hex')`
	legacyMarkerSQL = `''::bytea`
)

// maxIdentBytes bounds each part of a table name, so that the index name
// (the table's name plus "_until") stays within PostgreSQL's 63 bytes.
const maxIdentBytes = 48

// Schema returns the SQL that creates the store's table (DefaultTable when
// table is empty), for teams that run their own migrations:
//
//	CREATE TABLE "ctoken_replay" (
//		key   bytea PRIMARY KEY,
//		state text NOT NULL CHECK (state IN ('m', 'c', 'l', 'd')),
//		token text NOT NULL,
//		until timestamptz NOT NULL,
//		fingerprint bytea,
//		result      bytea
//	) WITH (fillfactor = 90, autovacuum_vacuum_scale_factor = 0.05);
//	CREATE INDEX "ctoken_replay_until" ON "ctoken_replay" (until);
//	INSERT INTO "ctoken_replay" (key, state, token, until)
//		VALUES (decode('0000', 'hex'), 'm', '{"v":1,"tl":' ||
//		  ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::bigint
//		  || ',"sys":' || (SELECT system_identifier FROM pg_control_system())
//		  || ',"longest":0}', '-infinity');
//	DO $ctoken_migrate$ ... $ctoken_migrate$;
//
// A row's key is the prefix's length in two bytes (big-endian), the
// prefix, then the ID, so that no two prefixes share a key (key layout 2;
// see [Migrate] for tables of earlier versions). The columns fingerprint
// and result hold the records of [Store.AcquireRecord] and
// [Store.ConfirmRecord] (NULL for rows without one). The last statement
// writes the marker row (key: two zero bytes), whose until is the instant
// from which the table accepts claims (here: always), and whose token is
// the table's history record, here the timeline and cluster (system
// identifier) of the server it is written on (a promoted standby's, or
// another cluster's, Store judges by it whether the table's
// history is known: docs/pgstore-reference.md, "Unknown history"). Every statement of
// the store checks the marker in the same snapshot as the row it decides
// on, so a table that was truncated or emptied refuses everything. The DO
// block creates, in the table's schema, the PL/pgSQL functions that end a
// Work (<table>_fence, <table>_fence_locked and <table>_reset: see
// docs/pgstore-reference.md, "The work's functions"), or replaces those
// that differ from this version's; [New] refuses a table without them.
// Run all four in one transaction: a table without its marker is refused
// as forgotten ([ErrForgotten]). The name is validated as for
// [Options.Table].
func Schema(table string) (string, error) {
	stmts, err := schema(table)
	if err != nil {
		return "", err
	}
	return strings.Join(stmts, ";\n") + ";\n", nil
}

func schema(table string) ([]string, error) {
	if table == "" {
		table = DefaultTable
	}
	t, err := quoteTable(table)
	if err != nil {
		return nil, err
	}
	parts := strings.Split(table, ".")
	index := `"` + parts[len(parts)-1] + `_until"`
	return []string{
		`CREATE TABLE ` + t + ` (
	key   bytea PRIMARY KEY,
	state text NOT NULL CHECK (state IN ('m', 'c', 'l', 'd')),
	token text NOT NULL,
	until timestamptz NOT NULL,
	fingerprint bytea,
	result      bytea
) WITH (fillfactor = 90, autovacuum_vacuum_scale_factor = 0.05)`,
		`CREATE INDEX ` + index + ` ON ` + t + ` (until)`,
		`INSERT INTO ` + t + ` (key, state, token, until)
	VALUES (` + markerSQL + `, 'm', ` + freshRecordSQL + `, '-infinity')`,
		functionsSQL(t),
	}, nil
}

// Migrate creates the store's table (DefaultTable when table is empty) with
// its marker row if it does not exist, in one transaction serialized by an
// advisory lock, so instances starting together may all call it. It leaves
// an existing table alone, except that it refuses one without its marker
// row with [ErrForgotten]: such a table was truncated or emptied, and
// re-arming it is an operator's decision ([Rearm]), never a side effect of
// a deployment. A Store never calls Migrate itself.
//
// A table of key layout 1 (pgstore before version 2: the key was the
// prefix then the ID, so a store whose prefix starts with another's
// shared its keys) is upgraded to layout 2 in the same transaction: its
// marker row moves to the new marker key, keeping its until (a fence set by
// [Rearm] stays). The rows claimed before stay where they are, and every
// claim and lease of a store checks them too, so an ID claimed before the
// upgrade is refused until its claim expires; such a row is never taken
// over or released by a store of version 2 (a Release of an ID claimed
// before the upgrade leaves it claimed until it expires). A store of an
// earlier version finds no marker in an upgraded table and refuses every
// call with ErrForgotten (fail closed): upgrade every instance, then run
// Migrate. A layout-1 table holding a key that starts with byte 0x00 or
// 0x01 (a prefix starting with a control byte), which could read as a key
// of layout 2, is refused with ErrConfig and left as it is.
//
// A table without the columns fingerprint and result (made by pgstore
// before [replay.Recorder]: [Schema] of an earlier version) gets them, as
// nullable bytea columns, in the same transaction: its rows then read as
// they did, a done row as done with an empty record. Adding them changes
// only the catalog (no row is rewritten), but takes the table's exclusive
// lock for that moment, waiting for the statements running on it (and
// making new ones wait). Stores of the earlier version keep working on the
// upgraded table; [New] refuses a table without the columns (ErrConfig).
// A column of either name with another type is refused with ErrConfig.
//
// A table of an earlier version gets this version's functions (see
// [Schema]), created or replaced in the same transaction; New refuses a
// table whose functions are missing or differ ([ErrConfig]), so run
// Migrate before the instances of a version that changed them start.
//
// Running Migrate again changes nothing and takes no lock beyond a
// read of the catalog and of the marker row.
//
// Dropping the table and calling Migrate again creates a fresh, armed table:
// that forgets every claim as surely as TRUNCATE, but cannot be told apart
// from a first deployment. Do not drop it while claims are live.
//
// Errors match [ErrConfig] (a nil pool, an invalid name, or a layout-1
// table that cannot be upgraded), [ErrForgotten],
// or [ErrUnavailable] (the database could not be reached, or refused a
// statement, such as a role without CREATE).
func Migrate(ctx context.Context, pool *pgxpool.Pool, table string) error {
	if pool == nil {
		return fmt.Errorf("%w: nil pool", ErrConfig)
	}
	stmts, err := schema(table)
	if err != nil {
		return err
	}
	if table == "" {
		table = DefaultTable
	}
	t, _ := quoteTable(table)
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext('ctoken-pgstore-migrate'))`); err != nil {
			return err
		}
		// CREATE TABLE itself tells whether the table exists (to_regclass
		// may answer from a catalog cache that missed a concurrent
		// Migrate's commit); a savepoint keeps the transaction usable.
		if _, err := tx.Exec(ctx, `SAVEPOINT create_table`); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, stmts[0])
		var pgErr *pgconn.PgError
		switch {
		case err == nil:
			for _, st := range stmts[1:] {
				if _, err := tx.Exec(ctx, st); err != nil {
					return err
				}
			}
			return nil
		case errors.As(err, &pgErr) && pgErr.Code == "42P07": // duplicate_table
			if _, err := tx.Exec(ctx, `ROLLBACK TO SAVEPOINT create_table`); err != nil {
				return err
			}
		default:
			return err
		}
		if err := upgrade(ctx, tx, t, table); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, stmts[len(stmts)-1]) // the functions, where missing or of another version
		return err
	})
	if err != nil && !errors.Is(err, ErrForgotten) && !errors.Is(err, ErrConfig) {
		return fmt.Errorf("%w: migrate: %w", ErrUnavailable, err)
	}
	return err
}

// Rearm writes the marker row of a table that lost it (truncated or
// emptied), with a history record of the server's cluster and timeline
// (as [Schema] does), fenced for the given duration: Stores refuse every
// call with [ErrForgotten] until fence has passed by the database's
// clock, and then accept claims again. The table has forgotten which IDs
// were claimed, so fence must cover every claim it could have held: the
// longest until your callers use past the loss (a one-time token's or
// request state's TTL plus [replay.SkewMargin], a webhook's confirmation
// period). A shorter fence lets an ID claimed before the loss be accepted
// a second time.
//
// On a table fenced for unknown history without an end (a Store without
// [Options.Horizon] on a promoted standby or another cluster: [ErrFenced],
// "until an operator runs pgstore.Rearm"), Rearm sets the fence's end to
// now plus fence, the same duration. Rearming a table that has its marker
// (of either key layout) otherwise changes nothing; a negative fence
// is refused with ErrConfig, and a database that cannot be reached or
// refuses the statement with [ErrUnavailable].
func Rearm(ctx context.Context, pool *pgxpool.Pool, table string, fence time.Duration) error {
	if pool == nil {
		return fmt.Errorf("%w: nil pool", ErrConfig)
	}
	if fence < 0 {
		return fmt.Errorf("%w: negative fence", ErrConfig)
	}
	if table == "" {
		table = DefaultTable
	}
	t, err := quoteTable(table)
	if err != nil {
		return err
	}
	us := int64(fence / time.Microsecond)
	// A table of key layout 1 that has its marker is left to Migrate.
	_, err = pool.Exec(ctx, `INSERT INTO `+t+` (key, state, token, until)
	SELECT `+markerSQL+`, 'm', `+freshRecordSQL+`, now() + $1::bigint * interval '1 microsecond'
	WHERE NOT EXISTS (SELECT 1 FROM `+t+` WHERE key = `+legacyMarkerSQL+` AND state = 'm')
	ON CONFLICT (key) DO UPDATE SET until = EXCLUDED.until WHERE `+t+`.state = 'm' AND `+t+`.until = 'infinity'`, us)
	if err != nil {
		return fmt.Errorf("%w: rearm: %w", ErrUnavailable, err)
	}
	return nil
}

// upgrade checks an existing table's marker row (in Migrate's
// transaction) and upgrades a table of key layout 1 to layout 2.
func upgrade(ctx context.Context, tx pgx.Tx, t, table string) error {
	var marker, legacy, clash bool
	if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM `+t+` WHERE key = `+markerSQL+` AND state = 'm'),
	EXISTS (SELECT 1 FROM `+t+` WHERE key = `+legacyMarkerSQL+` AND state = 'm'),
	EXISTS (SELECT 1 FROM `+t+` WHERE key > `+legacyMarkerSQL+` AND key < decode('02', 'hex') AND key <> `+markerSQL+`)`).Scan(&marker, &legacy, &clash); err != nil {
		return err
	}
	switch {
	case marker:
	case !legacy:
		return forgotten(table)
	case clash:
		return fmt.Errorf("%w: table %s (key layout 1) holds keys starting with byte 0x00 or 0x01 (a prefix starting with a control byte), which key layout 2 could confuse with its own: delete those rows once they expired, then run Migrate", ErrConfig, table)
	default:
		if _, err := tx.Exec(ctx, `WITH old AS (DELETE FROM `+t+` WHERE key = `+legacyMarkerSQL+` AND state = 'm' RETURNING until)
	INSERT INTO `+t+` (key, state, token, until) SELECT `+markerSQL+`, 'm', '', until FROM old`); err != nil {
			return err
		}
	}
	return addRecordColumns(ctx, tx, t, table)
}

// forgottenRefusal is the refusal of a table that lost its marker row
// (by New and the recheck): it names the one way out ([Rearm]), and warns
// that restoring the table from a dump or backup is not one.
func forgottenRefusal(table string) error {
	return fmt.Errorf("%w: %w", ErrUnavailable, forgotten(table))
}

// forgotten is [forgottenRefusal] as Migrate reports it (not matching
// ErrUnavailable: retrying changes nothing).
func forgotten(table string) error {
	return fmt.Errorf("%w: table %s lost its marker row (TRUNCATE, DELETE, or dropped and made again): "+
		"run pgstore.Rearm(ctx, pool, %q, fence) with fence the longest lifetime a claim may have had, plus replay.SkewMargin. "+
		"Restoring the table from a dump or backup instead would bring back a marker without the claims made after it: "+
		"after a restore, delete its marker row and Rearm it before it serves (docs/pgstore.md, Operator steps)",
		ErrForgotten, table, table)
}

// recordColumnsSQL counts the columns fingerprint and result of table $1
// that are bytea, and those of the two names that are not.
const recordColumnsSQL = `SELECT count(*) FILTER (WHERE atttypid = 'bytea'::regtype), count(*) FILTER (WHERE atttypid <> 'bytea'::regtype)
	FROM pg_attribute WHERE attrelid = $1::regclass AND attname IN ('fingerprint', 'result') AND attnum > 0 AND NOT attisdropped`

// addRecordColumns adds the columns of the records (schema before
// [replay.Recorder]) to a table that lacks them, in Migrate's transaction.
func addRecordColumns(ctx context.Context, tx pgx.Tx, t, table string) error {
	var good, bad int
	if err := tx.QueryRow(ctx, recordColumnsSQL, t).Scan(&good, &bad); err != nil {
		return err
	}
	switch {
	case bad > 0:
		return fmt.Errorf("%w: table %s has a column fingerprint or result that is not bytea: rename it, then run Migrate", ErrConfig, table)
	case good == 2:
		return nil
	}
	_, err := tx.Exec(ctx, `ALTER TABLE `+t+` ADD COLUMN IF NOT EXISTS fingerprint bytea, ADD COLUMN IF NOT EXISTS result bytea`)
	return err
}

// quoteTable validates a table name, optionally schema-qualified (in a
// schema not named pg_*), and returns it quoted for SQL.
func quoteTable(table string) (string, error) {
	parts := strings.Split(table, ".")
	if len(parts) > 2 {
		return "", fmt.Errorf("%w: table name %q has more than one dot", ErrConfig, table)
	}
	quoted := make([]string, len(parts))
	for i, p := range parts {
		if err := checkIdent(p); err != nil {
			return "", fmt.Errorf("%w: table name %q: %w", ErrConfig, table, err)
		}
		quoted[i] = `"` + p + `"`
	}
	// Schemas named pg_* are PostgreSQL's: pg_catalog, pg_toast, and
	// pg_temp, the session's own temporary schema, where every pooled
	// connection would hold a table of its own that forgets its claims
	// when the connection closes.
	if len(parts) == 2 && strings.HasPrefix(parts[0], "pg_") {
		return "", fmt.Errorf("%w: table name %q: schema %s is PostgreSQL's own (pg_temp is per session)", ErrConfig, table, parts[0])
	}
	return strings.Join(quoted, "."), nil
}

// checkIdent accepts a lower-case SQL identifier: [a-z_][a-z0-9_]*, at
// most maxIdentBytes.
func checkIdent(p string) error {
	if p == "" || len(p) > maxIdentBytes {
		return fmt.Errorf("identifier must be 1 to %d bytes", maxIdentBytes)
	}
	for i := 0; i < len(p); i++ {
		c := p[i]
		if c == '_' || 'a' <= c && c <= 'z' || i > 0 && '0' <= c && c <= '9' {
			continue
		}
		return errors.New("identifier must match [a-z_][a-z0-9_]*")
	}
	return nil
}
