package sqlitestore

import (
	"context"
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ctoken/ctoken/replay"
)

// DefaultPrefix is the key prefix used when Options.Prefix is empty.
const DefaultPrefix = "ctoken:replay:"

// DefaultTable is the table used when Options.Table is empty.
const DefaultTable = "ctoken_replay"

// DefaultTimeout bounds each call when Options.Timeout is zero.
const DefaultTimeout = 2 * time.Second

// DefaultHorizon is the longest a claim, a confirmation or a lease may
// last when Options.Horizon is zero: a day for idempotency keys (the
// middleware's default retention), plus an hour.
const DefaultHorizon = 25 * time.Hour

// DefaultRecheckInterval is how often a Store repeats New's checks of the
// database when Options.RecheckInterval is zero.
const DefaultRecheckInterval = time.Second

// DefaultSweepInterval is how often a Store deletes expired rows when
// Options.SweepInterval is zero.
const DefaultSweepInterval = 30 * time.Second

// MaxIDBytes is the longest ID the store accepts. Longer IDs are refused
// with ErrInvalidClaim before anything is written.
const MaxIDBytes = 512

// MaxPrefixBytes is the longest Options.Prefix New accepts.
const MaxPrefixBytes = 256

// maxBatch bounds how many calls one group commit carries.
const maxBatch = 256

// Sentinel errors, usable with errors.Is.
var (
	// ErrUnavailable reports that the store could not decide: the database
	// is locked by another process beyond its busy_timeout, read-only,
	// full, unreadable, being repaired after an I/O error, or answered
	// anything unexpected, or the call's deadline passed. When the caller's context had ended, the error also
	// matches the context's error. The claim may or may not have been
	// recorded; the caller must refuse the request. Resending it is safe.
	// It matches [replay.ErrUnavailable].
	ErrUnavailable error = &sentinel{"sqlitestore: replay store unavailable", replay.ErrUnavailable}

	// ErrInvalidClaim reports a call refused without recording anything:
	// an empty ID or one over MaxIDBytes, a lease that is not positive or
	// longer than the horizon, or an until that is not after the store's
	// clock (these two also match [replay.ErrExpired]) or past the
	// horizon. It matches [replay.ErrInvalidClaim].
	ErrInvalidClaim error = &sentinel{"sqlitestore: invalid claim", replay.ErrInvalidClaim}

	// ErrForgotten reports that the database no longer remembers the
	// claims it acknowledged: the table lost its marker row (emptied or
	// dropped), the database file was deleted and made again, it was
	// replaced by an older copy (a restored backup), or its WAL was
	// deleted with commits the file lacks. Every call then
	// refuses (the error also matches ErrUnavailable) until an operator
	// runs [Rearm] and its fence has passed.
	ErrForgotten = fmt.Errorf("%w: the database has forgotten claims it acknowledged", ErrUnavailable)

	// ErrConfig reports a store that cannot be built as configured: a nil
	// database, an in-memory or temporary database, a journal that loses
	// commits (journal_mode OFF or MEMORY), synchronous below FULL without
	// AllowNormalSync, busy_timeout 0, a pool limited to one connection,
	// a read-only connection, a missing table (run [Migrate]), an invalid
	// table name, a Prefix over MaxPrefixBytes, or a negative option; and
	// a running store's refusal of a connection a handler lowered. It
	// matches [replay.ErrConfig], so the middlewares answer it as a
	// refusal only an operator can lift.
	ErrConfig error = &sentinel{"sqlitestore: invalid configuration", replay.ErrConfig}
)

// sentinel is one of the store's errors: its own text, and it matches
// its counterpart in package replay (ErrConfig, ErrUnavailable,
// ErrInvalidClaim), so code written against replay's vocabulary, the
// middlewares' answer to a refusal only an operator can lift among it,
// holds on every store.
type sentinel struct {
	msg    string
	shared error
}

