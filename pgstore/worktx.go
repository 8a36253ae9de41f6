package pgstore

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"unsafe"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// errTxOwned refuses the handler's Commit or Rollback of the work's
// transaction.
var errTxOwned = errors.New("pgstore: the work's transaction is committed or rolled back by its Work (the middleware), not by the handler: answer a retry status (5xx, 429, 408) to roll it back")

// errCursorOpen refuses a statement while a Rows or BatchResults of the
// same transaction is open, as pgx refuses one on a busy connection.
var errCursorOpen = errors.New("pgstore: a Rows or BatchResults of the work's transaction is still open: close it first")

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
// checks it (see [fenceSQL]).
const xidSQL = "select pg_catalog.txid_current()"

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
		case pgx.QueryRewriter, pgx.QueryResultFormats, pgx.QueryResultFormatsByOID:
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

// callOptions says which of pgx's per-call options a method reads from
// the leading arguments of a statement, as pgx does: Exec an exec mode
// and a query rewriter, Query those and result formats, a batch's query
// only a query rewriter.
type callOptions int

const (
	batchOptions callOptions = iota
	execOptions
	queryOptions
)

// isOption reports whether pgx reads a as an option, not an argument, in
// a method of kind.
func isOption(a any, kind callOptions) bool {
	switch a.(type) {
	case pgx.QueryRewriter:
		return true
	case pgx.QueryExecMode:
		return kind != batchOptions
	case pgx.QueryResultFormats, pgx.QueryResultFormatsByOID:
		return kind == queryOptions
	}
	return false
}

// rewrite applies the query rewriter among args's leading options as pgx
// does (for example [pgx.NamedArgs]): of several, the last, once, to the
// statement and the arguments after the options. It returns the statement
// and the arguments, with the other options (exec modes, and Query's
// result formats) kept before them. pgx does not check the SQL a rewriter
// returns: it is refused, or not, only once rewritten. pgx takes what the
// rewriter returns as arguments, but sent on they are read as options
// again: arguments that begin with one (a second rewriter, which would
// run unchecked) are refused, as refuseLocked refuses a statement (under
// w.mu).
func (w *work) rewrite(ctx context.Context, kind callOptions, sql string, args []any) (string, []any, error) {
	var rewriter pgx.QueryRewriter
	var opts []any
	n := 0
	for ; n < len(args) && isOption(args[n], kind); n++ {
		if r, ok := args[n].(pgx.QueryRewriter); ok {
			rewriter = r
		} else {
			opts = append(opts, args[n])
		}
	}
	if rewriter == nil {
		return sql, args, nil
	}
	sql, rest, err := rewriter.RewriteQuery(ctx, w.conn, sql, args[n:])
	if err != nil {
		return "", nil, fmt.Errorf("rewrite query failed: %w", err)
	}
	if len(rest) > 0 && isOption(rest[0], kind) {
		err := fmt.Errorf("%w: a query rewriter returned arguments that begin with a pgx option", errStatementRefused)
		if w.refusal == nil {
			w.refusal = err // refused unsent, as refuseLocked's
		}
		return "", nil, err
	}
	return sql, append(opts, rest...), nil
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
	case pgx.QueryExecMode, pgx.QueryRewriter, pgx.QueryResultFormats, pgx.QueryResultFormatsByOID:
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
	rewritten, args, err := w.rewrite(ctx, execOptions, sql, args)
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	if rewritten != sql { // the same text was checked above
		if err := w.refuseLocked(rewritten); err != nil {
			return pgconn.CommandTag{}, err
		}
		sql = rewritten
	}
	args, plain := w.extended(args)
	if plain {
		r := w.conn.PgConn().ExecParams(ctx, sql, nil, nil, nil, nil).Read()
		return r.CommandTag, r.Err
	}
	return w.conn.Exec(ctx, sql, args...)
}

// Prepare prepares sql on the transaction's connection. A name that
// begins with that of pgx's statement cache (stmtcache_), which pgx
// would take for its own, is refused, and the work rolled back.
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
	if strings.HasPrefix(name, "stmtcache_") {
		err := errors.New("pgstore: a prepared statement's name may not begin with \"stmtcache_\": pgx's statement cache prepares statements under such names on the connection")
		if w.refusal == nil {
			w.refusal = err
		}
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
		if sql, args, err = w.rewrite(ctx, queryOptions, sql, args); err != nil {
			return &workRows{w: w, closed: true, err: err}, err
		}
		if err := w.refuseLocked(sql); err != nil {
			return &workRows{w: w, closed: true, err: err}, err
		}
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
		// A query's rewriter is applied here, as pgx would, so that
		// the statement refused or sent is the rewritten one.
		sql, args, err := w.rewrite(ctx, batchOptions, q.SQL, q.Arguments)
		if err != nil {
			return pgx.FailedBatchResults(b, err)
		}
		q.SQL, q.Arguments = sql, args
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
