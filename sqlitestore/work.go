package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/ctoken/ctoken/replay"
)

// The transactional mode ([replay.Transactor]). BeginWork takes the
// store's writer and its connection (no group commit runs while a Work is
// open: SQLite has one writer), begins an IMMEDIATE transaction, checks
// the marker (as every write transaction does), opens a savepoint of a
// name random to the store, and turns the holder's lease row into state
// 'w' inside it. The handler
// writes through [TxFrom]'s [Tx]. Commit turns the 'w' row into the done
// row, with its record, and commits once: the handler's writes and the
// end of the lease are one commit, one fsync.
//
// The 'w' row and the savepoint prove, at Commit, that the transaction is
// still the one BeginWork opened. If a statement of the handler rolled it
// back (a ROLLBACK in a string of several statements), the row reads 'l'
// again: Commit (or Rollback) rolls back whatever came after and, when no
// row changed on the connection since BeginWork (total_changes()),
// reports [replay.ErrRolledBack] (nothing was kept). When rows changed,
// statements after the ROLLBACK may have committed on their own (an
// autocommit INSERT): the outcome is unknown, the error is not
// ErrRolledBack, and the ID is refused, as after a COMMIT, so the request
// is never run again over its kept writes. If a statement committed it
// (a COMMIT), the row reads 'w' but the savepoint is gone (a COMMIT ends
// every savepoint, and no handler knows its name to release it): Commit
// rolls back whatever came after and reports an error that is not
// ErrRolledBack (part of the work was kept), and the ID, left in state
// 'w', is refused until an operator releases it: its outcome is unknown,
// so it is never run again by itself.

// txKey is the context key of a transaction.
type txKey struct{}

// stepper runs a claim's or a lease step's statements in a caller's
// transaction.
type stepper interface {
	step(ctx context.Context, s *Store, fn func(q querier, now int64) error) error
	store() *Store
}

// txOf is the transaction ctx carries for s, or nil. A Work of another
// Store on the same database file is joined, as a transaction of WithTx
// would be: SQLite has one writer, which that Work holds, so a step of s
// outside it would wait for it until busy_timeout (a one-time token
// redeemed on one table inside a Work of another). A Work of a Store on
// another file is not s's: the context reaches every Store a handler
// uses.
func (s *Store) txOf(ctx context.Context) stepper {
	t, _ := ctx.Value(txKey{}).(stepper)
	if t == nil {
		return nil
	}
	if w, ok := t.(*Tx); ok && w.w.s != s {
		if !os.SameFile(s.guard.info, w.w.s.guard.info) {
			return nil
		}
		return joinedTx{w}
	}
	return t
}

// joinedTx is a Work of another Store on s's file, joined by s's steps.
type joinedTx struct{ t *Tx }

func (j joinedTx) store() *Store { return nil }

func (j joinedTx) step(ctx context.Context, s *Store, fn func(q querier, now int64) error) error {
	w := j.t.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ended {
		return fmt.Errorf("%w: %w", ErrUnavailable, sql.ErrTxDone)
	}
	return s.stepIn(ctx, stmtQuerier{ctx, w.wc}, "a Work of another store on the file", fn)
}

// ErrNoTx reports a context that carries no transaction of a Work:
// [TxFrom] was called outside a [replay.Work]'s context (a handler wired
// without the transactional mode). It is returned rather than a
// connection of the pool, so the work is never written outside the
// transaction it must commit with.
var ErrNoTx = errors.New("sqlitestore: the context carries no transaction (use the transactional mode)")

// Tx is the transaction of a [replay.Work], as the handler sees it:
// statements only. It has no Commit or Rollback (its Work ends it), runs
// one statement at a time (a goroutine that outlived the handler cannot
// race the Work's end), and refuses every statement, with an error
// matching [sql.ErrTxDone] (for QueryRowContext, [sql.ErrConnDone] from
// Scan), once the Work has ended. Its methods are safe for concurrent use.
type Tx struct {
	w *work
}