func (e *sentinel) Error() string        { return e.msg }
func (e *sentinel) Is(target error) bool { return target == e.shared }

// Options configures a Store. The zero value is ready to use with a
// database opened as the package documentation shows.
type Options struct {
	// Table is the table's name: a lower-case SQL identifier
	// ([a-z_][a-z0-9_]*, at most 48 bytes). Empty means DefaultTable.
	Table string

	// Prefix, with its length, is prepended to every ID to form the row's
	// key, so several stores can share one table without seeing each
	// other's claims. Empty means DefaultPrefix; longer than
	// MaxPrefixBytes is refused with ErrConfig.
	Prefix string

	// Timeout bounds every call: the effective deadline is the earlier of
	// the caller's context deadline and now + Timeout. Zero means
	// DefaultTimeout; a negative value means only the caller's context
	// bounds the call.
	Timeout time.Duration

	// Horizon is the longest a claim or a confirmation may be held, and
	// the longest lease: a longer one is refused with ErrInvalidClaim
	// ([replay.Bounded]). It is also the fence [Rearm] suggests after a
	// loss. Zero means DefaultHorizon; negative is refused.
	Horizon time.Duration

	// AllowNormalSync lets New accept a database in WAL mode whose
	// connections run with synchronous=NORMAL. SQLite then acknowledges a
	// commit before it is on the disk: a crash of the process loses
	// nothing, but a power cut or a crash of the machine forgets the last
	// acknowledged claims, which may then be accepted again. Without it
	// New refuses synchronous below FULL with ErrConfig. While it is in
	// force, New logs a Warn naming this option. A power cut that takes
	// back commits the store recorded beside the file (see the package
	// documentation) is then found as a loss: New refuses with
	// ErrForgotten until an operator runs Rearm.
	AllowNormalSync bool

	// RecheckInterval is how often the store repeats New's checks (the
	// connection's settings, the marker row, the database file's identity
	// and sequence) on a goroutine of its own, and records the sequence it
	// saw beside the database (see the package documentation). Zero means
	// DefaultRecheckInterval; negative is refused.
	RecheckInterval time.Duration

	// SweepInterval is how often the store deletes expired rows. Zero
	// means DefaultSweepInterval; a negative value runs no sweeper (call
	// [Store.Sweep] yourself).
	SweepInterval time.Duration

	// Observer, when not nil, is called with every [Event]: the risk
	// AllowNormalSync accepts, a check or a repair after an I/O error that
	// starts or stops refusing. It is called synchronously (from New, the
	// checker, the repair or the call that met the error) and must not
	// block.
	Observer func(Event)

	// Logger receives the store's warnings. Nil means slog.Default(). Lines
	// hold no ID, token or key.
	Logger *slog.Logger
}

