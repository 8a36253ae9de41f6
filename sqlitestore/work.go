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

// The transactional mode ([replay.Transactor]). The Work's 'w' row and a
// savepoint of a random name prove at Commit that no handler's statement
// ended the transaction. After a handler's ROLLBACK with no row changed
// since (total_changes()), nothing was kept: ErrRolledBack; otherwise, as
// after its COMMIT, the ID is refused until an operator releases it.

type txKey struct{}

// stepper runs a step in a caller's transaction.
type stepper interface {
	step(ctx context.Context, s *Store, fn func(q querier, now int64) error) error
}

// txOf is the transaction ctx carries for s, or nil. A Work of another
// Store on the file is joined: a step outside it would wait for it.
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

type joinedTx struct{ t *Tx }

func (j joinedTx) step(ctx context.Context, s *Store, fn func(q querier, now int64) error) error {
	w := j.t.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ended {
		return fmt.Errorf("%w: %w", ErrUnavailable, sql.ErrTxDone)
	}
	return s.stepIn(ctx, stmtQuerier{ctx, w.wc}, "a Work of another store on the file", fn)
}

// ErrNoTx reports that [TxFrom] found no [replay.Work]'s transaction in
// its context, so the work is never written outside it.
var ErrNoTx = errors.New("sqlitestore: the context carries no transaction (use the transactional mode)")

// Tx is the transaction of a [replay.Work] as the handler sees it: its
// statements run one at a time and fail with [sql.ErrTxDone]
// ([sql.ErrConnDone] from a Row's Scan) once the Work ended.
type Tx struct {
	w *work
}

// TxFrom returns the transaction of the [replay.Work] ctx carries, as the
// middlewares pass it to the handler, or [ErrNoTx].
func TxFrom(ctx context.Context) (*Tx, error) {
	if ctx != nil {
		if t, ok := ctx.Value(txKey{}).(*Tx); ok {
			return t, nil
		}
	}
	return nil, ErrNoTx
}

// WithTx returns ctx carrying tx, a transaction on the store's database,
// in which [Store.Claim] and the lease steps with this context then write.
// Begin tx IMMEDIATE where the driver allows: a deferred one may fail.
func WithTx(ctx context.Context, tx *sql.Tx) context.Context {
	ctx = orBackground(ctx)
	return context.WithValue(ctx, txKey{}, callerTx{tx})
}

type callerTx struct{ tx *sql.Tx }

func (c callerTx) step(ctx context.Context, s *Store, fn func(q querier, now int64) error) error {
	if c.tx == nil {
		return fmt.Errorf("%w: WithTx with a nil *sql.Tx", ErrConfig)
	}
	return s.stepIn(ctx, connQuerier{ctx, c.tx}, "the transaction of WithTx", fn)
}

// stepIn runs fn in a transaction not the store's own (what names it),
// after checking in it the marker and the settings its commit runs with.
func (s *Store) stepIn(ctx context.Context, q querier, what string, fn func(q querier, now int64) error) error {
	if err := s.repairErr(); err != nil {
		return err
	}
	now := s.now().UnixNano()
	var inc, journal string
	var fence, seq int64
	var level int
	err := q.queryRow(`SELECT token, until, seq, `+connSettingsSQL+` FROM `+s.table+` WHERE key = `+markerKey+` AND state = 'm'`).Scan(&inc, &fence, &seq, &level, &journal)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return s.guard.place.lift(fmt.Errorf("%w: the table's marker row is missing (the table was emptied)", ErrForgotten))
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
	case seq < s.guard.seq.Load():
		return s.guard.refuse(fmt.Errorf("%w: the database's sequence went back from %d to %d (the file was replaced by an older copy)", ErrForgotten, s.guard.seq.Load(), seq))
	}
	// Without a writer, link the WAL the caller's transaction holds.
	if s.guard.wal.Load() == nil {
		s.relinkWAL()
	}
	if err := fn(q, now); err != nil && !decided(err) {
		return unavailable(ctx, err)
	} else if err != nil {
		return err
	}
	// A durable commit advances the sequence (wal.go).
	if _, err := q.exec(`UPDATE ` + s.table + ` SET seq = seq + 1 WHERE key = ` + markerKey + ` AND state = 'm'`); err != nil {
		return unavailable(ctx, err)
	}
	return nil
}

type work struct {
	s         *Store
	id, token string
	wc        *wconn // the writer's connection
	seq       int64  // the marker's sequence this transaction wrote
	key       []byte
	changes   int64 // total_changes() once the 'w' row was written
	// Of AcquireWork: the transaction holds the lease.
	acquired bool
	hold     *hold
	deadline int64       // the lease's end, by the store's clock
	timer    *time.Timer // rolls the Work back at deadline
	mu       sync.Mutex
	ended    bool
	result   error
	clean    bool // Commit found the connection's settings unchanged
	pragma   bool // a handler's statement may have been a PRAGMA
}

func (t *Tx) step(ctx context.Context, s *Store, fn func(q querier, now int64) error) error {
	w := t.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ended {
		return fmt.Errorf("%w: %w", ErrUnavailable, sql.ErrTxDone)
	}
	err := fn(stmtQuerier{ctx, w.wc}, s.now().UnixNano())
	if err != nil && !decided(err) {
		return unavailable(ctx, err)
	}
	return err
}

