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
	"time"

	"github.com/ctoken/ctoken/replay"
)

// The group commit. SQLite has one writer per database, and a durable
// commit costs one fsync of the journal whatever it carries, so the store
// does not give every call a transaction of its own: calls queue for the
// store's writer goroutine, which takes every call waiting (up to
// maxBatch) into one IMMEDIATE transaction on the store's own connection
// (see writerConn), runs
// their steps one after the other (each step reads its row and writes it,
// alone in the transaction, so each is atomic per ID), commits once, and
// only then answers each call. While one batch commits, the next one
// gathers, so 64 concurrent callers share a handful of fsyncs instead of
// queueing for 64.
//
// A step refused for a reason of its own (an expired until, a lost lease)
// wrote nothing and is answered with its error; the others commit. A step
// that failed in SQLite aborts the whole batch: every call in it gets
// ErrUnavailable, and nothing of the batch is kept.
//
// A batch holding only lease acquisitions and releases commits without
// waiting for the disk in WAL mode (synchronous=NORMAL for that commit):
// a lease lost in a power cut ends early, which is safe, since the work it
// guarded was not recorded as done either (a later durable commit writes
// the WAL up to and including it). Every claim and confirmation commits
// with FULL.

// op is one call waiting for the writer.
type op struct {
	ctx     context.Context
	durable bool
	fn      func(q querier, now int64) error
	err     error
	done    chan struct{}
}

// querier runs a step's statements on the writer's connection or in a
// caller's transaction.
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

func (q connQuerier) exec(query string, args ...any) (sql.Result, error) {
	return q.conn.ExecContext(q.ctx, query, args...)
}

func (q connQuerier) queryRow(query string, args ...any) *sql.Row {
	return q.conn.QueryRowContext(q.ctx, query, args...)
}

// do runs fn as one step: in the transaction ctx carries for this store,
// or else in the writer's next group commit. durable says whether the
// step must be on the disk before it is answered.
func (s *Store) do(ctx context.Context, durable bool, fn func(q querier, now int64) error) error {
	if ctx == nil {
		ctx = context.Background()
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	if tx := s.txOf(ctx); tx != nil {
		return tx.step(ctx, s, fn)
	}
	o := &op{ctx: ctx, durable: durable, fn: fn}
	// An idle writer: the step commits on the caller's goroutine, saving
	// the two hand-offs to the writer goroutine and back. A step that
	// finds others queued, or a commit under way, queues, so concurrent
	// steps still share a commit.
	if len(s.ops) == 0 {
		select {
		case s.writeMu <- struct{}{}:
			err := s.direct(ctx, o)
			<-s.writeMu
			return err
		default:
		}
	}
	o.done = make(chan struct{})
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
		// The step may still run: its outcome is unknown, as after a lost
		// reply.
		return unavailable(ctx, errors.New("no answer from the writer"))
	}
}

// writer is the store's one goroutine that writes outside transactions
// of callers.
func (s *Store) writer(ctx context.Context) {
	defer s.wg.Done()
	for {
		var batch []*op
		select {
		case <-ctx.Done():
			s.drainOps()
			return
		case o := <-s.ops:
			batch = append(batch, o)
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
		s.run(ctx, batch)
	}
}

// drainOps answers every call still queued when the store closes.
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

// run commits one batch and answers its calls.
func (s *Store) run(parent context.Context, batch []*op) {
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
		return
	}
	err := s.commit(parent, live)
	for _, o := range live {
		if err != nil {
			o.err = err
		}
		close(o.done)
	}
}

// direct commits o alone on the caller's goroutine, as the writer would.
// Like the writer's, its statements run to their end even if the caller's
// context ends (within the store's timeout). The caller holds writeMu.
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

// commit runs the batch in one transaction on the writer's connection.
// It returns an error for the whole batch; a step's own refusal is left
// in its op.
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

