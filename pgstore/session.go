package pgstore

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// resetSQL ends, on the work's connection, whatever of the session the
// handler's statements may have changed (through what the Tx does not
// refuse, such as a function's set_config or a temporary table), so that
// nothing of it reaches the next user of the pooled connection: settings
// back to the session's defaults (those of the connection's startup, such
// as the pool's RuntimeParams; a SET sent by the pool's AfterConnect is
// undone too), role and session authorization, cursors WITH HOLD, LISTEN
// registrations, session advisory locks, temporary tables and sequence
// state. Each statement may run in a transaction block (unlike DISCARD
// ALL), so it follows COMMIT or ROLLBACK in the same round trip.
//
// Its last statement fails (with errSQLPrepared) when the session holds
// a statement prepared by SQL (PREPARE in a function's EXECUTE, which
// the Tx cannot see): DEALLOCATE ALL would also drop pgx's statement
// cache, unknown to pgx, so the connection is closed instead. Left
// pooled, such a statement could take the name of one pgx has cached
// (the store's own claim, say) and answer in its place.
const resetSQL = "reset all; set session authorization default; close all; unlisten *; select pg_catalog.pg_advisory_unlock_all(); discard temp; discard sequences; " +
	"select (case when exists (select from pg_catalog.pg_prepared_statements where from_sql) then '" + errSQLPrepared + "' else '0' end)::int"

// errSQLPrepared is the text resetSQL casts to integer, and so fails
// with, when the session holds a statement prepared by SQL.
const errSQLPrepared = "ctoken_sql_prepared"

// sqlPrepared reports whether err is resetSQL's failure for a statement
// prepared by SQL: invalid_text_representation with exactly the message
// the server writes for errSQLPrepared (in English, its default
// lc_messages; in another language the failure is not recognised, and
// is reported as the reset's failure, the session closed either way).
func sqlPrepared(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "22P02" &&
		pgErr.Message == `invalid input syntax for type integer: "`+errSQLPrepared+`"`
}

// resetStatements are resetSQL's statements, queued one by one behind the
// fence and COMMIT.
var resetStatements = strings.Split(resetSQL, "; ")

// put returns the work's connection to the pool when its session was
// reset (clean), and closes it otherwise: a session whose state the
// handler may have changed is never pooled. The handler's named prepared
// statements ([workTx.Prepare]) are deallocated first (through pgx, which
// keeps their names).
func (w *work) put(ctx context.Context, clean bool) {
	for _, name := range w.prepared {
		if !clean || w.conn.PgConn().TxStatus() != 'I' {
			break
		}
		clean = w.conn.Deallocate(ctx, name) == nil
	}
	if clean {
		w.pc.Release() // a connection still in a transaction is closed, not pooled
		return
	}
	cctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	w.pc.Hijack().Close(cctx)
}
