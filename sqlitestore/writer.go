package sqlitestore

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/ctoken/ctoken/replay"
)

// The group commit: a durable commit costs one fsync whatever it carries,
// so the writer commits every call waiting in one transaction. A batch of
// lease steps alone commits without an fsync in WAL mode: a lease a power
// cut takes back only ends early, and its work was not recorded as done.

type op struct {
	ctx     context.Context
	durable bool
	fn      func(q querier, now int64) error
	calls   int  // in fn's commit, set by the writer before fn runs
	again   bool // set by fn: run it in the next commit too (a sweep)
	err     error
	done    chan struct{}
}

// querier runs a step's statements on the writer's or a caller's connection.
type querier interface {
	exec(query string, args ...any) (sql.Result, error)
	queryRow(query string, args ...any) *sql.Row
}

type connQuerier struct {
	ctx  context.Context
	conn interface {
		ExecContext(context.Context, string, ...any) (sql.Result, error)
		QueryRowContext(context.Context, string, ...any) *sql.Row
	}
}

// execN runs a statement and returns how many rows it changed.
func execN(q querier, query string, args ...any) (int64, error) {
	res, err := q.exec(query, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

func (q connQuerier) exec(query string, args ...any) (sql.Result, error) {
	return q.conn.ExecContext(q.ctx, query, args...)
}

func (q connQuerier) queryRow(query string, args ...any) *sql.Row {
	return q.conn.QueryRowContext(q.ctx, query, args...)
}

// do runs fn in the transaction ctx carries for s, or else in a group
// commit; durable: on the disk before it is answered.
func (s *Store) do(ctx context.Context, durable bool, fn func(q querier, now int64) error) error {
	ctx = orBackground(ctx)
	if tx := s.txOf(ctx); tx != nil {
		ctx, cancel := s.bound(ctx)
		defer cancel()
		return tx.step(ctx, s, fn)
	}
	o := &op{durable: durable, fn: fn}
	// An idle writer: commit on the caller's goroutine, saving two
	// hand-offs, within the store's Timeout; otherwise queue, to share a
	// commit.
	if len(s.ops) == 0 {
		select {
		case s.writeMu <- struct{}{}:
			err := s.direct(ctx, o)
			<-s.writeMu
			return err
		default:
		}
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	return s.queue(ctx, o)
}

// queue hands o to the writer's goroutine, behind the calls already
// waiting, and waits for its answer within ctx.
func (s *Store) queue(ctx context.Context, o *op) error {
	o.ctx, o.done = ctx, make(chan struct{})
	select {
	case s.ops <- o:
	case <-ctx.Done():
		return unavailable(ctx, errors.New("the writer's queue is full"))
	case <-s.done:
		return fmt.Errorf("%w: store closed", ErrUnavailable)
	}
	select {
	case <-o.done:
		return o.err
	case <-s.done:
		return fmt.Errorf("%w: store closed", ErrUnavailable)
	case <-ctx.Done():
		// The step may still run: its outcome is unknown.
		return unavailable(ctx, errors.New("no answer from the writer"))
	}
}

func (s *Store) writer(ctx context.Context) {
	defer s.wg.Done()
	var again []*op
	for {
		batch := again
		if len(batch) == 0 {
			select {
			case <-ctx.Done():
			case o := <-s.ops:
				batch = append(batch, o)
			}
		}
		if ctx.Err() != nil {
			for _, o := range batch {
				o.err = fmt.Errorf("%w: store closed", ErrUnavailable)
				close(o.done)
			}
			s.drainOps()
			return
		}
	gather:
		for len(batch) < maxBatch {
			select {
			case o := <-s.ops:
				batch = append(batch, o)
			default:
				break gather
			}
		}
		again = s.run(ctx, batch)
	}
}

func (s *Store) drainOps() {
	for {
		select {
		case o := <-s.ops:
			o.err = fmt.Errorf("%w: store closed", ErrUnavailable)
			close(o.done)
		default:
			return
		}
	}
}

// run commits batch and answers its ops but those that asked to run
// again, which it returns.
func (s *Store) run(parent context.Context, batch []*op) (again []*op) {
	live := batch[:0:0]
	for _, o := range batch {
		if o.ctx.Err() != nil {
			o.err = unavailable(o.ctx, errors.New("deadline passed before the step ran"))
			close(o.done)
			continue
		}
		live = append(live, o)
	}
	if len(live) == 0 {
		return nil
	}
	err := s.commit(parent, live)
	for _, o := range live {
		if err != nil {
			o.err = err
		}
		if o.again && o.err == nil {
			again = append(again, o)
			continue
		}
		close(o.done)
	}
	return again
}

// direct commits o alone on the caller's goroutine, holding writeMu.
func (s *Store) direct(ctx context.Context, o *op) error {
	select {
	case <-s.done:
		return fmt.Errorf("%w: store closed", ErrUnavailable)
	default:
	}
	if ctx.Err() != nil {
		return unavailable(ctx, errors.New("deadline passed before the step ran"))
	}
	if err := s.commitLocked(context.WithoutCancel(ctx), []*op{o}); err != nil {
		return err
	}
	return o.err
}

// commit returns the batch's error; a step's own refusal stays in its op.
func (s *Store) commit(parent context.Context, batch []*op) error {
	ctx, cancel := s.bound(parent)
	defer cancel()
	select {
	case s.writeMu <- struct{}{}:
	case <-ctx.Done():
		return unavailable(ctx, errors.New("waiting for the store's writer"))
	}
	defer func() { <-s.writeMu }()
	return s.commitLocked(parent, batch)
}

func (s *Store) commitLocked(parent context.Context, batch []*op) (err error) {
	ctx, cancel := s.bound(parent)
	defer cancel()
	if err := s.guard.refused(); err != nil {
		return err
	}
	if err := s.repairErr(); err != nil {
		return err
	}
	defer func() {
		s.sawIOError(err)
		err = s.sawMalformed(err)
	}()
	wc, level, err := s.writerConn(ctx)
	if err != nil {
		return err
	}
	clean := false // no transaction open, settings as opened
	defer func() {
		if !clean {
			s.dropWriter()
		}
	}()
	durable := !s.wal
	for _, o := range batch {
		durable = durable || o.durable
	}
	if !durable && level > syncNormal {
		q := stmtQuerier{context.WithoutCancel(ctx), wc}
		if _, err := q.exec(`PRAGMA synchronous = NORMAL`); err != nil {
			return unavailable(ctx, err)
		}
		defer func() {
			if _, rerr := q.exec(`PRAGMA synchronous = ` + syncNames[level]); rerr != nil {
				clean = false
			}
		}()
	}
	if err := s.begin(ctx, wc); err != nil {
		return unavailable(ctx, err)
	}
	committed := false
	defer func() {
		if !committed {
			_, rerr := (stmtQuerier{context.WithoutCancel(ctx), wc}).exec(`ROLLBACK`)
			clean = rerr == nil
		}
	}()
	q := s.inTx(ctx, wc) // the lock is held: the steps run to their end
	now := s.now().UnixNano()
	seq, err := s.guard.step(q, s, now, durable)
	if err != nil {
		return unavailable(ctx, err) // a loss or a fence passes as it is
	}
	for _, o := range batch {
		o.calls = len(batch)
		if err := o.fn(q, now); err != nil {
			if !decided(err) {
				return unavailable(ctx, err)
			}
			o.err = err
		}
	}
	committed = true
	if _, err := q.exec(`COMMIT`); err != nil {
		clean = s.commitFailed(ctx, err)
		return unavailable(ctx, fmt.Errorf("commit: %w", err))
	}
	clean = true
	if durable {
		s.guard.saw(seq)
	}
	return nil
}

// checkpoint runs a PASSIVE checkpoint every ckptEvery writes, in place of
// SQLite's automatic one, whose error SQLite drops: this one's I/O error
// starts the repair. The caller holds writeMu.
func (s *Store) checkpoint(ctx context.Context, wc *wconn) {
	if wc.ckptEvery == 0 {
		return
	}
	if wc.sinceCkpt++; wc.sinceCkpt < wc.ckptEvery {
		return
	}
	var busy, log, done int
	err := (stmtQuerier{ctx, wc}).queryRow(`PRAGMA main.wal_checkpoint(PASSIVE)`).Scan(&busy, &log, &done)
	if err == nil {
		wc.sinceCkpt = 0
	}
	s.sawIOError(err)
}

// commitFailed rolls back after a failed COMMIT (or the repair's failed
// step), keeping the connection unless the rollback fails: one opened in
// its place could rebuild the WAL index from frames the page cache holds
// but the disk may not. The caller holds writeMu.
func (s *Store) commitFailed(ctx context.Context, err error) bool {
	s.sawIOError(err)
	if s.wc == nil {
		return true
	}
	if rollback(stmtQuerier{context.WithoutCancel(ctx), s.wc}) != nil {
		s.dropWriter()
	}
	return true
}

// rollback ends the transaction open on q's connection, if any; its
// error is a rollback's that failed, whose connection must be dropped.
func rollback(q stmtQuerier) error {
	_, err := q.exec(`ROLLBACK`)
	if err != nil && strings.Contains(err.Error(), "no transaction is active") {
		return nil
	}
	return err
}

// writerConn is the connection the store holds for its writes, its
// settings checked when opened and after each Work. The caller holds
// writeMu.
func (s *Store) writerConn(ctx context.Context) (*wconn, int, error) {
	wc, level, err := s.openWriter(ctx, false)
	if err != nil {
		return nil, 0, err
	}
	s.checkpoint(ctx, wc) // an I/O error starts the repair
	if err := s.repairErr(); err != nil {
		return nil, 0, err
	}
	return wc, level, nil
}

// openWriter is writerConn without the checkpoint; fresh: a second try.
func (s *Store) openWriter(ctx context.Context, fresh bool) (*wconn, int, error) {
	if s.wc == nil {
		conn, err := s.db.Conn(ctx)
		if err != nil {
			return nil, 0, unavailable(ctx, err)
		}
		s.wc = &wconn{conn: conn, stmts: make(map[string]*sql.Stmt)}
		if s.wal {
			// The store checkpoints at the pace the DSN asks.
			var pages int
			if err := (stmtQuerier{ctx, s.wc}).queryRow(`PRAGMA wal_autocheckpoint`).Scan(&pages); err != nil {
				s.dropWriter()
				return nil, 0, unavailable(ctx, err)
			}
			if err := (stmtQuerier{ctx, s.wc}).queryRow(`PRAGMA busy_timeout`).Scan(&s.wc.busy); err != nil {
				s.dropWriter()
				return nil, 0, unavailable(ctx, err)
			}
			s.wc.autockpt = pages
			if pages > 0 { // 0: the application checkpoints itself
				s.wc.ckptEvery = max(pages/2, 1)
			}
		}
	}
	if s.wc.level != 0 {
		return s.wc, s.wc.level, nil
	}
	// Again after a Work: a handler's value would bring SQLite's own
	// checkpoints back, or make begin wait without its context.
	if s.wal {
		for _, pragma := range []string{`PRAGMA wal_autocheckpoint = 0`, `PRAGMA busy_timeout = 0`} {
			if err := setPragma(stmtQuerier{ctx, s.wc}, pragma); err != nil {
				s.dropWriter()
				return nil, 0, unavailable(ctx, err)
			}
		}
	}
	var level, objects, triggers int
	var journal string
	if err := (stmtQuerier{ctx, s.wc}).queryRow(writerCheck, unquote(s.table)).Scan(&level, &journal, &objects, &triggers); err != nil {
		s.dropWriter()
		return nil, 0, unavailable(ctx, err)
	}
	if level < syncNormal || level < syncFull && !s.allowNormal {
		s.dropWriter()
		return nil, 0, fmt.Errorf("%w: %w: the store's connection runs synchronous=%s: set FULL in the DSN, for every connection, and never lower it in a handler", ErrUnavailable, ErrConfig, syncNames[level])
	}
	// A handler's journal_mode = OFF would make later rollbacks keep what
	// they undo.
	if j := strings.ToLower(journal); j != s.journal {
		s.dropWriter()
		return nil, 0, fmt.Errorf("%w: %w: the store's connection runs journal_mode=%s, not the %s it was opened with: set it in the DSN, for every connection, and never change it in a handler", ErrUnavailable, ErrConfig, strings.ToUpper(j), strings.ToUpper(s.journal))
	}
	// A handler's temporary objects (a temporary trigger fires for the
	// store's statements) never outlive its Work: take a clean connection.
	if objects != 0 {
		s.dropWriter()
		if fresh {
			return nil, 0, fmt.Errorf("%w: a new connection of the pool holds temporary objects or attached databases", ErrUnavailable)
		}
		return s.openWriter(ctx, true)
	}
	if triggers != 0 {
		s.dropWriter()
		return nil, 0, fmt.Errorf("%w: %w", ErrUnavailable, errTriggered)
	}
	s.wc.level = level
	if s.wal && s.guard.wal.Load() == nil {
		// The WAL exists now, and SQLite keeps it while this connection is
		// open: record it for guard.walGone, and link it (wal.go).
		if info, err := os.Stat(s.path + "-wal"); err == nil {
			s.guard.wal.Store(&info)
			s.relinkWAL()
		}
	}
	return s.wc, level, nil
}

// writerCheck reads what a handler could have left on the writer's
// connection; the argument is the table's name.
const writerCheck = `SELECT ` + connSettingsSQL + `, ` + connObjectsSQL + `, ` + mainTriggersSQL

// The parts of writerCheck, commitCheck and stepIn.
const (
	connSettingsSQL = `(SELECT synchronous FROM pragma_synchronous), (SELECT journal_mode FROM pragma_journal_mode)`
	connObjectsSQL  = `(SELECT count(*) FROM temp.sqlite_master) + (SELECT count(*) FROM pragma_database_list WHERE name NOT IN ('main', 'temp'))`
	mainTriggersSQL = `(SELECT count(*) FROM main.sqlite_master WHERE type = 'trigger' AND lower(tbl_name) = lower(?))`
	tempTriggersSQL = `(SELECT count(*) FROM temp.sqlite_master WHERE type = 'trigger' AND lower(tbl_name) = lower(?))`
)

// dropWriter discards the writer's connection, waiting a second at most
// for a handler's Rows left open. The caller holds writeMu.
func (s *Store) dropWriter() {
	if s.wc == nil {
		return
	}
	wc := s.wc
	s.wc = nil
	s.guard.wal.Store(nil) // before the close, which may delete the WAL
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		for _, st := range wc.stmts {
			st.Close()
		}
		discard(wc.conn)
	}()
	t := time.NewTimer(time.Second)
	defer t.Stop()
	select {
	case <-closed:
	case <-t.C:
		s.log.Warn("sqlitestore: closing the store's connection waits for a handler's Rows left open on it (close them before the handler returns)", "table", unquote(s.table))
	}
}

// closeWriter gives the writer's connection back at Close, under writeMu.
func (s *Store) closeWriter() {
	if s.wc == nil {
		return
	}
	s.guard.wal.Store(nil)
	// No transaction goes back to the application's pool: one was found
	// open there after a Close midway through a repair.
	rerr := rollback(stmtQuerier{context.Background(), s.wc})
	for _, st := range s.wc.stmts {
		st.Close()
	}
	if rerr != nil {
		discard(s.wc.conn)
		s.wc = nil
		return
	}
	if s.wal {
		for _, pragma := range []string{`PRAGMA wal_autocheckpoint = ` + strconv.Itoa(s.wc.autockpt), `PRAGMA busy_timeout = ` + strconv.Itoa(s.wc.busy)} {
			if _, err := s.wc.conn.ExecContext(context.Background(), pragma); err != nil {
				discard(s.wc.conn)
				s.wc = nil
				return
			}
		}
	}
	s.wc.conn.Close()
	s.wc = nil
}

// wconn is the writer's connection and its prepared statements, by text.
type wconn struct {
	conn  *sql.Conn
	stmts map[string]*sql.Stmt
	level int // synchronous as last read; 0: to be read
	// autockpt is the DSN's wal_autocheckpoint; ckptEvery 0: the
	// application checkpoints.
	autockpt, ckptEvery, sinceCkpt int
	busy                           int // the DSN's busy_timeout (WAL mode: see begin)
}

// stmtQuerier runs statements on the writer's connection, prepared once.
type stmtQuerier struct {
	ctx context.Context
	wc  *wconn
}

// begin runs BEGIN IMMEDIATE on the writer's connection. In WAL mode it
// first tries without ctx (modernc and mattn start a goroutine for each
// statement run with a context that can end) and without a wait: the
// connection runs with busy_timeout 0 (openWriter); then it waits.
func (s *Store) begin(ctx context.Context, wc *wconn) error {
	if s.wal {
		_, err := stmtQuerier{context.WithoutCancel(ctx), wc}.exec(`BEGIN IMMEDIATE`)
		if err == nil || !strings.Contains(err.Error(), "database is locked") {
			return err
		}
	}
	return s.waiting(ctx, wc, `BEGIN IMMEDIATE`)
}

// waiting runs query on the writer's connection within ctx, waiting for
// other connections as long as the DSN's busy_timeout allows.
func (s *Store) waiting(ctx context.Context, wc *wconn, query string) error {
	if !s.wal {
		_, err := stmtQuerier{ctx, wc}.exec(query)
		return err
	}
	q := stmtQuerier{context.WithoutCancel(ctx), wc}
	if err := setPragma(q, `PRAGMA busy_timeout = `+strconv.Itoa(wc.busy)); err != nil {
		return err
	}
	_, err := stmtQuerier{ctx, wc}.exec(query)
	if rerr := setPragma(q, `PRAGMA busy_timeout = 0`); rerr != nil {
		wc.level = 0 // openWriter sets it again
	}
	return err
}

// inTx is the querier after BEGIN IMMEDIATE. In WAL mode its statements
// wait for no one, so they run to their end: an interrupt would only
// leave the outcome in doubt. In other modes COMMIT waits for readers.
func (s *Store) inTx(ctx context.Context, wc *wconn) stmtQuerier {
	if !s.wal {
		return stmtQuerier{ctx, wc}
	}
	return stmtQuerier{context.WithoutCancel(ctx), wc}
}

func (q stmtQuerier) stmt(query string) *sql.Stmt {
	st, ok := q.wc.stmts[query]
	if !ok {
		var err error
		if st, err = q.wc.conn.PrepareContext(q.ctx, query); err != nil {
			return nil
		}
		q.wc.stmts[query] = st
	}
	return st
}

func (q stmtQuerier) exec(query string, args ...any) (sql.Result, error) {
	if st := q.stmt(query); st != nil {
		return st.ExecContext(q.ctx, args...)
	}
	// Unprepared, which reports the error.
	return q.wc.conn.ExecContext(q.ctx, query, args...)
}

// setPragma runs a PRAGMA that answers a row and reads it: run with exec,
// mattn/go-sqlite3 leaves the statement in progress, and a later VACUUM
// on the connection fails.
func setPragma(q querier, query string) error {
	var v any
	return q.queryRow(query).Scan(&v)
}

func (q stmtQuerier) queryRow(query string, args ...any) *sql.Row {
	if st := q.stmt(query); st != nil {
		return st.QueryRowContext(q.ctx, args...)
	}
	return q.wc.conn.QueryRowContext(q.ctx, query, args...)
}

// discard closes conn and makes the pool drop it.
func discard(conn *sql.Conn) {
	_ = conn.Raw(func(any) error { return driver.ErrBadConn })
	conn.Close()
}

// decided reports a step's refusal that wrote nothing.
func decided(err error) bool {
	return errors.Is(err, ErrInvalidClaim) || errors.Is(err, replay.ErrLeaseLost) ||
		errors.Is(err, replay.ErrTooLarge) || errors.Is(err, errEscaped)
}

func (s *Store) sweeper(ctx context.Context) {
	defer s.wg.Done()
	t := time.NewTicker(s.sweepInt)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			n, err := s.Sweep(ctx)
			if ctx.Err() != nil {
				return // Close: the rest of the backlog waits for the next store
			}
			if err != nil {
				s.log.Warn("sqlitestore: sweeping expired rows failed", "table", unquote(s.table), "err", err)
			}
			s.observe(replay.Event{Kind: replay.EventSwept, Deleted: n, Reason: err})
		}
	}
}

