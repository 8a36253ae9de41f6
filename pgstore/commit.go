package pgstore

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/ctoken/ctoken/replay"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
)

// Commit sends, in one round trip (a pipeline), SET CONSTRAINTS ALL
// IMMEDIATE (see [immediateSQL]), the call of the table's fence function,
// COMMIT and the call of its reset function (see functions.go). The
// fence updates the lease row to done only where it is still
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

// errFence begins the text the fence statement fails with when it matched
// no row: the commit's nonce, "_" and the reason follow it (see
// [fenceReason]).
const errFence = "ctoken_fence_"

// fenceOIDs and lockedFenceOIDs are the types of the fence functions'
// parameters (see [workFns]): those of the fence statements ([fenceSQL],
// [lockedFenceSQL]), the nonce, then the synchronous_commit of COMMIT.
var (
	fenceOIDs       = []uint32{pgtype.ByteaOID, pgtype.TextOID, pgtype.TimestamptzOID, pgtype.ByteaOID, pgtype.ByteaOID, pgtype.Int8OID, pgtype.TextOID, pgtype.TextOID}
	lockedFenceOIDs = []uint32{pgtype.ByteaOID, pgtype.TextOID, pgtype.TimestamptzOID, pgtype.ByteaOID, pgtype.ByteaOID, pgtype.Int8OID, pgtype.Int8OID, pgtype.TextOID, pgtype.TextOID}
)

// markerCTE is the CTE m of the statements run in a work's transaction
// (the fences, AcquireWork's read): the marker row of the table t by
// statement_timestamp(), in the statement's own snapshot, with a history
// the server can vouch for.
func markerCTE(t string) string {
	return `m AS (SELECT 1 FROM ` + t + ` WHERE key = ` + markerSQL + ` AND state = 'm' AND until <= statement_timestamp() AND ` + historyGuardSQL + `),`
}

// fenceAnswerSQL is the fences' last select: 0 when the CTE up wrote the
// done row; otherwise it fails, casting to integer errFence, the nonce
// (the parameter nonce), "_" and the first reason that applies (see
// [fenceReason]).
func fenceAnswerSQL(nonce string) string {
	return `SELECT CASE WHEN EXISTS (SELECT 1 FROM up) THEN 0
  ELSE pg_catalog.concat('` + errFence + `', ` + nonce + `::text, '_', CASE WHEN NOT (SELECT same FROM x) THEN 'escaped'
    WHEN NOT EXISTS (SELECT 1 FROM m) THEN 'forgotten'
    WHEN $3::timestamptz <= statement_timestamp() THEN 'expired'
    ELSE 'lost' END)::int END`
}

// fenceReason returns the reason of the fence's own refusal in err, its
// answer to the fence statement, or "" when err is not one. The fence
// fails by casting to integer the text errFence, the commit's nonce (a
// parameter, random for each commit), "_" and the reason: the server
// answers invalid_text_representation with that text quoted in its
// message (whatever the message's language). Only the exact text with
// this commit's nonce counts: a handler's AFTER trigger on the store's
// table fires inside the fence and may fail with any text, but not with
// a nonce it never saw.
func fenceReason(err error, nonce string) string {
	if err == nil {
		return ""
	}
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "22P02" {
		return ""
	}
	for _, reason := range []string{"escaped", "forgotten", "expired", "lost"} {
		if strings.Contains(pgErr.Message, `"`+errFence+nonce+"_"+reason+`"`) {
			return reason
		}
	}
	return ""
}

// unnamed is a statement sent after the handler's (see [sendUnnamed]):
// its SQL and its arguments, of the types oids.
type unnamed struct {
	sql  string
	oids []uint32
	args []any
}

// answer is the server's answer to one statement of [sendUnnamed].
type answer struct {
	tag pgconn.CommandTag
	err error // the statement's error; nil also when the server skipped it
}

// binaryFormats are the format codes of [sendUnnamed]'s arguments, all
// binary: as many as the fence functions' parameters (never written;
// extended, on a copy, for a statement of more).
var binaryFormats = []int16{
	pgtype.BinaryFormatCode, pgtype.BinaryFormatCode, pgtype.BinaryFormatCode,
	pgtype.BinaryFormatCode, pgtype.BinaryFormatCode, pgtype.BinaryFormatCode,
	pgtype.BinaryFormatCode, pgtype.BinaryFormatCode, pgtype.BinaryFormatCode,
}

