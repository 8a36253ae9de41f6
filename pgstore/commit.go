package pgstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/ctoken/ctoken/replay"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Commit sends, in one round trip (a pipeline), SET CONSTRAINTS ALL
// IMMEDIATE, the fence statement, the synchronous_commit statement and
// COMMIT (see [immediateSQL] and [syncCommitSQL] for why the first and
// third). The fence updates the lease row to done only where it is still
// token's live lease by statement_timestamp() (now() would be the
// transaction's start, long before), and fails with an error when it
// matched no row: PostgreSQL then skips the COMMIT of the pipeline, and
// the transaction, aborted, is rolled back. So the work's writes commit
// only together with the done row.
//
// Why the fence is sound against a concurrent takeover: the fence's
// UPDATE takes the lease row's lock. A takeover by another holder (the
// acquire's UPDATE … WHERE until <= now()) that comes after it waits for
// that lock and, once the transaction ends, checks its condition again on
// the row's newest version: after a commit that is the done row, whose
// until is in the future, so it takes nothing over; after a rollback it
// is the expired lease, which it takes. A takeover that came first holds
// the lock until it commits, and the fence, waiting for it, checks again
// on the taken-over row, whose token is not its own: no row matches, and
// the work is rolled back. Either the fence or the takeover wins, never
// both.

// immediateSQL is sent before the fence of a work whose handler ran
// statements: every deferred trigger of the transaction (a handler's
// constraint trigger or deferrable constraint, INITIALLY DEFERRED or made
// so by its SET CONSTRAINTS) fires now, those already pending during this
// statement and any later one at the end of its statement, instead of at
// COMMIT. So no handler code waits for COMMIT, after the fence and the
// synchronous_commit statement: there it could set synchronous_commit off
// for the commit the store acknowledges. A deferred constraint that fails
// fails here, before the fence, as any failed statement of the work: the
// transaction is aborted and nothing is committed.
const immediateSQL = "set constraints all immediate"

// syncCommitSQL sets synchronous_commit, for the rest of the transaction
// (its COMMIT), to the level New or the last recheck accepted ($1), so a
// handler's SET LOCAL synchronous_commit = off (or set_config) cannot make
// the acknowledged commit one a crash forgets. It is a statement of its
// own, after the fence, and not part of the fence: the fence's write may
// fire a trigger on the store's table, whose AFTER triggers run at the
// end of the fence statement, after its select list. Nothing it does can
// fire a trigger, and nothing runs between it and COMMIT but deferred
// triggers, of which [immediateSQL] leaves none (unless a trigger
// function itself runs SET CONSTRAINTS ... DEFERRED and writes again).
// Called by its schema, as the fence's functions are.
const syncCommitSQL = "select pg_catalog.set_config('synchronous_commit', $1::pg_catalog.text, true)"

// errFence is the text the fence statement fails with when it matched no
// row: the reason follows it.
const errFence = "ctoken_fence_"