// TxFrom returns the transaction of the [replay.Work] ctx carries (from
// the Work's Context, as the idempotency and webhook middlewares pass it
// to the handler). Without one it returns an error matching [ErrNoTx],
// never a connection of its own.
func TxFrom(ctx context.Context) (*Tx, error) {
	if ctx != nil {
		if t, ok := ctx.Value(txKey{}).(*Tx); ok {
			return t, nil
		}
	}
	return nil, ErrNoTx
}

// WithTx returns ctx carrying tx, a transaction of the caller's on the
// store's database, where [Store.Claim] and the lease steps find it: a
// Claim with this context (a one-time token or request state redeemed
// through a ctoken issuer on this store) is written in tx, and holds only
// if tx commits. Each step first checks, in tx, that tx is on the store's
// database (the marker row of the store's incarnation) and refuses
// otherwise. Begin tx with BEGIN IMMEDIATE semantics where your driver
// offers it (a deferred transaction that read first may fail to write
// with SQLITE_BUSY: reported as ErrUnavailable).
func WithTx(ctx context.Context, tx *sql.Tx) context.Context {
	if ctx == nil {
		ctx = context.Background()
	}
	return context.WithValue(ctx, txKey{}, callerTx{tx})
}

// callerTx is a transaction placed with WithTx.
type callerTx struct{ tx *sql.Tx }

func (c callerTx) store() *Store { return nil }

func (c callerTx) step(ctx context.Context, s *Store, fn func(q querier, now int64) error) error {
	if c.tx == nil {
		return fmt.Errorf("%w: WithTx with a nil *sql.Tx", ErrConfig)
	}
	return s.stepIn(ctx, connQuerier{ctx, c.tx}, "the transaction of WithTx", fn)
}

// stepIn runs fn in a transaction that is not the store's own (of
// WithTx, or a joined Work: what names it): it first checks, in that
// transaction, the marker and the settings its commit runs with.
func (s *Store) stepIn(ctx context.Context, q querier, what string, fn func(q querier, now int64) error) error {
	if err := s.repairErr(); err != nil {
		return err
	}
	now := s.now().UnixNano()
	// The marker, and the settings the transaction commits with: its
	// connection is the caller's, and may have been lowered.
	var (
		inc     string
		fence   int64
		level   int
		journal string
	)
	err := q.queryRow(`SELECT token, until, `+connSettingsSQL+` FROM `+s.table+` WHERE key = `+markerKey+` AND state = 'm'`).Scan(&inc, &fence, &level, &journal)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return fmt.Errorf("%w: the table's marker row is missing (the table was emptied)", ErrForgotten)
	case err != nil && isNoTable(err):
		return fmt.Errorf("%w: %s is not on the store's database (no table %s)", ErrConfig, what, unquote(s.table))
	case err != nil:
		return unavailable(ctx, err)
	case inc != s.guard.incarnation:
		return fmt.Errorf("%w: %s is not on the store's database (another incarnation)", ErrConfig, what)
	case level < syncNormal || level < syncFull && !s.allowNormal:
		return fmt.Errorf("%w: %w: %s runs on a connection with synchronous=%s: its commit would be acknowledged before it is on the disk (set FULL in the DSN, for every connection)", ErrUnavailable, ErrConfig, what, syncNames[level])
	case strings.ToLower(journal) != s.journal:
		return fmt.Errorf("%w: %w: %s runs on a connection with journal_mode=%s, not the %s the store was opened with", ErrUnavailable, ErrConfig, what, strings.ToUpper(journal), strings.ToUpper(s.journal))
	case fence > now:
		return fenced{time.Unix(0, fence), 0}
	}
	// The caller's transaction holds the WAL in place: keep it linked, for
	// New after a crash, when the store has no writer (whose WAL the
	// writer and the checker keep linked): two stats a call, only for a
	// store whose calls all run in callers' transactions.
	if s.guard.wal.Load() == nil {
		s.relinkWAL()
	}
	if err := fn(q, now); err != nil && !decided(err) {
		return unavailable(ctx, err)
	} else if err != nil {
		return err
	}
	// The step commits with the caller's transaction: it advances the
	// marker's sequence, as the store's own durable commits do (wal.go).
	if _, err := q.exec(`UPDATE ` + s.table + ` SET seq = seq + 1 WHERE key = ` + markerKey + ` AND state = 'm'`); err != nil {
		return unavailable(ctx, err)
	}
	return nil
}

