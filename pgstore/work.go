package pgstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ctoken/ctoken/replay"
	"github.com/jackc/pgx/v5"
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
// This file holds the Work and its life; tx.go the transaction of a
// context ([TxFrom], [WithTx]), commit.go the fence and COMMIT,
// session.go the session's reset, worktx.go the handler's pgx.Tx, and
// workrows.go its Rows and BatchResults.

var (
	_ replay.Transactor   = (*Store)(nil)
	_ replay.WorkAcquirer = (*Store)(nil)
)

// prepareWork writes the claim statements run inside a caller's
// transaction, where now() is the transaction's start: there every
// deadline is read by statement_timestamp(), the database's clock when
// the statement starts, as now() reads it in autocommit.
func (s *Store) prepareWork() {
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

// fenceSQL is the fence of a work of [Store.BeginWork] on the table t
// (schema-qualified), the statement of its fence function (see
// [workFns]). $1 key, $2 token, $3 until, $4 fingerprint, $5 result. The
// first reason that applies is reported: the table forgot its claims,
// until is not after the database's clock, the lease is no longer live
// and the holder's.
//
// $6 is the transaction id the work's BEGIN read (NULL when BEGIN is
// sent in the fence's own pipeline): a fence that runs in any other
// transaction (the handler's SQL ended the work's and began another)
// matches no row and fails as escaped, checked first, in the same
// statement. $7 is the commit's nonce, in the text of every refusal (see
// [fenceReason]).
func fenceSQL(t string) string {
	return `WITH x AS (SELECT $6::bigint IS NULL OR pg_catalog.txid_current() OPERATOR(pg_catalog.=) $6::bigint AS same),
` + markerCTE(t) + `
up AS (
  UPDATE ` + t + ` SET state = 'd', until = $3::timestamptz, fingerprint = $4::bytea, result = $5::bytea
  WHERE key = $1::bytea AND state = 'l' AND token = $2::text AND until > statement_timestamp()
    AND $3::timestamptz > statement_timestamp() AND EXISTS (SELECT 1 FROM m) AND (SELECT same FROM x)
  RETURNING 1
)
` + fenceAnswerSQL("$7")
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

// Commit implements [replay.Work]: the fence's call and COMMIT, in one
// round trip (see the comment at the top of commit.go). It returns
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
//
// A work whose transaction a statement of the handler ended (SQL sent
// past the Tx's refusals, see [errEscaped]) may have committed writes
// that no rollback undoes. Rollback judges it as Commit does: the session
// found idle, a transaction id other than the one BEGIN read, or, in an
// aborted transaction, the work's id committed. Then it records the key
// as done without a record for escapedHold (see spend) and returns
// an error matching [ErrUnavailable] and errEscaped, so that a handler
// that escaped and then failed is not run again over what it kept.
func (w *work) Rollback(ctx context.Context) error {
	w.endOnce.Do(func() {
		w.stop()
		w.endErr = w.rollbackJudged(ctx)
	})
	return w.endErr
}

// escapedHold is how long a key whose work escaped its transaction and
// then rolled back stays recorded as done without a record: the default
// idempotency window (24 hours) and a lease's margin. Commit's own
// escapes use the caller's until instead; Rollback is given none.
const escapedHold = 25 * time.Hour

// rollbackJudged is Rollback's first call: rollback, after judging
// whether the handler's SQL had ended the work's transaction.
func (w *work) rollbackJudged(ctx context.Context) error {
	escaped, err, unknown := w.rollbackEscaped(ctx)
	switch {
	case unknown != nil:
		return unknown
	case escaped:
		return w.spend(ctx, time.Now().Add(escapedHold))
	}
	return err
}

// rollbackEscaped rolls the work back (err is the rollback's error) and
// reports whether the handler's SQL had ended its transaction before, so
// that writes sent before may be committed: the session idle, or in
// another transaction than the one BEGIN began; where the session cannot
// tell its own transaction's id (aborted, or its answer lost), whether
// the work's was committed is asked on the pool, and unknown is the error
// when that cannot be told either.
func (w *work) rollbackEscaped(ctx context.Context) (escaped bool, err, unknown error) {
	if !w.begun {
		return false, w.rollback(ctx), nil
	}
	state := w.conn.PgConn().TxStatus()
	escaped, ask := state == 'I', state == 'E'
	if state == 'T' {
		same, qerr := w.sameTx(ctx)
		escaped, ask = qerr == nil && !same, qerr != nil
	}
	err = w.rollback(ctx)
	if ask {
		committed, cerr := w.committedBefore(ctx)
		if cerr != nil {
			return false, err, fmt.Errorf("%w: the work is rolled back, but whether a statement of the handler committed its transaction before is unknown: %w", ErrUnavailable, cerr)
		}
		escaped = committed
	}
	return escaped, err, nil
}

// sameTx reports whether the session's transaction is the one BEGIN
// began (its id is the one BEGIN's round trip read). It runs on the
// caller's goroutine: the rollback after it uses the same connection,
// which must not still be in use.
func (w *work) sameTx(ctx context.Context) (bool, error) {
	return callIn(w.s, ctx, true, func(ctx context.Context) (bool, error) {
		// Unnamed, by pgconn: no statement the handler prepared (under
		// this SQL as its name, or pgx's cache name for it) answers.
		r := w.conn.PgConn().ExecParams(ctx, "select pg_catalog.txid_current() operator(pg_catalog.=) $1::bigint",
			[][]byte{strconv.AppendInt(nil, w.xid, 10)}, []uint32{pgtype.Int8OID}, nil, nil).Read()
		if r.Err != nil {
			return false, r.Err
		}
		if len(r.Rows) != 1 || len(r.Rows[0]) != 1 {
			return false, errors.New("pgstore: unexpected answer to the transaction id's check")
		}
		return string(r.Rows[0][0]) == "t", nil
	})
}

// rollback rolls the transaction back, if it was begun, and returns the
// connection to the pool (after stop).
func (w *work) rollback(ctx context.Context) error {
	if !w.begun {
		w.pc.Release()
		return nil
	}
	sql := "rollback; " + w.s.resetCall
	if w.escaped() {
		sql = w.s.resetCall // the handler's SQL ended the transaction
	}
	started := w.claimEnd()
	err := w.s.run(ctx, func(ctx context.Context) error {
		if !started() {
			return nil
		}
		_, err := w.conn.PgConn().Exec(ctx, sql).ReadAll()
		w.put(ctx, err == nil)
		if sqlPrepared(err) {
			return nil // rolled back; the session is closed, not pooled
		}
		return err
	})
	w.closeUnlessStarted(started)
	return err
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