// commitLocked is commit with writeMu held.
func (s *Store) commitLocked(parent context.Context, batch []*op) (err error) {
	ctx, cancel := s.bound(parent)
	defer cancel()
	if err := s.guard.refused(); err != nil {
		return err
	}
	if err := s.repairErr(); err != nil {
		return err
	}
	defer func() { s.sawIOError(err) }()
	wc, level, err := s.writerConn(ctx)
	if err != nil {
		return err
	}
	clean := false // no transaction open, settings as the connection was opened
	defer func() {
		if !clean {
			s.dropWriter()
		}
	}()
	durable := !s.wal
	for _, o := range batch {
		durable = durable || o.durable
	}
	q := stmtQuerier{ctx, wc}
	// In WAL mode a batch of lease steps alone commits without an fsync
	// (see above), and the connection gets its own setting back after.
	if !durable && level > syncNormal {
		if _, err := q.exec(`PRAGMA synchronous = NORMAL`); err != nil {
			return unavailable(ctx, err)
		}
		defer func() {
			if _, rerr := (stmtQuerier{context.WithoutCancel(ctx), wc}).exec(`PRAGMA synchronous = ` + syncNames[level]); rerr != nil {
				clean = false
			}
		}()
	}
	if _, err := q.exec(`BEGIN IMMEDIATE`); err != nil {
		return unavailable(ctx, err)
	}
	committed := false
	defer func() {
		if !committed {
			_, rerr := (stmtQuerier{context.WithoutCancel(ctx), wc}).exec(`ROLLBACK`)
			clean = rerr == nil
		}
	}()
	q = s.inTx(ctx, wc) // the lock is held: the steps run to their end
	now := s.now().UnixNano()
	seq, err := s.guard.step(q, s, now, durable)
	if err != nil {
		if errors.Is(err, ErrForgotten) || errors.As(err, new(fenced)) {
			return err
		}
		return unavailable(ctx, err)
	}
	for _, o := range batch {
		if err := o.fn(q, now); err != nil {
			if !decided(err) {
				return unavailable(ctx, err)
			}
			o.err = err
		}
	}
	committed = true
	if _, err := q.exec(`COMMIT`); err != nil {
		// The outcome is unknown to the callers. The connection is kept,
		// rolled back (see commitFailed).
		clean = s.commitFailed(ctx, err)
		return unavailable(ctx, fmt.Errorf("commit: %w", err))
	}
	clean = true
	if durable {
		s.guard.saw(seq)
	}
	return nil
}

// checkpoint runs, on the writer's connection, the checkpoint SQLite
// would run after a commit (PASSIVE) when it is due: every ckptEvery
// writes. SQLite drops the error of the checkpoint it runs after a commit
// (wal_autocheckpoint), so the store turns that one off on its connection
// and runs this one, whose I/O error starts the repair (repair.go). The
// caller holds writeMu.
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
	s.sawIOError(err) // any other error: tried again at the next write
}

// commitFailed ends the transaction of a COMMIT that failed (or of a
// write in autocommit), whose outcome is unknown. The connection is
// kept, not discarded: a connection opened in its place may rebuild the
// WAL index from the frames of the failed commit, which the page cache
// holds but the disk may not (see above). It reports whether the
// connection is clean: no transaction left open; when ROLLBACK fails
// otherwise than for no transaction, the connection is discarded. The
// caller holds writeMu.
func (s *Store) commitFailed(ctx context.Context, err error) bool {
	s.sawIOError(err)
	if s.wc == nil {
		return true
	}
	_, rerr := (stmtQuerier{context.WithoutCancel(ctx), s.wc}).exec(`ROLLBACK`)
	if rerr != nil && !strings.Contains(rerr.Error(), "no transaction is active") {
		s.dropWriter()
	}
	return true
}

// writerConn is the store's writer connection: one connection of the pool
// that the store holds for its life, with its statements prepared once,
// so a commit neither checks a connection out of the pool nor compiles
// its statements again. It is opened at the first write (and again after
// a commit or a Work left it in doubt, which closes it). Its synchronous
// and journal_mode settings are read when it is opened and again at the
// first use after each Work (a handler's statements are the only ones but
// the store's that reach it): a lowered synchronous or another journal
// refuses the write and closes the connection, so nothing is ever
// committed on it. A connection holding
// temporary objects (a handler's temporary trigger on the store's table
// would fire for the store's statements) or attached databases is closed
// then too, and replaced by another; a trigger on the store's table in
// main refuses the write. The caller holds writeMu.
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