// work is a Work of the store.
type work struct {
	s         *Store
	id, token string
	wc        *wconn    // the writer's connection
	conn      *sql.Conn // wc's, for the handler's statements
	seq       int64     // the marker's sequence this transaction wrote

	// Of AcquireWork (acquirework.go): the transaction holds the lease.
	acquired bool
	key      []byte
	hold     *hold
	deadline int64       // the lease's end, by the store's clock
	changes  int64       // total_changes() once the 'w' row was written
	timer    *time.Timer // rolls the Work back at deadline

	mu     sync.Mutex
	ended  bool
	result error
	// clean: Commit found the connection as the Work found it (see
	// untriggered), so the next write need not check it again.
	clean bool
}

func (t *Tx) store() *Store { return t.w.s }

func (t *Tx) step(ctx context.Context, s *Store, fn func(q querier, now int64) error) error {
	w := t.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ended {
		return fmt.Errorf("%w: %w", ErrUnavailable, sql.ErrTxDone)
	}
	if err := fn(stmtQuerier{ctx, w.wc}, s.now().UnixNano()); err != nil && !decided(err) {
		return unavailable(ctx, err)
	} else if err != nil {
		return err
	}
	return nil
}

// ExecContext runs a statement in the work's transaction.
func (t *Tx) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	w := t.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ended {
		return nil, sql.ErrTxDone
	}
	res, err := w.conn.ExecContext(ctx, query, args...)
	w.s.sawIOError(err) // the Work holds writeMu
	return res, err
}

// QueryContext runs a query in the work's transaction. Close the Rows
// before the handler returns.
func (t *Tx) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	w := t.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ended {
		return nil, sql.ErrTxDone
	}
	rows, err := w.conn.QueryContext(ctx, query, args...)
	w.s.sawIOError(err) // the Work holds writeMu
	return rows, err
}

// QueryRowContext runs a query expected to return at most one row in the
// work's transaction.
func (t *Tx) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	w := t.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ended {
		// The connection is the store's writer's again: the query runs on
		// a closed connection, whose Row's Scan reports sql.ErrConnDone.
		return w.s.closedConn.QueryRowContext(ctx, query, args...)
	}
	return w.conn.QueryRowContext(ctx, query, args...)
}

// BeginWork opens the transaction for the holder of token's lease on id
// ([replay.Transactor]). It holds the store's writer until the Work ends:
// other calls of the store wait for it (keep the handler short), and
// other processes wait up to their busy_timeout. An error means no
// transaction is open; the lease is left as it was: [replay.ErrLeaseLost]
// when id is no longer token's lease.
func (s *Store) BeginWork(ctx context.Context, id, token string) (replay.Work, error) {
	if err := s.ready(); err != nil {
		return nil, err
	}
	if err := checkID(id); err != nil {
		return nil, err
	}
	if ctx == nil {
		ctx = context.Background()
	}
	bctx, cancel := s.bound(ctx)
	defer cancel()
	select {
	case s.writeMu <- struct{}{}:
	case <-bctx.Done():
		return nil, unavailable(bctx, errors.New("waiting for the store's writer"))
	}
	w, err := s.beginWork(bctx, id, token)
	if err != nil {
		<-s.writeMu
		return nil, err
	}
	return w, nil
}