// sendUnnamed sends stmts in one round trip, a pipeline with one Sync at
// its end (so the server skips every statement after one that fails),
// each as the unnamed statement (Parse, Bind, Execute), its arguments
// encoded by the connection's type map in binary. None is sent through
// pgx's statement cache: it prepares a statement under a name derived
// from its SQL (stmtcache_ and its digest), which a handler can compute
// and replace on the session by SQL of its own (DEALLOCATE and PREPARE in
// a function), and pgx's batches and queries also run, for a SQL text, a
// statement the handler prepared under that text as its name. The
// store's statements after the handler's (the fence's call, COMMIT, the
// reset's call) must run as the store wrote them. It returns one answer per
// statement, in order, and the error that ended the pipeline; nil
// answers when nothing was sent.
func sendUnnamed(ctx context.Context, conn *pgx.Conn, stmts []unnamed) ([]answer, error) {
	m := conn.TypeMap()
	b := &pgconn.Batch{}
	n := 0
	for _, st := range stmts {
		n += len(st.args)
	}
	// Every statement's values, in one slice: the batch copies them
	// into its buffer as each statement is added.
	all := make([][]byte, n)
	for _, st := range stmts {
		values := all[:len(st.args):len(st.args)]
		all = all[len(st.args):]
		for i, arg := range st.args {
			// A non-nil buffer: an empty value is not NULL.
			v, err := m.Encode(st.oids[i], pgtype.BinaryFormatCode, arg, []byte{})
			if err != nil {
				return nil, err
			}
			values[i] = v
		}
		formats := binaryFormats
		for len(formats) < len(values) {
			formats = append(formats[:len(formats):len(formats)], pgtype.BinaryFormatCode)
		}
		b.ExecParams(st.sql, values, st.oids, formats[:len(values)], nil)
	}
	answers := make([]answer, len(stmts))
	mrr := conn.PgConn().ExecBatch(ctx, b)
	i := 0
	for ; i < len(stmts) && mrr.NextResult(); i++ {
		// Only the command tag and the error are read: the rows
		// (the functions' one row each) are skipped, not copied.
		tag, err := mrr.ResultReader().Close()
		answers[i] = answer{tag: tag, err: err}
		if err != nil {
			break
		}
	}
	err := mrr.Close()
	if i < len(stmts) && answers[i].err == nil {
		// The statement whose answer did not come: the server refused
		// it before its result began, or the session ended.
		answers[i].err = err
	}
	return answers, err
}

