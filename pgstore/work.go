package pgstore

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/ctoken/ctoken/replay"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The transactional mode ([replay.Transactor]): the work a lease guards
// runs in a transaction on one of the store's connections, and Commit
// ends the lease in that transaction. The lease row itself was written
// and committed by AcquireLease or AcquireRecord, so other holders see it
// live (busy) while the work runs. (A Work of AcquireWork has no lease row
// until its Commit: see lockedwork.go.)
//
// Commit sends, in one round trip (a pipeline), the fence statement and
// COMMIT. The fence updates the lease row to done only where it is still
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

// ErrNoTx reports a context that carries no transaction: [TxFrom] was
// called outside a [replay.Work]'s context (a handler wired without the
// transactional mode) and without [WithTx]. It is returned rather than a
// connection of the pool, so the work is never written outside the
// transaction it must commit with.
var ErrNoTx = errors.New("pgstore: the context carries no transaction (use the transactional mode, or pgstore.WithTx)")

// errTxOwned refuses the handler's Commit or Rollback of the work's
// transaction.
var errTxOwned = errors.New("pgstore: the work's transaction is committed or rolled back by its Work (the middleware), not by the handler: answer a retry status (5xx, 429, 408) to roll it back")

// errCursorOpen refuses a statement while a Rows or BatchResults of the
// same transaction is open, as pgx refuses one on a busy connection.
var errCursorOpen = errors.New("pgstore: a Rows or BatchResults of the work's transaction is still open: close it first")

// errForeign refuses a [Store.Claim] whose context carries a transaction
// ([WithTx]) on another database or another server than the store's: the
// claim would be written where the store never reads it. The claim's
// statement fails, aborting that transaction; nothing is claimed. It
// matches [ErrConfig].
var errForeign = fmt.Errorf("%w: the transaction of the context (pgstore.WithTx) is on another database or server than the store's", ErrConfig)

// errForeignTx is the text a claim's statement fails with in a
// transaction on another database or server.
const errForeignTx = "ctoken_foreign_tx"

// errFence is the text the fence statement fails with when it matched no
// row: the reason follows it.
const errFence = "ctoken_fence_"

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
// synchronous_commit [New] accepted, whatever SET LOCAL the handler sent.
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

var (
	_ replay.Transactor   = (*Store)(nil)
	_ replay.WorkAcquirer = (*Store)(nil)
)

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

// prepareWork writes the fence statement and the claim statements run
// inside a caller's transaction, where now() is the transaction's start:
// there every deadline is read by statement_timestamp(), the database's
// clock when the statement starts, as now() reads it in autocommit.
func (s *Store) prepareWork() {
	t := s.table
	// $1 key, $2 token, $3 until, $4 fingerprint, $5 result. The first
	// reason that applies is reported: the table forgot its claims, until
	// is not after the database's clock, the lease is no longer live and
	// the holder's.
	//
	// $6 is the transaction id the work's BEGIN read (NULL when BEGIN is
	// sent in the fence's own pipeline): a fence that runs in any other
	// transaction (the handler's SQL ended the work's and began another)
	// matches no row and fails as escaped, checked first, in the same
	// statement. $7 is the synchronous_commit New and the recheck
	// accepted, set for the rest of the transaction (its COMMIT), so a
	// handler's SET LOCAL synchronous_commit = off cannot make the commit
	// the middleware acknowledges one a crash forgets.
	s.fenceSQL = `WITH x AS (SELECT $6::bigint IS NULL OR txid_current() = $6::bigint AS same),
m AS (SELECT 1 FROM ` + t + ` WHERE key = ` + markerSQL + ` AND state = 'm' AND until <= statement_timestamp() AND ` + historyGuardSQL + `),
up AS (
  UPDATE ` + t + ` SET state = 'd', until = $3::timestamptz, fingerprint = $4::bytea, result = $5::bytea
  WHERE key = $1::bytea AND state = 'l' AND token = $2::text AND until > statement_timestamp()
    AND $3::timestamptz > statement_timestamp() AND EXISTS (SELECT 1 FROM m) AND (SELECT same FROM x)
  RETURNING 1
)
SELECT CASE WHEN EXISTS (SELECT 1 FROM up) THEN 0
  ELSE (CASE WHEN NOT (SELECT same FROM x) THEN '` + errFence + `escaped'
    WHEN NOT EXISTS (SELECT 1 FROM m) THEN '` + errFence + `forgotten'
    WHEN $3::timestamptz <= statement_timestamp() THEN '` + errFence + `expired'
    ELSE '` + errFence + `lost' END)::int END,
  set_config('synchronous_commit', $7::text, true)`
	// A claim in a caller's transaction also checks, in its own
	// statement, that the transaction is on the store's database ($4) of
	// the store's server ($5, its system identifier, $6 and $7, its port
	// and address): on another, the
	// statement fails (aborting the caller's transaction) instead of
	// writing the claim into a table the store never reads.
	guard := `,
  (CASE WHEN current_database() = $4::text AND (SELECT system_identifier FROM pg_control_system()) = $5::bigint
      AND inet_server_port() IS NOT DISTINCT FROM $6::int AND inet_server_addr()::text IS NOT DISTINCT FROM $7::text
    THEN '0' ELSE '` + errForeignTx + `' END)::int`
	s.claimTxSQL = strings.ReplaceAll(s.claimSQL, "now()", "statement_timestamp()") + guard
	s.takeoverTxSQL = strings.ReplaceAll(s.takeoverSQL, "now()", "statement_timestamp()") + guard
}