// openWriter is writerConn; fresh says the connection is a second one,
// taken after the first held a handler's objects.
func (s *Store) openWriter(ctx context.Context, fresh bool) (*wconn, int, error) {
	if s.wc == nil {
		conn, err := s.db.Conn(ctx)
		if err != nil {
			return nil, 0, unavailable(ctx, err)
		}
		s.wc = &wconn{conn: conn, stmts: make(map[string]*sql.Stmt)}
		if s.wal {
			// The checkpoint after a commit is the store's (see
			// checkpoint), at the pace the connection's setting asks.
			var pages int
			if err := (stmtQuerier{ctx, s.wc}).queryRow(`PRAGMA wal_autocheckpoint`).Scan(&pages); err != nil {
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
	// Set on a new connection, and again after a Work that ended
	// otherwise than by its commit (which sets it back: see untriggered):
	// a handler's statements run on this connection. With the DSN's 0
	// too: the application checkpoints, and a handler's value would
	// bring SQLite's own checkpoints back.
	if s.wal {
		if err := setPragma(stmtQuerier{ctx, s.wc}, `PRAGMA wal_autocheckpoint = 0`); err != nil {
			s.dropWriter()
			return nil, 0, unavailable(ctx, err)
		}
	}
	// One statement reads what a handler's statements could have left on
	// the connection (writerCheck).
	var (
		level, objects, triggers int
		journal                  string
	)
	if err := (stmtQuerier{ctx, s.wc}).queryRow(writerCheck, unquote(s.table)).Scan(&level, &journal, &objects, &triggers); err != nil {
		s.dropWriter()
		return nil, 0, unavailable(ctx, err)
	}
	if level < syncNormal || level < syncFull && !s.allowNormal {
		s.dropWriter()
		return nil, 0, fmt.Errorf("%w: %w: the store's connection runs synchronous=%s: set FULL in the DSN, for every connection, and never lower it in a handler", ErrUnavailable, ErrConfig, syncNames[level])
	}
	// The journal too: a handler's PRAGMA journal_mode = OFF (after its
	// ROLLBACK) would make every later rollback of the connection keep
	// what it was to undo.
	if j := strings.ToLower(journal); j != s.journal {
		s.dropWriter()
		return nil, 0, fmt.Errorf("%w: %w: the store's connection runs journal_mode=%s, not the %s it was opened with: set it in the DSN, for every connection, and never change it in a handler", ErrUnavailable, ErrConfig, strings.ToUpper(j), strings.ToUpper(s.journal))
	}
	// A handler's temporary objects (a temporary trigger on the store's
	// table fires for the store's own statements) and attached databases
	// never outlive its Work: the connection is replaced by a clean one.
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
		// The WAL exists now (the trigger count read the database), and
		// SQLite keeps it while this connection is open: the checker
		// refuses when the path no longer names this file (see
		// guard.walGone).
		if info, err := os.Stat(s.path + "-wal"); err == nil {
			s.guard.wal.Store(&info)
			// Kept for New's look after a restart (wal.go); never
			// after a loss, whose WAL stays linked for the next New.
			s.relinkWAL()
		}
	}
	return s.wc, level, nil
}

// writerCheck reads, in one statement, the writer connection's
// synchronous level and journal_mode, its temporary schema objects and
// attached databases (none on a connection as the pool opened it), and
// the triggers on the store's table in main (its name the argument).
const writerCheck = `SELECT ` + connSettingsSQL + `, ` + connObjectsSQL + `, ` + mainTriggersSQL

// The parts of writerCheck that commitCheck and stepIn read too: a
// connection's synchronous level and journal_mode; its temporary schema
// objects and attached databases; the triggers on the store's table (its
// name the argument) in main and in temp.
const (
	connSettingsSQL = `(SELECT synchronous FROM pragma_synchronous), (SELECT journal_mode FROM pragma_journal_mode)`
	connObjectsSQL  = `(SELECT count(*) FROM temp.sqlite_master) + (SELECT count(*) FROM pragma_database_list WHERE name NOT IN ('main', 'temp'))`
	mainTriggersSQL = `(SELECT count(*) FROM main.sqlite_master WHERE type = 'trigger' AND lower(tbl_name) = lower(?))`
	tempTriggersSQL = `(SELECT count(*) FROM temp.sqlite_master WHERE type = 'trigger' AND lower(tbl_name) = lower(?))`
)

// dropWriter closes the writer's connection and its statements, and makes
// the pool drop the connection rather than reuse it. A handler's Rows
// left open on the connection make closing it wait until they are
// closed: the store's writer waits for that a second at most, and the
// connection closes when they do. The caller holds writeMu.
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

// closeWriter gives the writer's connection back to the pool when the
// store closes. The caller holds writeMu.
func (s *Store) closeWriter() {
	if s.wc == nil {
		return
	}
	s.guard.wal.Store(nil)
	for _, st := range s.wc.stmts {
		st.Close()
	}
	// The pool gets the connection back with its own checkpoints, or
	// not at all.
	if s.wal {
		if _, err := s.wc.conn.ExecContext(context.Background(), `PRAGMA wal_autocheckpoint = `+strconv.Itoa(s.wc.autockpt)); err != nil {
			discard(s.wc.conn)
			s.wc = nil
			return
		}
	}
	s.wc.conn.Close()
	s.wc = nil
}

// wconn is the writer's connection and its prepared statements, keyed by
// their text (the store's own statements: a bounded set).
type wconn struct {
	conn  *sql.Conn
	stmts map[string]*sql.Stmt
	level int // synchronous as last read; 0: to be read (new, or after a Work)
	// autockpt is the connection's wal_autocheckpoint as the pool opened
	// it (given back at closeWriter); the store checkpoints every
	// ckptEvery writes (0: never; the application does), sinceCkpt since
	// the last.
	autockpt, ckptEvery, sinceCkpt int
}

// stmtQuerier runs the store's statements on the writer's connection,
// each prepared at its first use.
type stmtQuerier struct {
	ctx context.Context
	wc  *wconn
}

// inTx is the querier of the statements that follow a BEGIN IMMEDIATE on
// wc. In WAL mode they run to their end whatever ctx does: the connection
// holds SQLite's write lock, so they wait for no other connection (COMMIT
// appends to the WAL), and an interrupt would only leave the
// transaction, and at COMMIT its outcome, in doubt. A context that cannot
// end also spares each statement the driver's and database/sql's watch
// of it (a goroutine and its allocations per statement on modernc: 189 →
// 150 allocations per transactional request, BENCHMARKS.md). In the
// rollback-journal modes a COMMIT (or a spill of the page cache) waits
// for other connections' readers to take the exclusive lock, a wait the
// caller's context bounds on drivers whose busy handler heeds it
// (ncruces): there ctx is kept.
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
	// Not prepared: run it unprepared, which reports the error.
	return q.wc.conn.ExecContext(q.ctx, query, args...)
}

// setPragma runs a PRAGMA that sets a value and answers it in a row, as
// wal_autocheckpoint does, and reads the row. Run with exec, the
// statement would stay on its row, in progress, on mattn/go-sqlite3
// (whose Exec of a prepared statement does not reset it), and a VACUUM on
// the connection would fail ("SQL statements in progress"): the rewrite
// after an I/O error never finished on that driver
// (TestSQLiteWritebackErrorThenPowerCut in .ci/powerloss).
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

// discard closes conn and makes the pool drop it rather than reuse it: a
// connection whose transaction or settings are in doubt never serves
// another caller.
func discard(conn *sql.Conn) {
	_ = conn.Raw(func(any) error { return driver.ErrBadConn })
	conn.Close()
}

// decided reports a step's refusal that wrote nothing and leaves the rest
// of the batch to commit.
func decided(err error) bool {
	return errors.Is(err, ErrInvalidClaim) || errors.Is(err, replay.ErrLeaseLost) ||
		errors.Is(err, replay.ErrTooLarge) || errors.Is(err, errEscaped)
}

// sweeper deletes expired rows every SweepInterval.
func (s *Store) sweeper(ctx context.Context) {
	defer s.wg.Done()
	t := time.NewTicker(s.sweepInt)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if _, err := s.Sweep(ctx); err != nil && ctx.Err() == nil {
				s.log.Warn("sqlitestore: sweeping expired rows failed", "table", unquote(s.table), "err", err)
			}
		}
	}
}