// Store is a [replay.Store] on one SQLite database, for servers on one
// machine (one process or several sharing the file) that must accept each
// single-use ID exactly once, across restarts of the process and of the
// machine. It implements [replay.Releaser], [replay.Leaser],
// [replay.Recorder], [replay.Bounded], [replay.Transactor] and
// [replay.WorkAcquirer]. It is safe for concurrent use. A zero Store refuses every call with ErrConfig.
type Store struct {
	db          *sql.DB
	table       string // quoted, in the main schema: main."name" (a temporary table of the name never shadows it)
	prefix      string
	timeout     time.Duration
	horizon     time.Duration
	normal      bool // a connection ran synchronous=NORMAL at New (AllowNormalSync)
	allowNormal bool
	wal         bool
	journal     string // journal_mode at New, lower case
	boot        string // the kernel's boot id at New ("" where there is none)
	path        string // the main database file
	walLink     string // this Store's link to the WAL its writer holds (see wal.go)
	log         *slog.Logger
	observer    func(Event)
	now         func() time.Time
	recheck     time.Duration
	sweepInt    time.Duration

	// writeMu is the store's one writer inside the process: the group
	// commit and every Work take it, so they never wait on SQLite's busy
	// handler for each other (busy_timeout is left to other processes).
	writeMu chan struct{}
	ops     chan *op
	wc      *wconn // the writer's connection, under writeMu (writer.go)
	// file is the database file, held open for the process's life
	// (heldfile.go) in WAL mode: the checker's fsync of it finds failed
	// write-backs of other connections (repair.go). failuresSeen is
	// the checker's count of failures acted on; repairing refuses every
	// call while a repair is due or runs; bg is the context of the
	// store's goroutines.
	file         *heldFile
	failuresSeen int64
	repairing    atomic.Bool
	bg           context.Context
	// closedConn is a closed connection: a Tx's statement after its Work
	// ended runs on it and fails with sql.ErrConnDone.
	closedConn *sql.Conn
	// savepoint is the name of the savepoint a Work opens inside its
	// transaction (random per store, so no handler's statement names it).
	savepoint string

	guard guard // marker, file identity, refusal (checks.go)
	holds holds // IDs held by Works of AcquireWork (acquirework.go)

	stop   context.CancelFunc
	wg     sync.WaitGroup
	closed sync.Once
	done   chan struct{}
}

var (
	_ replay.Store      = (*Store)(nil)
	_ replay.Releaser   = (*Store)(nil)
	_ replay.Leaser     = (*Store)(nil)
	_ replay.Recorder   = (*Store)(nil)
	_ replay.Bounded    = (*Store)(nil)
	_ replay.Transactor = (*Store)(nil)
)

// New returns a Store on db, which must be a file database opened with
// every connection's settings as the package documentation shows. It
// checks, on a connection of db, that the database is a file (not
// :memory: or temporary), that journal_mode keeps commits (WAL, DELETE,
// TRUNCATE or PERSIST), that synchronous is FULL or EXTRA (NORMAL only
// with Options.AllowNormalSync, and only in WAL mode), that busy_timeout
// is positive and the connection is not query_only, that db may open at
// least two connections, that the table exists with its marker row (else
// ErrConfig or ErrForgotten: run [Migrate]), and that the database is not
// older than the one the store last saw at this path (else ErrForgotten).
// Invalid Options and refused settings are named in one ErrConfig, every
// one with its fix, so that a DSN and Options are fixed in one pass.
// It writes once (so a read-only file is refused with ErrUnavailable),
// then starts its writer, checker and sweeper goroutines, which
// [Store.Close] stops. db stays the caller's: Close does not close it.
func New(ctx context.Context, db *sql.DB, opts Options) (*Store, error) {
	return newStore(ctx, db, opts, time.Now)
}