// Sweep deletes every row expired when it starts and returns how many it
// deleted. It deletes in every commit of the store's writer until none is
// left: 100 rows in a commit of its own, twice as many as the other calls
// can write in a shared one. A call waits for one such step at most, and
// the sweep keeps pace with any rate of claims. It stops early when ctx
// ends. An expired row is already free; sweeping only reclaims its space,
// which SQLite reuses for new rows.
func (s *Store) Sweep(ctx context.Context) (int64, error) {
	if err := s.ready(); err != nil {
		return 0, err
	}
	ctx = orBackground(ctx)
	start := s.now().UnixNano()
	del := `DELETE FROM ` + s.table + ` WHERE key IN (SELECT key FROM ` + s.table +
		` WHERE until <= ? AND state <> 'm' AND state <> 'w' LIMIT ?)`
	var swept atomic.Int64 // the steps' rows, once committed
	var last int64         // the last step's, committed if it ran again or its op ended well
	o := &op{}
	o.fn = func(q querier, now int64) error {
		swept.Add(last)
		limit := int64(sweepStep)
		if o.calls > 1 { // each call writes one row at most
			limit = int64(2 * (o.calls - 1))
		}
		// The rows expired at the start; now if the clock stepped back.
		n, err := execN(q, del, min(start, now), limit)
		last, o.again = n, n == limit
		return err
	}
	var err error
	if s.txOf(ctx) != nil {
		for o.again = true; o.again && err == nil; {
			err = s.do(ctx, false, o.fn) // in the caller's transaction
		}
	} else {
		err = s.queue(ctx, o)
	}
	if err != nil {
		return swept.Load(), err
	}
	return swept.Load() + last, nil
}

// sweepStep is how many rows a sweep's step deletes in a commit of its
// own: about a claim's own write (docs/benchmarks.md).
const sweepStep = 100