// commit is Commit's first call.
func (w *work) commit(ctx context.Context, until time.Time, fingerprint, result []byte) error {
	w.stop()
	refuse := func(err error) error {
		// A refusal before the fence reports the work rolled back only
		// once the transaction is the one the work began: had the
		// handler's SQL replaced it, the writes before may be committed.
		// In a transaction that is not aborted the session's own id
		// says so; in an aborted one, whether the work's committed.
		if w.begun && !w.escaped() && w.conn.PgConn().TxStatus() == 'T' {
			if same, qerr := w.sameTx(ctx); qerr == nil && !same {
				w.rollback(ctx)
				return w.spend(ctx, until)
			}
		}
		aborted := w.begun && w.conn.PgConn().TxStatus() == 'E'
		w.rollback(ctx)
		if aborted {
			if escaped, cerr := w.committedBefore(ctx); cerr != nil {
				return fmt.Errorf("%w: whether the work's transaction was committed by SQL before is unknown: %w", ErrUnavailable, cerr)
			} else if escaped {
				return w.spend(ctx, until)
			}
		}
		return err
	}
	if w.escaped() {
		// The fence would run outside the work's transaction. Checked
		// first: the writes before the COMMIT sent as SQL are kept, so
		// no refusal below may report the work as rolled back.
		refuse(nil)
		return w.spend(ctx, until)
	}
	if w.refusal != nil {
		// A statement of the handler was refused before it was sent:
		// nothing escaped, and the transaction is rolled back.
		return refuse(fmt.Errorf("%w: %w: %w", ErrUnavailable, replay.ErrRolledBack, w.refusal))
	}
	if fingerprint != nil || result != nil {
		if err := replay.CheckRecord(fingerprint, result); err != nil {
			return refuse(fmt.Errorf("%w: %w: %w", ErrInvalidClaim, replay.ErrRolledBack, err))
		}
		if fingerprint == nil {
			fingerprint = []byte{}
		}
	}
	if err := w.s.refused(); err != nil {
		return refuse(fmt.Errorf("%w: %w", replay.ErrRolledBack, err))
	}
	type outcome struct {
		reason string // the fence's refusal, when it matched no row
		tag    string // COMMIT's command tag
		state  byte   // the session's transaction status after the pipeline
		// refused: the server answered the fence or COMMIT with an
		// error, so nothing was committed.
		refused bool
		err     error // returned in the outcome: call would drop the rest
	}
	started := w.claimEnd()
	o, err := call(w.s, ctx, func(ctx context.Context) (outcome, error) {
		if !started() {
			return outcome{}, nil
		}
		var o outcome
		// BEGIN or SET CONSTRAINTS, the fence, synchronous_commit, COMMIT
		// and the reset: room for all of them at once (no growth of the
		// queue as each is added).
		b := &pgx.Batch{QueuedQueries: make([]*pgx.QueuedQuery, 0, 4+len(resetStatements))}
		var xid *int64 // NULL: BEGIN is in this pipeline, just before the fence
		if !w.begun {
			b.Queue(beginSQL) // a work that wrote nothing: BEGIN in the same round trip
		} else {
			xid = &w.xid
			b.Queue(immediateSQL) // the handler's deferred triggers fire before the fence
		}
		fence := w.s.fenceSQL
		if w.locked {
			fence = w.s.lockedFenceSQL
		}
		args := []any{w.key, w.token, pgTime(until), fingerprint, result, xid}
		if w.locked {
			args = append(args, w.leaseUS)
		}
		b.Queue(fence, args...)
		b.Queue(syncCommitSQL, w.s.commitSetting())
		b.Queue("commit")
		if w.begun {
			// The handler ran statements: its session is reset in the
			// same round trip, after COMMIT.
			for _, sql := range resetStatements {
				b.Queue(sql)
			}
		}
		br := w.conn.SendBatch(ctx, b)
		// beforeErr is BEGIN's or SET CONSTRAINTS' error: a handler's
		// deferred constraint that failed, or a statement of the work
		// that had failed before. An error of the pipeline is answered
		// again to every later statement of it.
		_, beforeErr := br.Exec()
		var zero int
		fenceErr := br.QueryRow().Scan(&zero)
		ownFenceErr := beforeErr == nil // fenceErr is the fence's own
		var setting string
		if err := br.QueryRow().Scan(&setting); fenceErr == nil {
			fenceErr = err // refused before COMMIT ran, as the fence
		}
		if fenceErr == nil {
			fenceErr = beforeErr
		}
		tag, commitErr := br.Exec()
		var resetErr error
		if w.begun {
			for range resetStatements {
				if _, err := br.Exec(); err != nil && resetErr == nil {
					resetErr = err
				}
			}
		}
		closeErr := br.Close()
		o.tag = tag.String()
		o.state = w.conn.PgConn().TxStatus()
		clean := resetErr == nil && closeErr == nil
		if resetErr != nil && errors.Is(closeErr, resetErr) {
			// The reset failed after COMMIT's answer (a statement the
			// handler prepared by SQL, see resetSQL): the session is
			// closed, not pooled, and COMMIT's outcome stands.
			closeErr = nil
		}
		if o.state == 'E' {
			// The server refused a statement (the fence, or one of the
			// work before it) and skipped the rest: the transaction is
			// aborted. Roll it back, and reset the session, so the
			// connection can be pooled.
			_, err := w.conn.PgConn().Exec(ctx, "rollback;"+resetSQL).ReadAll()
			clean = err == nil
		}
		w.put(ctx, clean)
		var pgErr *pgconn.PgError
		if ownFenceErr && errors.As(fenceErr, &pgErr) && strings.Contains(pgErr.Message, errFence) {
			// (Only the fence's: a handler's deferred trigger, firing
			// at SET CONSTRAINTS, may fail with any text.)
			i := strings.Index(pgErr.Message, errFence) + len(errFence)
			o.reason = strings.TrimRightFunc(pgErr.Message[i:], func(r rune) bool { return r < 'a' || r > 'z' })
			return o, nil
		}
		o.refused = commitRefused(fenceErr, commitErr)
		o.err = errors.Join(fenceErr, commitErr, closeErr)
		return o, nil
	})
	w.closeUnlessStarted(started)
	if err == nil && o.err != nil {
		err = fmt.Errorf("%w: %w", ErrUnavailable, o.err)
		if ctxErr := ctx.Err(); ctxErr != nil && !errors.Is(o.err, ctxErr) {
			err = fmt.Errorf("%w: %w (%w)", ErrUnavailable, ctxErr, o.err)
		}
	}
	switch {
	case o.reason == "escaped":
		// The fence ran in another transaction than the one the work
		// began: the handler's SQL ended the work's (its writes before
		// that may be committed) and began another (rolled back with the
		// fence).
		return w.spend(ctx, until)
	case o.reason == "lost":
		return replay.ErrLeaseLost
	case o.reason == "forgotten":
		return fmt.Errorf("%w: %w: %w", ErrUnavailable, replay.ErrRolledBack, ErrForgotten)
	case o.reason == "expired":
		return fmt.Errorf("%w: %w: %w: until is not after the database's clock", ErrInvalidClaim, replay.ErrRolledBack, replay.ErrExpired)
	case o.reason != "":
		return fmt.Errorf("%w: %w: unexpected refusal from the fence statement", ErrUnavailable, replay.ErrRolledBack)
	case err != nil && o.refused:
		// The server answered with an error (SET CONSTRAINTS, refused by
		// a handler's deferred constraint, or the fence, because a
		// statement of the work had failed, or COMMIT): nothing was
		// committed by this pipeline.
		// Unless the work's transaction itself was committed by SQL
		// before (an escape followed by a failed statement, which the
		// fence cannot tell from a failed statement of the work).
		if escaped, cerr := w.committedBefore(ctx); cerr != nil || escaped {
			if cerr != nil {
				return fmt.Errorf("%w; whether the work's transaction was committed by SQL before is unknown: %w", err, cerr)
			}
			return w.spend(ctx, until)
		}
		return fmt.Errorf("%w: %w: %w", err, replay.ErrRolledBack, pgx.ErrTxCommitRollback)
	case err != nil:
		return err // the outcome is unknown
	case o.tag == "ROLLBACK":
		return fmt.Errorf("%w: %w: %w", ErrUnavailable, replay.ErrRolledBack, pgx.ErrTxCommitRollback)
	case o.tag != "COMMIT" || o.state != 'I':
		return fmt.Errorf("%w: unexpected answer to COMMIT", ErrUnavailable)
	}
	return nil
}