func newStore(ctx context.Context, db *sql.DB, opts Options, now func() time.Time) (*Store, error) {
	// Every fault of the options and of the connection's settings is
	// named in one error (configFaults), so a user fixes them in one pass.
	var faults []string
	if db == nil {
		faults = append(faults, "nil *sql.DB: pass the database sql.Open returned")
	}
	if ctx == nil {
		ctx = context.Background()
	}
	s := &Store{db: db, now: now, done: make(chan struct{})}
	table, fault := tableName(opts.Table)
	if fault != "" {
		faults = append(faults, fault)
	}
	// Every statement of the store names the table in the main schema: a
	// temporary table of the same name (which an unqualified name would
	// find first), made by a handler in its Work or on the connection of
	// a WithTx transaction, never receives the store's rows.
	s.table = "main." + table
	s.prefix = opts.Prefix
	if s.prefix == "" {
		s.prefix = DefaultPrefix
	}
	if len(s.prefix) > MaxPrefixBytes {
		faults = append(faults, fmt.Sprintf("Prefix of %d bytes, over %d: choose a shorter one", len(s.prefix), MaxPrefixBytes))
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"Horizon", opts.Horizon}, {"RecheckInterval", opts.RecheckInterval}} {
		if d.v < 0 {
			faults = append(faults, fmt.Sprintf("negative %s: set 0 for the default, or a positive duration", d.name))
		}
	}
	s.timeout = orDefault(opts.Timeout, DefaultTimeout)
	s.horizon = orDefault(opts.Horizon, DefaultHorizon)
	s.recheck = orDefault(opts.RecheckInterval, DefaultRecheckInterval)
	s.sweepInt = orDefault(opts.SweepInterval, DefaultSweepInterval)
	s.log, s.observer = opts.Logger, opts.Observer
	if s.log == nil {
		s.log = slog.Default()
	}
	if db == nil {
		return nil, configFaults(faults)
	}
	if n := db.Stats().MaxOpenConnections; n == 1 {
		faults = append(faults, "db.SetMaxOpenConns(1): the store needs two connections (its writer and a reader); set 0 or at least 2 (SQLite still has one writer)")
	}
	parent := ctx
	ctx, cancel := s.bound(ctx)
	defer cancel()
	conn, err := db.Conn(ctx)
	if err != nil {
		if len(faults) > 0 {
			return nil, configFaults(faults)
		}
		return nil, unavailable(ctx, err)
	}
	defer conn.Close()
	set, err := readSettings(ctx, conn)
	if err != nil {
		if len(faults) > 0 {
			return nil, configFaults(faults)
		}
		return nil, err
	}
	if err := configFaults(append(faults, set.faults(opts.AllowNormalSync)...)); err != nil {
		return nil, err
	}
	// New's writes wait for other processes as long as the DSN's
	// busy_timeout lets them, on top of the store's own timeout.
	if s.timeout >= 0 {
		var wcancel context.CancelFunc
		ctx, wcancel = context.WithTimeout(parent, s.timeout+time.Duration(set.busyTimeout)*time.Millisecond)
		defer wcancel()
	}
	if err := checkLocks(ctx, db, conn); err != nil {
		return nil, err
	}
	s.allowNormal = opts.AllowNormalSync
	s.wal, s.journal, s.path, s.normal = set.wal(), set.journal, set.path, set.synchronous < syncFull
	s.boot = bootID()
	s.walLink = walLinkPrefix(s.path, s.table) + newToken()[:16]
	if s.wal {
		if s.file, err = openHeld(s.path); err != nil {
			s.log.Warn("sqlitestore: the database file cannot be held open: a failed write-back in another connection's checkpoint would not be found, nor repaired", "table", unquote(s.table), "err", err)
		} else {
			s.failuresSeen = s.file.failures.Load()
		}
	}
	repair, err := s.guard.open(ctx, s, conn)
	if err != nil {
		return nil, err
	}
	s.closedConn = conn // closed when New returns
	if s.normal {
		s.log.Warn("sqlitestore: "+riskNormalSync+" (accepted by Options.AllowNormalSync)", "table", unquote(s.table))
		s.observe(Event{Kind: EventRiskAccepted, Option: "AllowNormalSync", Risk: riskNormalSync})
	}
	s.savepoint = "ctoken_work_" + newToken()
	s.writeMu = make(chan struct{}, 1)
	s.ops = make(chan *op, maxBatch)
	bg, stop := context.WithCancel(context.Background())
	s.stop, s.bg = stop, bg
	s.wg.Add(2)
	go s.writer(bg)
	go s.checker(bg)
	if repair {
		s.startRepair("a repair after an I/O error did not finish before the last store on the file stopped", nil)
	}
	if s.sweepInt > 0 {
		s.wg.Add(1)
		go s.sweeper(bg)
	}
	return s, nil
}

func orDefault(v, def time.Duration) time.Duration {
	if v == 0 {
		return def
	}
	return v
}

