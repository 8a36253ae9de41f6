package pgstore

import (
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
)

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
