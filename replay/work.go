package replay

import (
	"context"
	"errors"
	"time"
)

// ErrRolledBack reports a [Work.Commit] that the store rolled back for a
// reason it knows, other than a lost lease: a statement of the work had
// failed, the record was refused, the store refused to serve. Nothing of
// the work was kept and the lease was left as it was, so the holder may
// release it at once and let a retry run the work again.
var ErrRolledBack = errors.New("replay: work rolled back")

// Transactor is an optional interface of a [Leaser] whose entries live in
// the same database as the work a lease guards (the pgstore module): the
// work's writes and the end of the lease commit in one transaction, so
// either both are kept or neither is. A lease that ran out and was taken
// by another holder, a process killed before the commit, a client that
// went away: in every case the work and its record commit together, or
// not at all.
type Transactor interface {
	Leaser

	// BeginWork opens a transaction for the holder of token's lease on
	// id (from [Leaser.AcquireLease] or [Recorder.AcquireRecord]). The
	// lease itself stays committed as it is: other holders still see it
	// live (busy) while the transaction runs. An error means no
	// transaction is open; the lease is left as it was.
	BeginWork(ctx context.Context, id, token string) (Work, error)
}

// Work is a transaction opened by [Transactor.BeginWork] for the work a
// lease guards. Its methods are safe to call from several goroutines; the
// first of Commit and Rollback ends it, and every later call is a no-op
// that returns the first outcome's error or nil.
type Work interface {
	// Context returns ctx carrying the transaction, where the store's own
	// accessor (pgstore.TxFrom) finds it for the work's writes. Once the
	// Work has ended, the transaction found there refuses every
	// statement.
	Context(ctx context.Context) context.Context

	// Commit ends the lease in the transaction and commits: it checks,
	// by the store's clock, that token's lease on id is still live and
	// the holder's; records id as done until the given time, with
	// fingerprint and result as [Recorder.ConfirmRecord] does (both nil:
	// no record, as [Leaser.ConfirmLease]); then commits the work's writes
	// with it. It returns [ErrLeaseLost] when the lease is no longer the
	// holder's: the transaction was rolled back and nothing of the work
	// is kept. Any other error leaves the outcome unknown (the commit may
	// have happened): the caller must neither release the lease nor
	// report the work as done, and a retry finds the ID either done or,
	// once the lease ends, free — except an error matching
	// [ErrRolledBack], which says that nothing was kept and the lease
	// may be released.
	Commit(ctx context.Context, until time.Time, fingerprint, result []byte) error

	// Rollback discards the work's writes. The lease is left as it is:
	// release it with [Leaser.ReleaseLease], or let it end.
	Rollback(ctx context.Context) error
}