// Close stops the store's goroutines, records the sequence it last saw
// beside the database, and refuses every later call with ErrUnavailable.
// It does not close the *sql.DB. Calling it again does nothing. It
// returns nil (the signature is io.Closer's, as every store's).
func (s *Store) Close() error {
	if s == nil || s.stop == nil {
		return nil
	}
	s.closed.Do(func() {
		s.stop()
		s.wg.Wait()
		close(s.done)
		s.guard.persist(s)
		// The writer's connection goes back to the pool now, or, while a
		// Work is open, when it ends.
		select {
		case s.writeMu <- struct{}{}:
			s.closeWriter()
			s.guard.settle(s)
			<-s.writeMu
		default:
			go func() {
				s.writeMu <- struct{}{}
				s.closeWriter()
				s.guard.settle(s)
				<-s.writeMu
			}()
		}
	})
	return nil
}

// Prefix returns the key prefix in use (Options.Prefix, or DefaultPrefix).
func (s *Store) Prefix() string { return s.prefix }

// Horizon returns the longest a claim, confirmation or lease may last
// ([replay.Bounded]).
func (s *Store) Horizon() time.Duration { return s.horizon }

// bound returns ctx limited by the store's timeout.
func (s *Store) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	if s.timeout < 0 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, s.timeout)
}

// ready refuses a zero or closed Store.
func (s *Store) ready() error {
	if s == nil || s.db == nil || s.ops == nil {
		return fmt.Errorf("%w: Store not built with New", ErrConfig)
	}
	select {
	case <-s.done:
		return fmt.Errorf("%w: store closed", ErrUnavailable)
	default:
	}
	if err := s.repairErr(); err != nil {
		return err
	}
	return s.guard.refused()
}

// key is the row key of id: the prefix's length (two bytes, big-endian),
// the prefix, then id, so no two prefixes share a key.
func (s *Store) key(id string) []byte {
	k := make([]byte, 2, 2+len(s.prefix)+len(id))
	binary.BigEndian.PutUint16(k, uint16(len(s.prefix)))
	k = append(k, s.prefix...)
	return append(k, id...)
}

func checkID(id string) error {
	switch {
	case id == "":
		return fmt.Errorf("%w: empty id", ErrInvalidClaim)
	case len(id) > MaxIDBytes:
		return fmt.Errorf("%w: id of %d bytes, over %d", ErrInvalidClaim, len(id), MaxIDBytes)
	}
	return nil
}

// nanos is t in Unix nanoseconds, held at the int64 range's ends (a time
// past 2262 is held forever, not wrapped into the past).
func nanos(t time.Time) int64 {
	switch {
	case t.After(maxTime):
		return math.MaxInt64
	case t.Before(minTime):
		return math.MinInt64
	}
	return t.UnixNano()
}

var (
	maxTime = time.Unix(0, math.MaxInt64)
	minTime = time.Unix(0, math.MinInt64)
)

// checkUntil refuses an until not after now or past the horizon.
func (s *Store) checkUntil(now, until int64) error {
	if until <= now {
		return fmt.Errorf("%w: %w: until is not after the store's clock", ErrInvalidClaim, replay.ErrExpired)
	}
	if until-now > int64(s.horizon) {
		return fmt.Errorf("%w: until is more than the horizon (%v) away", ErrInvalidClaim, s.horizon)
	}
	return nil
}

func (s *Store) checkLease(lease time.Duration) error {
	if lease <= 0 {
		return fmt.Errorf("%w: %w: lease %v is not positive", ErrInvalidClaim, replay.ErrExpired, lease)
	}
	if lease > s.horizon {
		return fmt.Errorf("%w: lease %v is longer than the horizon (%v)", ErrInvalidClaim, lease, s.horizon)
	}
	return nil
}