// ExecContext runs a statement in the work's transaction.
func (t *Tx) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	w := t.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ended {
		return nil, sql.ErrTxDone
	}
	w.sawPragma(query)
	res, err := w.wc.conn.ExecContext(ctx, query, args...)
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
	w.sawPragma(query)
	rows, err := w.wc.conn.QueryContext(ctx, query, args...)
	w.s.sawIOError(err) // the Work holds writeMu
	return rows, err
}

// QueryRowContext runs a query for at most one row in the transaction.
func (t *Tx) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	w := t.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ended {
		return w.s.closedConn.QueryRowContext(ctx, query, args...)
	}
	w.sawPragma(query)
	return w.wc.conn.QueryRowContext(ctx, query, args...)
}

// sawPragma marks the Work when a handler's statement may be a PRAGMA,
// the one statement that changes the writer's wal_autocheckpoint and
// busy_timeout inside a transaction: then Commit sets them again.
func (w *work) sawPragma(query string) {
	for i := 0; i+6 <= len(query) && !w.pragma; i++ {
		w.pragma = strings.EqualFold(query[i:i+6], "pragma")
	}
}

// WorkHoldsWriter reports true: a Work holds SQLite's only writer until
// it ends ([replay.OneWriter]).
func (s *Store) WorkHoldsWriter() bool { return true }

// BeginWork opens the transaction for token's lease on id
// ([replay.Transactor]); the Work holds the store's writer until it ends,
// so keep handlers short. On an error the lease is as it was.
func (s *Store) BeginWork(ctx context.Context, id, token string) (replay.Work, error) {
	if err := s.readyFor(id); err != nil {
		return nil, err
	}
	ctx = orBackground(ctx)
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
	if err := s.begin(ctx, wc); err != nil {
		s.dropWriter()
		return nil, unavailable(ctx, err)
	}
	q := s.inTx(ctx, wc)
	w := &work{s: s, id: id, token: token, wc: wc, key: s.key(id)}
	fail := func(err error) (*work, error) {
		if _, rerr := (stmtQuerier{context.WithoutCancel(ctx), wc}).exec(`ROLLBACK`); rerr != nil {
			s.dropWriter()
		}
		return nil, err
	}
	if w.seq, err = s.guard.step(q, s, s.now().UnixNano(), true); err != nil {
		return fail(unavailable(ctx, err)) // a loss or a fence passes as it is
	}
	if _, err := q.exec(`SAVEPOINT ` + s.savepoint); err != nil {
		return fail(unavailable(ctx, err))
	}
	n, err := execN(q, `UPDATE `+s.table+` SET state = 'w' WHERE key = ? AND state = 'l' AND token = ?`, w.key, token)
	if err != nil {
		return fail(unavailable(ctx, err))
	}
	if n != 1 {
		return fail(fmt.Errorf("%w: id is not the holder's lease", replay.ErrLeaseLost))
	}
	// A handler's ROLLBACK is judged by it (see rolledBack).
	if err := q.queryRow(`SELECT total_changes()`).Scan(&w.changes); err != nil {
		return fail(unavailable(ctx, err))
	}
	return w, nil
}

// Context returns ctx carrying the work's [Tx].
func (w *work) Context(ctx context.Context) context.Context {
	ctx = orBackground(ctx)
	return context.WithValue(ctx, txKey{}, &Tx{w})
}

// Commit ends the lease in the work's transaction and commits once.
func (w *work) Commit(ctx context.Context, until time.Time, fingerprint, result []byte) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ended {
		return w.result
	}
	ctx = orBackground(ctx)
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

// triggers counts the triggers on the store's table in main (and temp).
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

// untriggered rolls the Work back when a trigger, which could change
// Commit's rows, is on the table, and reads whether the handler left
// temporary objects. Its caller proved the transaction the Work's, in
// which SQLite lets no statement change synchronous or journal_mode
// (after the Work's first write), nor ATTACH: writerConn's other checks
// hold.
func (w *work) untriggered(ctx context.Context, q querier) error {
	name := unquote(w.s.table)
	var triggers, objects int
	if err := q.queryRow(commitCheck, name, name).Scan(&triggers, &objects); err != nil {
		return w.end(ctx, unavailable(ctx, err))
	}
	if triggers != 0 {
		return w.end(ctx, fmt.Errorf("%w: %w; nothing was kept", replay.ErrRolledBack, errTriggered))
	}
	w.clean = objects == 0 && !w.pragma // else openWriter sets busy_timeout again
	// The checkpoint after COMMIT stays the store's (see checkpoint).
	if w.s.wal && w.pragma {
		if err := setPragma(q, `PRAGMA wal_autocheckpoint = 0`); err != nil {
			return w.end(ctx, unavailable(ctx, err))
		}
	}
	return nil
}

// commitCheck reads at Commit the triggers in main and temp (the name
// twice) and the temporary objects.
const commitCheck = `SELECT ` + mainTriggersSQL + ` + ` + tempTriggersSQL + `, (SELECT count(*) FROM temp.sqlite_master)`

func (w *work) end(ctx context.Context, err error) error {
	_, rerr := (stmtQuerier{context.WithoutCancel(ctx), w.wc}).exec(`ROLLBACK`)
	if rerr != nil && errors.Is(err, replay.ErrRolledBack) {
		err = unavailable(ctx, fmt.Errorf("rollback: %w", rerr))
	}
	w.drop(rerr == nil)
	return err
}

// drop ends the Work and frees the writer.
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

// Rollback discards the work's writes and leaves the lease; if the
// handler had ended the transaction and rows changed, the ID is refused.
func (w *work) Rollback(ctx context.Context) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ended {
		return nil
	}
	ctx = orBackground(ctx)
	return w.rollback(ctx)
}