// spend ends a work whose transaction the handler's SQL ended (see
// [errEscaped]): the writes it sent before may be committed, without the
// done row. So that the work never runs again beside them, it records the
// key as done without a record, in a transaction of its own, while the
// lease is still token's (or has ended untaken): a retry of an idempotency
// key is then answered as a request whose response was not stored, a
// retried webhook delivery as done. The error it returns matches
// [ErrUnavailable] and errEscaped, never [replay.ErrRolledBack] or
// [replay.ErrLeaseLost]: the holder must neither release the key nor run
// the work again. When the key could not be recorded (the lease was taken
// over, the store unreachable) the error says so as well.
func (w *work) spend(ctx context.Context, until time.Time) error {
	escaped := fmt.Errorf("%w: %w", ErrUnavailable, errEscaped)
	if ctx != nil && ctx.Err() != nil {
		ctx = context.WithoutCancel(ctx)
	}
	type confirmed struct{ marker, future, done bool }
	c, err := call(w.s, ctx, func(ctx context.Context) (confirmed, error) {
		var c confirmed
		err := w.s.pool.QueryRow(ctx, w.s.confirmSQL, w.key, w.token, pgTime(until), nil, nil).Scan(&c.marker, &c.future, &c.done)
		return c, err
	})
	switch {
	case err != nil:
		return fmt.Errorf("%w; recording the key as done failed: %w", escaped, err)
	case !c.done:
		return fmt.Errorf("%w; the key could not be recorded as done (the lease was taken over, the table forgot its claims, or until has passed)", escaped)
	}
	return fmt.Errorf("%w; the key is recorded as done without a record", escaped)
}

// committedBefore reports whether the transaction the work began was
// committed (by SQL of the handler sent past the Tx's refusals): its id's
// status, read on the pool, is committed. Asked only when the work failed
// in an aborted transaction, where the session cannot tell its own id.
func (w *work) committedBefore(ctx context.Context) (bool, error) {
	if !w.begun {
		return false, nil
	}
	if ctx != nil && ctx.Err() != nil {
		ctx = context.WithoutCancel(ctx)
	}
	status, err := call(w.s, ctx, func(ctx context.Context) (string, error) {
		var status *string
		err := w.s.pool.QueryRow(ctx, "select txid_status($1::bigint)", w.xid).Scan(&status)
		if status == nil {
			return "", err
		}
		return *status, err
	})
	return status == "committed", err
}

// commitSetting is the synchronous_commit a work's COMMIT runs with: the
// one New or the last recheck read and accepted.
func (s *Store) commitSetting() string {
	if c := s.Durability().SynchronousCommit; c != "" {
		return c
	}
	return "on"
}

// commitRefused reports whether the errors of the fence and of COMMIT, in
// the pipeline that ends a work, prove that nothing was committed. Any
// error the server answered to the fence (or to the statements around it
// before COMMIT: BEGIN or SET CONSTRAINTS, synchronous_commit) does: their
// results come before COMMIT runs, so the transaction was aborted, or the
// session ended, before COMMIT. Of COMMIT, only an ERROR does (a deferred
// constraint, a statement of the work that had failed):
// PostgreSQL turns any error after the commit record into a PANIC, and a
// FATAL or PANIC ends the session at a moment the message does not tell
// (before version 14 a server's crash or immediate shutdown sends FATAL to
// every session, also one whose commit was already written), so the commit
// may have happened.
func commitRefused(fenceErr, commitErr error) bool {
	var pgErr *pgconn.PgError
	if errors.As(fenceErr, &pgErr) {
		return true
	}
	if !errors.As(commitErr, &pgErr) {
		return false
	}
	severity := pgErr.SeverityUnlocalized
	if severity == "" {
		severity = pgErr.Severity // a server before 9.6
	}
	return severity == "ERROR"
}