// BeginWork implements [replay.Transactor]: it takes a connection of the
// store's pool, whose sessions [New] and the recheck check, for a
// transaction (read committed) of the work guarded by token's lease on
// id. BEGIN is sent in the round trip of the work's first statement when
// that is an Exec or Query with arguments (on its own before any other
// first statement, and with Commit's fence for a work that wrote
// nothing), so BeginWork itself sends nothing: it does not read the
// lease, which the Work's Commit checks in the transaction. An empty or
// oversize id is refused with [ErrInvalidClaim], a token this store never
// minted with [replay.ErrLeaseLost], and while a recheck refuses (see
// [New]) the call fails with its reason; otherwise errors match
// [ErrUnavailable]. In every error case no transaction is open and the
// lease is left as it was.
//
// The Work holds its connection until Commit or Rollback: call Rollback
// (a no-op after Commit) in a defer. The store's Timeout bounds BeginWork,
// Commit and Rollback, not the work between them.
func (s *Store) BeginWork(ctx context.Context, id, token string) (replay.Work, error) {
	if err := checkID(id); err != nil {
		return nil, err
	}
	if !validToken(token) {
		return nil, replay.ErrLeaseLost
	}
	if s.pool == nil {
		return nil, fmt.Errorf("%w: zero Store (use pgstore.New)", ErrConfig)
	}
	if err := s.refused(); err != nil {
		return nil, err
	}
	if ctx == nil {
		ctx = context.Background()
	}
	if s.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.timeout)
		defer cancel()
	}
	// Only a connection is taken now (pgxpool honours ctx whatever the
	// context watcher); BEGIN is sent with the work's first statement.
	pc, err := s.pool.Acquire(ctx)
	if err != nil {
		if ctxErr := ctx.Err(); ctxErr != nil && !errors.Is(err, ctxErr) {
			return nil, fmt.Errorf("%w: %w (%w)", ErrUnavailable, ctxErr, err)
		}
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	w := &work{s: s, key: s.key(id), token: token, pc: pc, conn: pc.Conn()}
	w.tx = &workTx{w: w}
	return w, nil
}

// work is the [replay.Work] of BeginWork.
type work struct {
	s     *Store
	key   []byte
	token string
	tx    *workTx // the handler's view of the transaction

	// mu serialises every use of conn by the handler's transaction
	// (workTx, its savepoints, Rows and BatchResults) and the Work's end:
	// once ended is set, nothing but the end touches conn.
	mu       sync.Mutex
	pc       *pgxpool.Conn
	conn     *pgx.Conn
	ended    bool
	locked   bool     // of AcquireWork: the lease is the transaction's advisory lock, no row
	leaseUS  int64    // of AcquireWork: the lease, in microseconds from BEGIN
	begun    bool     // BEGIN was sent and succeeded
	xid      int64    // the transaction id BEGIN's round trip read (when begun)
	refusal  error    // the first statement of the handler refused unsent (see refusedStatement)
	prepared []string // the names the handler prepared (Prepare), deallocated at the end
	open     []cursor // Rows and BatchResults not yet closed, oldest first
	savepts  int64    // savepoints begun

	endOnce sync.Once
	endErr  error
}

// cursor is an open Rows or BatchResults of the transaction.
type cursor interface{ closeLocked() }

// Context implements [replay.Work]: ctx carrying the handler's
// transaction, which [TxFrom] returns.
func (w *work) Context(ctx context.Context) context.Context {
	return WithTx(ctx, w.tx)
}