func (s *Store) beginWork(ctx context.Context, id, token string) (*work, error) {
	if err := s.guard.refused(); err != nil {
		return nil, err
	}
	wc, _, err := s.writerConn(ctx)
	if err != nil {
		return nil, err
	}
	q := stmtQuerier{ctx, wc}
	if _, err := q.exec(`BEGIN IMMEDIATE`); err != nil {
		s.dropWriter()
		return nil, unavailable(ctx, err)
	}
	q = s.inTx(ctx, wc)
	w := &work{s: s, id: id, token: token, wc: wc, conn: wc.conn, key: s.key(id)}
	fail := func(err error) (*work, error) {
		if _, rerr := (stmtQuerier{context.WithoutCancel(ctx), wc}).exec(`ROLLBACK`); rerr != nil {
			s.dropWriter()
		}
		return nil, err
	}
	if w.seq, err = s.guard.step(q, s, s.now().UnixNano(), true); err != nil {
		if errors.Is(err, ErrForgotten) || errors.As(err, new(fenced)) {
			return fail(err)
		}
		return fail(unavailable(ctx, err))
	}
	if _, err := q.exec(`SAVEPOINT ` + s.savepoint); err != nil {
		return fail(unavailable(ctx, err))
	}
	res, err := q.exec(`UPDATE `+s.table+` SET state = 'w' WHERE key = ? AND state = 'l' AND token = ?`, w.key, token)
	var n int64
	if err == nil {
		n, err = res.RowsAffected()
	}
	if err != nil {
		return fail(unavailable(ctx, err))
	}
	if n != 1 {
		return fail(fmt.Errorf("%w: id is not the holder's lease", replay.ErrLeaseLost))
	}
	// The connection's count of changed rows once the 'w' row is written:
	// a handler's ROLLBACK is judged by it (see rolledBack).
	if err := q.queryRow(`SELECT total_changes()`).Scan(&w.changes); err != nil {
		return fail(unavailable(ctx, err))
	}
	return w, nil
}

// Context returns ctx carrying the work's [Tx], for [TxFrom] and the
// store's Claim.
func (w *work) Context(ctx context.Context) context.Context {
	if ctx == nil {
		ctx = context.Background()
	}
	return context.WithValue(ctx, txKey{}, &Tx{w})
}

// Commit ends the lease in the work's transaction and commits once
// ([replay.Work]).
func (w *work) Commit(ctx context.Context, until time.Time, fingerprint, result []byte) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ended {
		return w.result
	}
	if ctx == nil {
		ctx = context.Background()
	}
	ctx, cancel := w.s.bound(ctx)
	defer cancel()
	w.result = w.commit(ctx, until, fingerprint, result)
	return w.result
}

func (w *work) commit(ctx context.Context, until time.Time, fp, result []byte) error {
	s := w.s
	if result != nil || fp != nil {
		if err := replay.CheckRecord(fp, result); err != nil {
			return w.end(ctx, fmt.Errorf("%w: %w", replay.ErrRolledBack, err))
		}
	}
	if err := s.repairErr(); err != nil {
		return w.end(ctx, fmt.Errorf("%w: %w; nothing was kept", replay.ErrRolledBack, err))
	}
	if w.acquired {
		return w.commitAcquired(ctx, until, fp, result)
	}
	q := s.inTx(ctx, w.wc)
	now := s.now().UnixNano()
	if err := w.intact(ctx); err != nil {
		return err
	}
	if err := w.untriggered(ctx, q); err != nil {
		return err
	}
	e := entry{found: true, live: true, state: "w", token: w.token}
	if err := s.confirmRow(q, e, now, w.id, w.token, nanos(until), fp, result, "w"); err != nil {
		if decided(err) {
			return w.end(ctx, fmt.Errorf("%w: %w", replay.ErrRolledBack, err))
		}
		return w.end(ctx, unavailable(ctx, err))
	}
	if _, err := q.exec(`COMMIT`); err != nil {
		w.clean = false
		w.drop(s.commitFailed(ctx, err))
		return unavailable(ctx, fmt.Errorf("commit: %w", err))
	}
	s.guard.saw(w.seq)
	w.drop(true)
	return nil
}

// errTriggered reports a trigger on the store's table.
var errTriggered = errors.New("a trigger is on the store's table: it would fire for the store's own statements, and could delete or change the rows they write (drop it; never make one in a handler)")

