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

// WorkAcquirer is an optional interface of a [Transactor] that is also a
// [Recorder] and can take a lease inside the work's own transaction, so
// that a first request costs one durable commit (the work's, with its
// record) instead of two (the lease's, then the work's). The lease is
// held by the open transaction itself, not by a committed entry: it lasts
// until the Work ends, whatever its duration, and ends with the
// transaction when the holder's process or connection dies, with nothing
// of the work kept.
//
// Implementations agree with [Recorder.AcquireRecord] and
// [Leaser.AcquireLease] on the same store: while a Work of AcquireWork
// holds id, those report id busy, and while their lease is live
// AcquireWork does; at most one holder's work is ever committed for id.
type WorkAcquirer interface {
	Transactor
	Recorder

	// AcquireWork is [Recorder.AcquireRecord] whose lease is a Work: for
	// [LeaseAcquired] it returns the Work, open, holding id for the
	// caller until its Commit or Rollback (Rollback frees id: no
	// [Leaser.ReleaseLease] is needed, and one with the returned Token
	// changes nothing); Commit records id as done with fingerprint and
	// result in the work's transaction, and fails with [ErrLeaseLost],
	// keeping nothing, once lease has passed since the transaction
	// began, by the store's clock. For [LeaseBusy] and [LeaseDone]
	// it returns no Work and the Record AcquireRecord would, except that
	// for a holder whose own work has not committed, Fingerprint cannot
	// be read: it is then empty when the holder's request may be the
	// same one, and a value that differs from fingerprint when the holder's
	// is known to differ (hash collisions of the store's locks may turn
	// the one answer into the other, never into an acquired lease);
	// [Recorder.AcquireRecord] reports a Work's holder in the same way.
	// An error means no transaction is open and nothing was taken.
	AcquireWork(ctx context.Context, id string, lease time.Duration, fingerprint []byte) (Record, Work, error)
}

// OneWriter is an optional interface of a [Transactor] whose Work holds
// the database's only writer from its start to its end (sqlitestore):
// every other write of the store, on every instance, waits for it. A
// feature whose work may run long (an MCP task's) refuses such a store
// rather than stall every other caller.
type OneWriter interface {
	// WorkHoldsWriter reports whether a Work holds the only writer.
	WorkHoldsWriter() bool
}