// commit is Commit's first call.
func (w *work) commit(ctx context.Context, until time.Time, fingerprint, result []byte) error {
	w.stop()
	refuse := func(err error) error {
		// A refusal before the fence reports the work rolled back only
		// once the transaction is the one the work began: had the
		// handler's SQL replaced it, the writes before may be committed.
		escaped, _, unknown := w.rollbackEscaped(ctx)
		switch {
		case unknown != nil:
			return unknown
		case escaped:
			return w.spend(ctx, until)
		}
		return err
	}
	if w.escaped() {
		// The fence would run outside the work's transaction. Checked
		// first: the writes before the COMMIT sent as SQL are kept, so
		// no refusal below may report the work as rolled back.
		return refuse(nil)
	}
	if w.refusal != nil {
		// A statement of the handler was refused before it was sent:
		// nothing escaped, and the transaction is rolled back.
		return refuse(fmt.Errorf("%w: %w: %w", ErrUnavailable, replay.ErrRolledBack, w.refusal))
	}
	if err := w.s.beyondHorizon(until); err != nil {
		return refuse(fmt.Errorf("%w: %w", replay.ErrRolledBack, err))
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
	// nonce marks the fence's own refusals of this commit (see
	// [fenceReason]): a handler's trigger that fires inside the fence
	// cannot know it, so cannot fail with the text of a refusal.
	nonce := rand.Text()
	started := w.claimEnd()
	o, err := call(w.s, ctx, func(ctx context.Context) (outcome, error) {
		if !started() {
			return outcome{}, nil
		}
		var o outcome
		// BEGIN or SET CONSTRAINTS, the fence's call, COMMIT and the
		// reset's, each sent unnamed (see [sendUnnamed]).
		stmts := make([]unnamed, 0, 4)
		var xid *int64 // NULL: BEGIN is in this pipeline, just before the fence
		if !w.begun {
			stmts = append(stmts, unnamed{sql: beginSQL}) // a work that wrote nothing
		} else {
			xid = &w.xid
			stmts = append(stmts, unnamed{sql: immediateSQL}) // the handler's deferred triggers fire before the fence
		}
		var fence unnamed
		if w.locked {
			fence = unnamed{sql: w.s.lockedFenceCall, oids: lockedFenceOIDs,
				args: []any{w.key, w.token, pgTime(until), fingerprint, result, xid, w.leaseUS, nonce, w.s.commitSetting()}}
		} else {
			fence = unnamed{sql: w.s.fenceCall, oids: fenceOIDs,
				args: []any{w.key, w.token, pgTime(until), fingerprint, result, xid, nonce, w.s.commitSetting()}}
		}
		at := len(stmts) // the fence's answer; COMMIT's follows
		stmts = append(stmts, fence, unnamed{sql: "commit"})
		if w.begun {
			// The handler ran statements: its session is reset in the
			// same round trip, after COMMIT.
			stmts = append(stmts, unnamed{sql: w.s.resetCall})
		}
		answers, pipeErr := sendUnnamed(ctx, w.conn, stmts)
		if answers == nil {
			// Not sent (an argument could not be encoded): the
			// transaction is still open; closing the session ends it.
			w.put(ctx, false)
			o.refused, o.err = true, pipeErr
			return o, nil
		}
		// The server skips every statement of the pipeline after the one
		// that failed: those have no answer. The fence's error may be a
		// statement of the work that had failed before (the transaction
		// is aborted); the first statement's, a handler's deferred
		// constraint (SET CONSTRAINTS), or BEGIN's.
		fenceErr := answers[at].err
		if fenceErr == nil {
			fenceErr = answers[0].err
		}
		commitErr := answers[at+1].err
		var resetErr error
		if len(answers) > at+2 {
			resetErr = answers[at+2].err
		}
		o.tag = answers[at+1].tag.String()
		o.state = w.conn.PgConn().TxStatus()
		clean := pipeErr == nil
		if resetErr != nil && commitErr == nil && o.tag == "COMMIT" {
			// The reset failed after COMMIT's answer: at its check of a
			// statement the handler prepared by SQL (see resetBody), or
			// otherwise (its call made ambiguous by an overload, which
			// the recheck then refuses). The session is closed, not
			// pooled (pipeErr is the reset's error), and COMMIT's
			// outcome stands.
			if !sqlPrepared(resetErr) {
				w.s.log.Warn("pgstore: the session's reset after a committed work failed; its connection is closed, not pooled",
					"table", strings.ReplaceAll(w.s.table, `"`, ""), "error", resetErr.Error())
			}
			resetErr = nil
		}
		if o.state == 'E' {
			// The server refused a statement (the fence, or one of the
			// work before it) and skipped the rest: the transaction is
			// aborted. Roll it back, and reset the session, so the
			// connection can be pooled.
			_, err := w.conn.PgConn().Exec(ctx, "rollback; "+w.s.resetCall).ReadAll()
			clean = err == nil
		}
		w.put(ctx, clean)
		if o.reason = fenceReason(answers[at].err, nonce); o.reason != "" {
			return o, nil
		}
		o.refused = commitRefused(fenceErr, commitErr)
		o.err = errors.Join(fenceErr, commitErr, resetErr)
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
	ctx, cancel := w.s.endContext(ctx)
	defer cancel()
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
// status, read on the pool, is committed. Asked only where the session
// cannot tell its own id: the work failed in an aborted transaction, or
// the session could not answer.
func (w *work) committedBefore(ctx context.Context) (bool, error) {
	if !w.begun {
		return false, nil
	}
	ctx, cancel := w.s.endContext(ctx)
	defer cancel()
	status, err := call(w.s, ctx, func(ctx context.Context) (string, error) {
		var status *string
		// Unnamed (the mode): no statement prepared on the pooled session answers for it.
		err := w.s.pool.QueryRow(ctx, "select pg_catalog.txid_status($1::bigint)", pgx.QueryExecModeExec, w.xid).Scan(&status)
		if status == nil {
			return "", err
		}
		return *status, err
	})
	return status == "committed", err
}

// endContext is the context committedBefore and spend run under: they
// find out or record what already happened, and a caller's context that
// ends during them would leave a known outcome unknown, or an escaped
// work free to run again. So they run past it, within the Timeout, or
// DefaultTimeout when the Timeout is negative (a caller's context that is
// done bounds nothing).
func (s *Store) endContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if ctx == nil {
		ctx = context.Background()
	}
	bound := s.timeout
	if bound <= 0 {
		bound = DefaultTimeout
	}
	return context.WithTimeout(context.WithoutCancel(ctx), bound)
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
// error the server answered to the fence (or to the statement before it:
// BEGIN or SET CONSTRAINTS) does: their results come before COMMIT runs,
// so the transaction was aborted, or the session ended, before COMMIT. Of COMMIT, only an ERROR does (a deferred
// constraint, a statement of the work that had failed):
// PostgreSQL turns any error after the commit record into a PANIC, and a
// FATAL or PANIC ends the session at a moment the message does not tell
// (before version 14 a server's crash or immediate shutdown sends FATAL to
// every session, also one whose commit was already written), so the commit
// may have happened. So does an error pgconn reports before it sent any
// of the pipeline (the connection closed, as pgx closes it when a
// handler's statement outlives its context): no COMMIT reached the server.
func commitRefused(fenceErr, commitErr error) bool {
	if fenceErr == nil && commitErr == nil {
		return false
	}
	var pgErr *pgconn.PgError
	if errors.As(fenceErr, &pgErr) || pgconn.SafeToRetry(fenceErr) {
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