// Sweep deletes up to 1 000 expired rows and returns how many it
// deleted, in steps of sweepStep rows, each a step of the writer of its
// own: calls that arrive meanwhile are served between two steps, so a
// sweep holds the writer for the deletion of sweepStep rows at most. An
// expired row is already free for every operation; sweeping only
// reclaims its space. The store's own sweeper calls it every
// Options.SweepInterval.
func (s *Store) Sweep(ctx context.Context) (int64, error) {
	if err := s.ready(); err != nil {
		return 0, err
	}
	var total int64
	for total < sweepMax {
		var n int64
		err := s.do(context.WithoutCancel(ctx), false, func(q querier, now int64) error {
			res, err := q.exec(`DELETE FROM `+s.table+` WHERE key IN (SELECT key FROM `+s.table+
				` WHERE until <= ? AND state <> 'm' AND state <> 'w' LIMIT `+strconv.Itoa(sweepStep)+`)`, now)
			if err == nil {
				n, err = res.RowsAffected()
			}
			return err
		})
		if err != nil {
			return total, err
		}
		total += n
		if n < sweepStep {
			break
		}
	}
	return total, nil
}

// A sweep deletes sweepMax rows at most, sweepStep in each step of the
// writer.
const (
	sweepMax  = 1000
	sweepStep = 100
)