// Commit implements [replay.Work]: the fence statement and COMMIT, in
// one round trip (see the comment at the top of this file). It returns
// nil once both the work and the done row are committed;
// [replay.ErrLeaseLost] when the lease is no longer token's live lease by
// the database's clock when the fence runs (rolled back); an error
// matching [ErrInvalidClaim] and [replay.ErrExpired] for an until not
// after the database's clock, or [ErrInvalidClaim] and
// [replay.ErrTooLarge] for a record over the limits of
// [Store.ConfirmRecord] (checked before anything is sent; rolled back);
// an error matching [ErrUnavailable] and [ErrForgotten] when the table
// lost its marker row (rolled back), matching [ErrUnavailable] and
// [pgx.ErrTxCommitRollback] when a statement of the work had failed, so
// the transaction was aborted and rolled back; and any other error,
// matching [ErrUnavailable], when the outcome is unknown (the connection
// was lost, or the deadline passed, while COMMIT was under way): then
// neither release the lease nor report the work as done. fingerprint and
// result both nil write no record, as [Store.ConfirmLease]. With a ctx
// already done, Commit (as Rollback) closes the connection instead, which
// ends the transaction without a commit, and returns an error matching
// [ErrUnavailable] and the context's error.
func (w *work) Commit(ctx context.Context, until time.Time, fingerprint, result []byte) error {
	w.endOnce.Do(func() { w.endErr = w.commit(ctx, until, fingerprint, result) })
	return w.endErr
}

// Rollback implements [replay.Work]: it rolls the work back and returns
// the connection to the pool; the lease is left as it is. An error
// (matching [ErrUnavailable]) means the ROLLBACK statement failed: the
// connection is then closed, which also ends the transaction without a
// commit, so the work is discarded either way.
func (w *work) Rollback(ctx context.Context) error {
	w.endOnce.Do(func() {
		w.stop()
		w.endErr = w.rollback(ctx)
	})
	return w.endErr
}

// rollback rolls the transaction back, if it was begun, and returns the
// connection to the pool (after stop).
func (w *work) rollback(ctx context.Context) error {
	if !w.begun {
		w.pc.Release()
		return nil
	}
	sql := "rollback;" + resetSQL
	if w.escaped() {
		sql = resetSQL // the handler's SQL ended the transaction
	}
	started := w.claimEnd()
	err := w.s.run(ctx, func(ctx context.Context) error {
		if !started() {
			return nil
		}
		_, err := w.conn.PgConn().Exec(ctx, sql).ReadAll()
		w.put(ctx, err == nil)
		return err
	})
	w.closeUnlessStarted(started)
	return err
}

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
const resetSQL = "reset all; set session authorization default; close all; unlisten *; select pg_advisory_unlock_all(); discard temp; discard sequences"

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

// claimEnd returns a func that reports true to the first of its callers
// only: the statement that ends the work calls it when it starts, and
// closeUnlessStarted after [call] returned, so exactly one of them
// releases the connection, even when call returned before running the
// statement (a context already done) or while it runs on a goroutine of
// its own (see [call]).
func (w *work) claimEnd() func() bool {
	var once atomic.Bool
	return func() bool { return once.CompareAndSwap(false, true) }
}

// closeUnlessStarted closes the work's connection, without a commit,
// when the statement meant to end the transaction never started: a
// session that ends rolls its transaction back.
func (w *work) closeUnlessStarted(started func() bool) {
	if started() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		w.pc.Hijack().Close(ctx)
	}
}