// unavailable wraps err in ErrUnavailable, and in ctx's error when ctx
// has ended.
func unavailable(ctx context.Context, err error) error {
	if errors.Is(err, ErrUnavailable) || errors.Is(err, ErrConfig) || errors.Is(err, ErrInvalidClaim) ||
		errors.Is(err, replay.ErrLeaseLost) || errors.Is(err, replay.ErrTooLarge) {
		return err
	}
	if cerr := ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
		return fmt.Errorf("%w: %w (%w)", ErrUnavailable, cerr, err)
	}
	return fmt.Errorf("%w: %w", ErrUnavailable, err)
}

// Claim records id until the given time and reports whether this was the
// first live claim of id ([replay.Store]). It is acknowledged only once
// SQLite committed it (see the package documentation for what that
// survives). With a context carrying a transaction ([WithTx], or a
// [replay.Work]'s of this store), the claim is written in that
// transaction and holds only if it commits.
func (s *Store) Claim(ctx context.Context, id string, until time.Time) (bool, error) {
	if err := s.ready(); err != nil {
		return false, err
	}
	if err := checkID(id); err != nil {
		return false, err
	}
	// An ID a Work of AcquireWork holds is not first, at once, as a live
	// lease is.
	if _, _, ok := s.holds.busy(s.key(id)); ok {
		if err := s.checkUntil(s.now().UnixNano(), nanos(until)); err != nil {
			return false, err
		}
		return false, nil
	}
	if ctx == nil {
		ctx = context.Background()
	}
	var first bool
	err := s.do(ctx, true, func(q querier, now int64) error {
		var err error
		first, err = s.claim(q, now, id, nanos(until))
		return err
	})
	if err != nil {
		return false, err
	}
	return first, nil
}

// claim is Claim's step in the writer's (or a caller's) transaction: one
// statement for a first claim. The upsert writes only when id has no row,
// or an expired row that is not a Work's ('w'); otherwise it changes
// nothing, and the row is read to tell a live row (not first) from an
// expired Work's (errEscaped).
func (s *Store) claim(q querier, now int64, id string, until int64) (bool, error) {
	if err := s.checkUntil(now, until); err != nil {
		return false, err
	}
	key := s.key(id)
	res, err := q.exec(`INSERT INTO `+s.table+` (key, state, token, until, fingerprint, result) VALUES (?, 'c', '', ?, NULL, NULL)`+
		` ON CONFLICT (key) DO UPDATE SET state = 'c', token = '', until = excluded.until, fingerprint = NULL, result = NULL`+
		` WHERE until <= ? AND state <> 'w'`, key, until, now)
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	if err != nil || n == 1 {
		return n == 1, err
	}
	r, err := s.row(q, key, now)
	if err != nil || r.live {
		return false, err
	}
	if r.found && r.state == "w" {
		return false, errEscaped
	}
	return false, fmt.Errorf("a claim's upsert changed %d rows of a free id", n)
}

// Release forgets a claim of id, so a later Claim of id is first again
// ([replay.Releaser]). Releasing an id that is not claimed is not an
// error.
func (s *Store) Release(ctx context.Context, id string) error {
	if err := s.ready(); err != nil {
		return err
	}
	if err := checkID(id); err != nil {
		return err
	}
	return s.do(ctx, true, func(q querier, now int64) error {
		_, err := q.exec(`DELETE FROM `+s.table+` WHERE key = ?`, s.key(id))
		return err
	})
}

// entry is a row as a step reads it.
type entry struct {
	found, live bool
	state       string
	token       string
	until       int64
	fingerprint []byte
	result      []byte
}

// row reads id's row; live is whether its until is after now.
func (s *Store) row(q querier, key []byte, now int64) (entry, error) {
	var e entry
	err := q.queryRow(`SELECT state, token, until, fingerprint, result FROM `+s.table+` WHERE key = ?`, key).
		Scan(&e.state, &e.token, &e.until, &e.fingerprint, &e.result)
	if errors.Is(err, sql.ErrNoRows) {
		return entry{}, nil
	}
	if err != nil {
		return entry{}, err
	}
	e.found, e.live = true, e.until > now
	return e, nil
}