// triggers counts the triggers on the store's table in main and, with
// temp, in temp, where SQLite lets a trigger name a table of main (it
// then fires for that table's statements on its connection).
func (s *Store) triggers(q querier, temp bool) (int, error) {
	name := unquote(s.table)
	query := `SELECT ` + mainTriggersSQL
	args := []any{name}
	if temp {
		query += ` + ` + tempTriggersSQL
		args = append(args, name)
	}
	var n int
	err := q.queryRow(query, args...).Scan(&n)
	return n, err
}

// untriggered ends the Work, rolled back, when a trigger is on the
// store's table: made by the handler, it would delete or change the
// record Commit writes, or the claims written in the Work. In the same
// statement it reads what writerConn checks after a Work (commitCheck):
// when the handler left the connection as the Work found it, the Work
// marks it so (w.clean) and the next write skips that check; the
// handler's statements end with Commit, which holds the Work.
func (w *work) untriggered(ctx context.Context, q querier) error {
	name := unquote(w.s.table)
	var (
		triggers, level, objects int
		journal                  string
	)
	if err := q.queryRow(commitCheck, name, name).Scan(&triggers, &level, &journal, &objects); err != nil {
		return w.end(ctx, unavailable(ctx, err))
	}
	if triggers != 0 {
		return w.end(ctx, fmt.Errorf("%w: %w; nothing was kept", replay.ErrRolledBack, errTriggered))
	}
	w.clean = level == w.wc.level && strings.ToLower(journal) == w.s.journal && objects == 0
	// The checkpoint after the COMMIT stays the store's, whatever the
	// handler set (see checkpoint): SQLite would run its own, with the
	// handler's wal_autocheckpoint, and drop its error. (A Work that
	// ends otherwise leaves the writer to be checked again: see drop.)
	if w.s.wal {
		if err := setPragma(q, `PRAGMA wal_autocheckpoint = 0`); err != nil {
			return w.end(ctx, unavailable(ctx, err))
		}
	}
	return nil
}

// commitCheck reads, inside a Work's transaction at its Commit, the
// triggers on the store's table in main and temp (the name twice), and
// what writerCheck reads: the synchronous level (which SQLite does not
// let a transaction change), the journal_mode, temporary objects and
// attached databases.
const commitCheck = `SELECT ` + mainTriggersSQL + ` + ` + tempTriggersSQL + `, ` + connSettingsSQL + `, ` + connObjectsSQL

// end rolls the transaction back and returns err.
func (w *work) end(ctx context.Context, err error) error {
	_, rerr := (stmtQuerier{context.WithoutCancel(ctx), w.wc}).exec(`ROLLBACK`)
	if rerr != nil && errors.Is(err, replay.ErrRolledBack) {
		err = unavailable(ctx, fmt.Errorf("rollback: %w", rerr))
	}
	w.drop(rerr == nil)
	return err
}

// drop ends the Work: the connection stays the writer's (or, when its
// transaction is in doubt, is discarded) and the store's writer is free.
func (w *work) drop(clean bool) {
	w.ended = true
	if w.timer != nil {
		w.timer.Stop()
	}
	if w.hold != nil {
		w.s.holds.drop(w.key, w.hold)
	}
	if !w.clean || !clean {
		w.wc.level = 0 // the handler's statements may have changed it
	}
	if !clean && w.s.wc == w.wc {
		w.s.dropWriter()
	}
	<-w.s.writeMu
}

// Rollback discards the work's writes; the lease is left as it is
// ([replay.Work]). When a statement of the handler had ended the
// transaction and rows changed since (see [Store.BeginWork]), the
// outcome is unknown: Rollback returns an error matching
// [ErrUnavailable] and the ID is refused until an operator releases it.
func (w *work) Rollback(ctx context.Context) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ended {
		return nil
	}
	if ctx == nil {
		ctx = context.Background()
	}
	return w.rollback(ctx)
}