// stop ends the handler's use of the transaction: it waits for a
// statement under way, closes the open Rows and BatchResults, and makes
// every later statement fail.
func (w *work) stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.ended = true
	for i := len(w.open) - 1; i >= 0; i-- {
		w.open[i].closeLocked()
	}
	w.open = nil
}

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
			// On the caller's goroutine: the rollback below uses the
			// same connection, which must not still be in use.
			same, qerr := callIn(w.s, ctx, true, func(ctx context.Context) (bool, error) {
				var same bool
				err := w.conn.QueryRow(ctx, "select txid_current() = $1::bigint", w.xid).Scan(&same)
				return same, err
			})
			if qerr == nil && !same {
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
		// BEGIN, the fence, COMMIT and the reset: room for all of them at
		// once (no growth of the queue as each is added).
		b := &pgx.Batch{QueuedQueries: make([]*pgx.QueuedQuery, 0, 3+len(resetStatements))}
		var xid *int64 // NULL: BEGIN is in this pipeline, just before the fence
		if !w.begun {
			b.Queue(beginSQL) // a work that wrote nothing: BEGIN in the same round trip
		} else {
			xid = &w.xid
		}
		fence := w.s.fenceSQL
		if w.locked {
			fence = w.s.lockedFenceSQL
		}
		args := []any{w.key, w.token, pgTime(until), fingerprint, result, xid, w.s.commitSetting()}
		if w.locked {
			args = append(args, w.leaseUS)
		}
		b.Queue(fence, args...)
		b.Queue("commit")
		if w.begun {
			// The handler ran statements: its session is reset in the
			// same round trip, after COMMIT.
			for _, sql := range resetStatements {
				b.Queue(sql)
			}
		}
		br := w.conn.SendBatch(ctx, b)
		var beginErr error
		if !w.begun {
			_, beginErr = br.Exec()
		}
		var zero int
		var setting string
		fenceErr := br.QueryRow().Scan(&zero, &setting)
		if fenceErr == nil {
			fenceErr = beginErr
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
		if errors.As(fenceErr, &pgErr) && strings.Contains(pgErr.Message, errFence) {
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
		// The server answered with an error (the fence, refused because a
		// statement of the work had failed, or COMMIT, refused by a
		// deferred constraint): nothing was committed by this pipeline.
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
// error the server answered to the fence (or to the BEGIN before it) does:
// the fence's results come before COMMIT runs, so the transaction was
// aborted, or the session ended, before COMMIT. Of COMMIT, only an ERROR
// does (a deferred constraint, a statement of the work that had failed):
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

// errEnded refuses a statement after the Work's end.
var errEnded = fmt.Errorf("pgstore: the work has ended: %w", pgx.ErrTxClosed)

// workTx is the handler's view of a Work's transaction (sp == 0) or of a
// savepoint in it (sp > 0). Every method holds w.mu while it uses the
// connection.
type workTx struct {
	w      *work
	sp     int64
	closed bool // a savepoint committed or rolled back (under w.mu)
}

var _ pgx.Tx = (*workTx)(nil)

// usable reports why t may not send a statement now (under w.mu).
func (t *workTx) usable() error {
	switch {
	case t.w.ended:
		return errEnded
	case t.closed:
		return pgx.ErrTxClosed
	case len(t.w.open) > 0:
		return errCursorOpen
	case t.w.escaped():
		return errEscaped
	}
	return nil
}

// beginSQL begins the work's transaction.
const beginSQL = "begin isolation level read committed"

// errEscaped refuses every statement of a transaction that a statement of
// the work itself has ended (SQL sent past the Tx's refusals, see
// [TxFrom]): what follows would run outside it. Commit reports it when the
// fence finds itself in another transaction than the work's.
var errEscaped = errors.New("pgstore: the work's transaction was ended by a statement of the work (COMMIT or ROLLBACK sent as SQL): its writes may be committed without the done row")

// escaped reports whether the transaction, once begun, was ended by a
// statement of the work (under w.mu).
func (w *work) escaped() bool {
	return w.begun && w.conn.PgConn().TxStatus() == 'I'
}

// xidSQL reads the transaction's id in BEGIN's round trip: the fence
// checks it (see [Store.prepareWork]).
const xidSQL = "select txid_current()"

// beginLocked sends BEGIN alone, before a statement that cannot carry it
// in its round trip (under w.mu).
func (w *work) beginLocked(ctx context.Context) error {
	if w.begun {
		return nil
	}
	b := &pgx.Batch{}
	b.Queue(beginSQL)
	b.Queue(xidSQL)
	br := w.conn.SendBatch(ctx, b)
	_, beginErr := br.Exec()
	err := br.QueryRow().Scan(&w.xid)
	closeErr := br.Close()
	// BEGIN succeeded: the transaction is open (aborted, should the read
	// of its id have failed, so the fence cannot pass).
	w.begun = beginErr == nil
	return errors.Join(beginErr, err, closeErr)
}

// refuseLocked returns why sql may not be sent in the transaction (see
// [refusedStatement]), and keeps the first such refusal, which makes
// Commit roll the work back (under w.mu).
func (w *work) refuseLocked(sql string) error {
	err := refusedStatement(sql)
	if err != nil && w.refusal == nil {
		w.refusal = err
	}
	return err
}

// simpleProtocol reports whether the connection's default exec mode is
// the simple protocol, which sends a batch's statements, and a
// statement's interpolated arguments, as one string that may hold
// several statements.
func (w *work) simpleProtocol() bool {
	return w.s.simple
}

// extended returns args with pgx's exec mode set to one of the extended
// protocol, which sends one statement per string (the server refuses a
// string of several), and plain: the statement has neither arguments nor
// per-call options, so pgx would send it with the simple protocol
// whatever the mode (Exec then sends it with [pgconn.PgConn.ExecParams]).
func (w *work) extended(args []any) (out []any, plain bool) {
	simple := w.simpleProtocol()
	n := 0 // the leading options
options:
	for _, a := range args {
		switch a := a.(type) {
		case pgx.QueryExecMode:
			simple = a == pgx.QueryExecModeSimpleProtocol
		case pgx.QueryRewriter:
		default:
			break options
		}
		n++
	}
	plain = n == len(args)
	if !simple {
		return args, plain
	}
	out = append(make([]any, 0, len(args)+1), pgx.QueryExecModeExec)
	for i, a := range args {
		if _, isMode := a.(pgx.QueryExecMode); !isMode || i >= n {
			out = append(out, a)
		}
	}
	return out, plain
}

// rewrite applies the query rewriters among args's leading options (as
// pgx would, for example [pgx.NamedArgs]) and returns the statement and
// the arguments that remain, with the exec modes among the options.
func (w *work) rewrite(ctx context.Context, sql string, args []any) (string, []any, error) {
	var opts []any
	for len(args) > 0 {
		switch a := args[0].(type) {
		case pgx.QueryExecMode:
			opts = append(opts, a)
		case pgx.QueryRewriter:
			var err error
			if sql, args, err = a.RewriteQuery(ctx, w.conn, sql, args[1:]); err != nil {
				return "", nil, fmt.Errorf("rewrite query failed: %w", err)
			}
			continue
		default:
			return sql, append(opts, args...), nil
		}
		args = args[1:]
	}
	return sql, opts, nil
}

// pipelines reports whether a statement with args can be queued in a
// pgx.Batch behind BEGIN: not without arguments (pgx sends those with
// the simple protocol, which allows several statements in one string),
// nor with pgx's per-call options (an exec mode or a query rewriter), nor
// on a connection whose batches use the simple protocol.
func (w *work) pipelines(args []any) bool {
	if len(args) == 0 || w.simpleProtocol() {
		return false
	}
	switch args[0].(type) {
	case pgx.QueryExecMode, pgx.QueryRewriter:
		return false
	}
	return true
}

// Begin starts a savepoint in the transaction, which the handler may
// commit (RELEASE SAVEPOINT) or roll back (ROLLBACK TO SAVEPOINT).
func (t *workTx) Begin(ctx context.Context) (pgx.Tx, error) {
	w := t.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := t.usable(); err != nil {
		return nil, err
	}
	if err := w.beginLocked(ctx); err != nil {
		return nil, err
	}
	w.savepts++
	n := w.savepts
	if _, err := w.conn.Exec(ctx, "savepoint ctoken_sp_"+strconv.FormatInt(n, 10)); err != nil {
		return nil, err
	}
	return &workTx{w: w, sp: n}, nil
}

// Commit of the Work's transaction is refused (its Work commits it); of a
// savepoint, it releases the savepoint.
func (t *workTx) Commit(ctx context.Context) error {
	return t.end(ctx, "release savepoint ctoken_sp_")
}

// Rollback of the Work's transaction is refused (answer a retry status to
// roll it back); of a savepoint, it rolls back to the savepoint.
func (t *workTx) Rollback(ctx context.Context) error {
	return t.end(ctx, "rollback to savepoint ctoken_sp_")
}

func (t *workTx) end(ctx context.Context, sql string) error {
	if t.sp == 0 {
		return errTxOwned
	}
	w := t.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := t.usable(); err != nil {
		return err
	}
	t.closed = true
	_, err := w.conn.Exec(ctx, sql+strconv.FormatInt(t.sp, 10))
	return err
}

// Exec runs sql in the transaction, with the extended protocol (one
// statement per string). A statement that would end, replace or outlive
// the transaction is refused unsent, and the Work then rolls back at its
// Commit (see [TxFrom]).
func (t *workTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	w := t.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := t.usable(); err != nil {
		return pgconn.CommandTag{}, err
	}
	if err := w.refuseLocked(sql); err != nil {
		return pgconn.CommandTag{}, err
	}
	if !w.begun && w.pipelines(args) {
		b := &pgx.Batch{}
		b.Queue(beginSQL)
		b.Queue(xidSQL)
		b.Queue(sql, args...)
		br := w.conn.SendBatch(ctx, b)
		_, beginErr := br.Exec()
		xidErr := br.QueryRow().Scan(&w.xid)
		tag, err := br.Exec()
		closeErr := br.Close()
		// BEGIN succeeded, so the statement ran (or failed) in the
		// transaction; had it failed, the statement was skipped.
		w.begun = beginErr == nil
		if err := errors.Join(beginErr, xidErr); err != nil {
			return pgconn.CommandTag{}, err
		}
		if err != nil {
			return pgconn.CommandTag{}, err
		}
		return tag, closeErr
	}
	if err := w.beginLocked(ctx); err != nil {
		return pgconn.CommandTag{}, err
	}
	// pgx sends a statement left without arguments by its rewriter with
	// the simple protocol: rewritten here, it is sent as one statement.
	sql, args, err := w.rewrite(ctx, sql, args)
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	if err := w.refuseLocked(sql); err != nil {
		return pgconn.CommandTag{}, err
	}
	args, plain := w.extended(args)
	if plain {
		r := w.conn.PgConn().ExecParams(ctx, sql, nil, nil, nil, nil).Read()
		return r.CommandTag, r.Err
	}
	return w.conn.Exec(ctx, sql, args...)
}

// Prepare prepares sql on the transaction's connection.
func (t *workTx) Prepare(ctx context.Context, name, sql string) (*pgconn.StatementDescription, error) {
	w := t.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := t.usable(); err != nil {
		return nil, err
	}
	if err := w.refuseLocked(sql); err != nil {
		return nil, err
	}
	if err := w.beginLocked(ctx); err != nil {
		return nil, err
	}
	sd, err := w.conn.Prepare(ctx, name, sql)
	if err == nil && name != "" {
		w.prepared = append(w.prepared, name)
	}
	return sd, err
}

// CopyFrom copies rows into tableName in the transaction.
func (t *workTx) CopyFrom(ctx context.Context, tableName pgx.Identifier, columnNames []string, rowSrc pgx.CopyFromSource) (int64, error) {
	w := t.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := t.usable(); err != nil {
		return 0, err
	}
	if err := w.beginLocked(ctx); err != nil {
		return 0, err
	}
	return w.conn.CopyFrom(ctx, tableName, columnNames, rowSrc)
}

// Query runs sql in the transaction. Until the Rows are closed (or read
// to their end), every other statement of the transaction is refused.
func (t *workTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	w := t.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := t.usable(); err != nil {
		return &workRows{w: w, closed: true, err: err}, err
	}
	if err := w.refuseLocked(sql); err != nil {
		return &workRows{w: w, closed: true, err: err}, err
	}
	var rows pgx.Rows
	var err error
	var owner pgx.BatchResults
	if !w.begun && w.pipelines(args) {
		b := &pgx.Batch{}
		b.Queue(beginSQL)
		b.Queue(xidSQL)
		b.Queue(sql, args...)
		owner = w.conn.SendBatch(ctx, b)
		if _, err := owner.Exec(); err != nil {
			owner.Close()
			return &workRows{w: w, closed: true, err: err}, err
		}
		w.begun = true
		if err := owner.QueryRow().Scan(&w.xid); err != nil {
			owner.Close()
			return &workRows{w: w, closed: true, err: err}, err
		}
		rows, err = owner.Query()
	} else {
		if err := w.beginLocked(ctx); err != nil {
			return &workRows{w: w, closed: true, err: err}, err
		}
		args, _ = w.extended(args)
		rows, err = w.conn.Query(ctx, sql, args...)
	}
	r := &workRows{w: w, rows: rows, owner: owner}
	if err != nil {
		r.closed, r.err = true, err
		rows.Close()
		if owner != nil {
			owner.Close()
		}
		return r, err
	}
	w.open = append(w.open, r)
	return r, nil
}

// QueryRow runs sql in the transaction; the row's Scan reads it.
func (t *workTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	rows, err := t.Query(ctx, sql, args...)
	return &workRow{rows: rows, err: err}
}

// SendBatch sends b in the transaction. Until the BatchResults are
// closed, every other statement of the transaction is refused.
func (t *workTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	w := t.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := t.usable(); err != nil {
		return pgx.FailedBatchResults(b, err)
	}
	if b == nil {
		b = &pgx.Batch{}
	}
	// A batch that begins a transaction of its own (Batch.BeginTx) would
	// send BEGIN inside this one: refused, as pgx's own Tx refuses it.
	// FailedBatchResults tells such a batch by the Tx it carries.
	if pgx.FailedBatchResults(b, nil).Tx() != nil {
		return pgx.FailedBatchResults(b, errors.New("pgstore: Batch.BeginTx cannot be used within the work's transaction"))
	}
	// The simple protocol would send the batch as one string, where one
	// queued statement may hold several.
	if w.simpleProtocol() {
		return pgx.FailedBatchResults(b, errors.New("pgstore: a batch cannot be sent in the work's transaction on a connection whose DefaultQueryExecMode is the simple protocol"))
	}
	for _, q := range b.QueuedQueries {
		if err := w.refuseLocked(q.SQL); err != nil {
			return pgx.FailedBatchResults(b, err)
		}
	}
	if err := w.beginLocked(ctx); err != nil {
		return pgx.FailedBatchResults(b, err)
	}
	br := &workBatch{w: w, br: w.conn.SendBatch(ctx, b)}
	w.open = append(w.open, br)
	return br
}

// LargeObjects returns the large-object API of the transaction, whose
// calls go through this transaction's lock and end.
func (t *workTx) LargeObjects() pgx.LargeObjects {
	return largeObjects(t)
}

// Conn returns nil: the connection is the Work's, and a statement sent on
// it directly would escape the lock and the end of the transaction.
func (t *workTx) Conn() *pgx.Conn { return nil }

// largeObjects returns a pgx.LargeObjects whose calls go through tx. pgx
// builds LargeObjects only from its own transactions (its one field, the
// Tx, is unexported), so this sets that field, after checking once that
// the struct is still exactly that one field (TestWorkTx/large objects pins
// it for the pgx of go.mod). Should a later pgx change the struct, it
// returns the zero LargeObjects, whose calls fail (pgx dereferences its
// nil Tx) rather than bypass the lock.
func largeObjects(tx pgx.Tx) pgx.LargeObjects {
	if !loLayoutOK() {
		return pgx.LargeObjects{}
	}
	var lo pgx.LargeObjects
	*(*pgx.Tx)(unsafe.Pointer(&lo)) = tx
	return lo
}

var loLayoutOK = sync.OnceValue(func() bool {
	t := reflect.TypeFor[pgx.LargeObjects]()
	return t.NumField() == 1 && t.Field(0).Type == reflect.TypeFor[pgx.Tx]() && t.Field(0).Offset == 0 &&
		t.Size() == reflect.TypeFor[pgx.Tx]().Size()
})

// workRows is a Rows of the transaction: every method holds w.mu, and
// once closed (by the handler, at the end of the rows, or by the Work's
// end) it reads nothing more from the connection.
type workRows struct {
	w      *work
	rows   pgx.Rows
	batch  *workBatch       // the BatchResults it came from, if any
	owner  pgx.BatchResults // the batch that sent BEGIN with it, closed with it
	closed bool
	err    error
	tag    pgconn.CommandTag
}

// closeLocked closes r (under w.mu).
func (r *workRows) closeLocked() {
	if r.closed {
		return
	}
	r.closed = true
	r.rows.Close()
	r.tag = r.rows.CommandTag()
	if err := r.rows.Err(); err != nil && r.err == nil {
		r.err = err
	}
	if r.owner != nil {
		if err := r.owner.Close(); err != nil && r.err == nil {
			r.err = err
		}
	}
	if r.w.ended && r.err == nil {
		r.err = errEnded
	}
	r.w.drop(r)
}

// drop removes c from the open cursors (under w.mu).
func (w *work) drop(c cursor) {
	for i, o := range w.open {
		if o == c {
			w.open = append(w.open[:i], w.open[i+1:]...)
			return
		}
	}
}

func (r *workRows) Close() {
	r.w.mu.Lock()
	defer r.w.mu.Unlock()
	r.closeLocked()
}

func (r *workRows) Err() error {
	r.w.mu.Lock()
	defer r.w.mu.Unlock()
	if r.closed {
		return r.err
	}
	return r.rows.Err()
}

func (r *workRows) CommandTag() pgconn.CommandTag {
	r.w.mu.Lock()
	defer r.w.mu.Unlock()
	if r.closed {
		return r.tag
	}
	return r.rows.CommandTag()
}

func (r *workRows) FieldDescriptions() []pgconn.FieldDescription {
	r.w.mu.Lock()
	defer r.w.mu.Unlock()
	if r.closed {
		return nil
	}
	return r.rows.FieldDescriptions()
}

func (r *workRows) Next() bool {
	r.w.mu.Lock()
	defer r.w.mu.Unlock()
	if r.closed {
		return false
	}
	if r.rows.Next() {
		return true
	}
	r.closeLocked()
	return false
}

func (r *workRows) Scan(dest ...any) error {
	r.w.mu.Lock()
	defer r.w.mu.Unlock()
	if r.closed {
		if r.err != nil {
			return r.err
		}
		return pgx.ErrTxClosed
	}
	return r.rows.Scan(dest...)
}

func (r *workRows) Values() ([]any, error) {
	r.w.mu.Lock()
	defer r.w.mu.Unlock()
	if r.closed {
		if r.err != nil {
			return nil, r.err
		}
		return nil, pgx.ErrTxClosed
	}
	return r.rows.Values()
}

// RawValues returns a copy of the current row's raw values: the
// connection's buffer they point into may be reused by the Work's end on
// another goroutine.
func (r *workRows) RawValues() [][]byte {
	r.w.mu.Lock()
	defer r.w.mu.Unlock()
	if r.closed {
		return nil
	}
	raw := r.rows.RawValues()
	out := make([][]byte, len(raw))
	for i, v := range raw {
		if v != nil {
			out[i] = append([]byte{}, v...)
		}
	}
	return out
}

// Conn returns nil, as [workTx.Conn].
func (r *workRows) Conn() *pgx.Conn { return nil }

// TypeMap returns the connection's type map while r is open, nil once
// closed (the map's caches are the connection's, which may have gone
// back to the pool).
func (r *workRows) TypeMap() *pgtype.Map {
	r.w.mu.Lock()
	defer r.w.mu.Unlock()
	if r.closed {
		return nil
	}
	return r.rows.TypeMap()
}

// workRow is QueryRow's Row: Scan reads the first row and closes the rows,
// as pgx's.
type workRow struct {
	rows pgx.Rows
	err  error
}

func (r *workRow) Scan(dest ...any) error {
	if r.err != nil {
		return r.err
	}
	defer r.rows.Close()
	if !r.rows.Next() {
		if err := r.rows.Err(); err != nil {
			return err
		}
		return pgx.ErrNoRows
	}
	if err := r.rows.Scan(dest...); err != nil {
		return err
	}
	r.rows.Close()
	return r.rows.Err()
}

// workBatch is a BatchResults of the transaction, under w.mu as workRows.
type workBatch struct {
	w      *work
	br     pgx.BatchResults
	rows   *workRows // the last Rows it returned, if still open
	closed bool
	err    error
}

func (b *workBatch) closeLocked() {
	if b.closed {
		return
	}
	if b.rows != nil {
		b.rows.closeLocked()
	}
	b.closed = true
	b.err = b.br.Close()
	if b.w.ended && b.err == nil {
		b.err = errEnded
	}
	b.w.drop(b)
}

func (b *workBatch) gone() error {
	if b.err != nil {
		return b.err
	}
	return pgx.ErrTxClosed
}

func (b *workBatch) Exec() (pgconn.CommandTag, error) {
	b.w.mu.Lock()
	defer b.w.mu.Unlock()
	if b.closed {
		return pgconn.CommandTag{}, b.gone()
	}
	if b.rows != nil {
		b.rows.closeLocked()
		b.rows = nil
	}
	return b.br.Exec()
}

func (b *workBatch) Query() (pgx.Rows, error) {
	b.w.mu.Lock()
	defer b.w.mu.Unlock()
	if b.closed {
		err := b.gone()
		return &workRows{w: b.w, closed: true, err: err}, err
	}
	if b.rows != nil {
		b.rows.closeLocked()
		b.rows = nil
	}
	rows, err := b.br.Query()
	r := &workRows{w: b.w, rows: rows, batch: b}
	if err != nil {
		rows.Close()
		r.closed, r.err = true, err
		return r, err
	}
	b.rows = r
	b.w.open = append(b.w.open, r)
	return r, nil
}

func (b *workBatch) QueryRow() pgx.Row {
	rows, err := b.Query()
	return &workRow{rows: rows, err: err}
}

// Tx returns nil: the batch did not begin a transaction of its own.
func (b *workBatch) Tx() pgx.Tx { return nil }

func (b *workBatch) Close() error {
	b.w.mu.Lock()
	defer b.w.mu.Unlock()
	b.closeLocked()
	return b.err
}
