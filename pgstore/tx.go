package pgstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// ErrNoTx reports a context that carries no transaction: [TxFrom] was
// called outside a [replay.Work]'s context (a handler wired without the
// transactional mode) and without [WithTx]. It is returned rather than a
// connection of the pool, so the work is never written outside the
// transaction it must commit with.
var ErrNoTx = errors.New("pgstore: the context carries no transaction (use the transactional mode, or pgstore.WithTx)")

// errForeign refuses a [Store.Claim] whose context carries a transaction
// ([WithTx]) on another database or another server than the store's: the
// claim would be written where the store never reads it. The claim's
// statement fails, aborting that transaction; nothing is claimed. It
// matches [ErrConfig].
var errForeign = fmt.Errorf("%w: the transaction of the context (pgstore.WithTx) is on another database or server than the store's", ErrConfig)

// errForeignTx is the text a claim's statement fails with in a
// transaction on another database or server.
const errForeignTx = "ctoken_foreign_tx"

// txKey is the context key of a transaction.
type txKey struct{}

// TxFrom returns the transaction ctx carries: the one of a [replay.Work]
// (from the Work's Context, as the idempotency middleware passes it to
// the handler) or one placed with [WithTx]. Without one it returns an
// error matching [ErrNoTx], never a connection of its own: a handler
// wired without the transactional mode fails instead of writing outside
// the transaction.
//
// The transaction of a Work refuses Commit and Rollback (its Work ends
// it; answer a retry status to roll it back), allows Begin (a savepoint,
// which it may commit or roll back), serialises every call with a lock
// (a goroutine that outlived the handler cannot race the Work's end), and
// refuses every statement, with an error matching [pgx.ErrTxClosed], once
// the Work has ended. Its Conn returns nil: a statement sent on the
// connection itself would escape that lock and that end.
//
// It is the only transaction the handler can write in: every statement is
// sent with the extended protocol, one statement per string (the server
// refuses "COMMIT; BEGIN"; a pool whose DefaultQueryExecMode is the simple
// protocol has its statements sent with [pgx.QueryExecModeExec], and its
// batches refused), and a statement that would end, replace or outlive the
// transaction (COMMIT, ROLLBACK, SAVEPOINT as SQL, SET other than SET
// LOCAL, DISCARD, PREPARE, ...) is refused unsent; the Work's Commit then
// rolls back, with an error matching [replay.ErrRolledBack]. Behind that,
// the Work's Commit checks in its fence statement that it runs in the
// transaction the work began (by its transaction id): if SQL sent some
// other way ended it, Commit never succeeds, reports neither
// [replay.ErrRolledBack] nor [replay.ErrLeaseLost] (writes before the end
// may be committed), and records the key as done without a record, so the
// work is never run again. The Work's COMMIT runs with the
// synchronous_commit [New] accepted, whatever SET LOCAL the handler sent:
// the handler's deferred triggers fire before the fence (its Commit sends
// SET CONSTRAINTS ALL IMMEDIATE first), so none runs at COMMIT.
func TxFrom(ctx context.Context) (pgx.Tx, error) {
	if tx := txOf(ctx); tx != nil {
		return tx, nil
	}
	return nil, ErrNoTx
}

// WithTx returns ctx carrying tx, where [TxFrom] and [Store.Claim] find
// it: a Claim with this context (one-time tokens and request states
// redeemed through a ctoken issuer on this store) writes its claim in tx,
// so the claim holds only if tx commits. tx must be on the store's
// database of the store's server (any pool): the claim's statement checks
// the database's name, the server's system identifier, address and port
// (as the server sees the connection: over a Unix socket, or to another
// of the server's addresses than New's, it is refused), and
// on another fails with an error matching [ErrConfig], claiming nothing
// (and aborting tx). The store's statements name its table with its
// schema, so tx's search_path or a temporary table of the same name
// cannot take the claim.
func WithTx(ctx context.Context, tx pgx.Tx) context.Context {
	if ctx == nil {
		ctx = context.Background()
	}
	return context.WithValue(ctx, txKey{}, tx)
}

// txOf is the transaction ctx carries, or nil.
func txOf(ctx context.Context) pgx.Tx {
	if ctx == nil {
		return nil
	}
	tx, _ := ctx.Value(txKey{}).(pgx.Tx)
	return tx
}

// claimTx is the transaction ctx carries for s's claims: one placed with
// [WithTx], or a Work's of a Store on s's pool. The Work of a Store on
// another pool is not s's: its context reaches every Store a handler
// uses, and its connection may be to another database, where s's claim
// would be written in a table s never reads.
func (s *Store) claimTx(ctx context.Context) pgx.Tx {
	tx := txOf(ctx)
	if wt, ok := tx.(*workTx); ok && wt.w.s.pool != s.pool {
		return nil
	}
	return tx
}

// querier is what a claim needs of a pool or a transaction.
type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// claimInTx runs fn, a claim's statements in a caller's transaction, as
// [call] runs them on the pool, but always on the caller's goroutine (a
// transaction is not safe for concurrent use, so it is never left to a
// goroutine of its own): within the store's Timeout, errors wrapped in
// ErrUnavailable. Its statements are the claim's own with every now()
// read as statement_timestamp(): the marker row, the ID's layout-1 key
// and expiry by the database's clock are checked as in autocommit. The
// inserted or taken-over row is the transaction's until it ends: a claim
// of the same ID by another session waits for it (bounded by that
// store's Timeout), then reports the ID taken if it committed, or claims
// it if it rolled back. A statement that fails aborts the caller's
// transaction.
func claimInTx[T any](s *Store, ctx context.Context, fn func(ctx context.Context) (T, error)) (T, error) {
	return callIn(s, ctx, true, fn)
}
