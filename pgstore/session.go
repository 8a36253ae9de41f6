package pgstore

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// errSQLPrepared is the text the reset function (see resetBody) casts to
// integer, and so fails with, when the session holds a statement prepared
// by SQL.
const errSQLPrepared = "ctoken_sql_prepared"

// sqlPrepared reports whether err is the reset's failure for a statement
// prepared by SQL: invalid_text_representation with exactly the message
// the server writes for errSQLPrepared (in English, its default
// lc_messages; in another language the failure is not recognised, and
// is reported as the reset's failure, the session closed either way).
func sqlPrepared(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "22P02" &&
		pgErr.Message == `invalid input syntax for type integer: "`+errSQLPrepared+`"`
}

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
