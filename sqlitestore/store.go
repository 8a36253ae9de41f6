package sqlitestore

import (
	"cmp"
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

// The Options defaults and limits.
const (
	// DefaultPrefix is the key prefix used when Options.Prefix is empty.
	DefaultPrefix = "ctoken:replay:"
	// DefaultTable is the table used when Options.Table is empty.
	DefaultTable = "ctoken_replay"
	// DefaultTimeout bounds each call when Options.Timeout is zero.
	DefaultTimeout = 2 * time.Second
	// DefaultHorizon is Options.Horizon's default: the middleware's day + 1h.
	DefaultHorizon = 25 * time.Hour
	// DefaultRecheckInterval is Options.RecheckInterval's default.
	DefaultRecheckInterval = time.Second
	// DefaultSweepInterval is Options.SweepInterval's default.
	DefaultSweepInterval = 30 * time.Second
	// MaxIDBytes is the longest ID the store accepts.
	MaxIDBytes = 512
	// MaxPrefixBytes is the longest Options.Prefix New accepts.
	MaxPrefixBytes = 256

	maxBatch = 256 // the most calls one group commit carries
)

// Sentinel errors, usable with errors.Is.
var (
	// ErrUnavailable reports that the store could not decide (the database
	// locked, read-only, full, unreadable or under repair, or the deadline
	// passed; then it also matches the context's error): refuse the
	// request; resending it is safe. It matches [replay.ErrUnavailable].
	ErrUnavailable error = &sentinel{"sqlitestore: replay store unavailable", replay.ErrUnavailable}
	// ErrInvalidClaim reports a call refused without recording anything
	// (a bad ID, a lease or until out of range; an expired one also
	// matches [replay.ErrExpired]). It matches [replay.ErrInvalidClaim].
	ErrInvalidClaim error = &sentinel{"sqlitestore: invalid claim", replay.ErrInvalidClaim}
	// ErrForgotten reports that the database no longer holds claims it
	// acknowledged, or may not (its history cannot be judged): every call
	// refuses until an operator runs [Rearm]. Its
	// message names the hidden files found and the command line of
	// ctoken-sqlite (cmd/ctoken-sqlite) that does.
	ErrForgotten = fmt.Errorf("%w: the database has forgotten claims it acknowledged", ErrUnavailable)
	// ErrConfig reports a store that cannot run as configured (the error
	// names each fault and its fix), or a connection a handler lowered. It
	// matches [replay.ErrConfig]: only an operator can lift it.
	ErrConfig error = &sentinel{"sqlitestore: invalid configuration", replay.ErrConfig}
)

// sentinel is a store error that matches its counterpart in replay.
type sentinel struct {
	msg    string
	shared error
}

func (e *sentinel) Error() string        { return e.msg }
func (e *sentinel) Is(target error) bool { return target == e.shared }

// Options configures a Store. The zero value is ready to use with a
// database opened as the package documentation shows.
type Options struct {
	// Table is the table's name, [a-z_][a-z0-9_]* of at most 48 bytes.
	// Empty means DefaultTable.
	Table string
	// Prefix, with its length, starts every row's key, so stores can share
	// a table. Empty means DefaultPrefix; at most MaxPrefixBytes.
	Prefix string
	// Timeout bounds every call, within the caller's deadline. Zero means
	// DefaultTimeout; negative, the caller's context alone.
	Timeout time.Duration
	// Horizon is the longest claim, confirmation or lease ([replay.Bounded]).
	// Zero means DefaultHorizon.
	Horizon time.Duration
	// AllowNormalSync accepts synchronous=NORMAL in WAL mode: a power cut
	// or a crash of the machine may then forget the last acknowledged
	// claims, and New refuses with ErrForgotten after one until Rearm.
	AllowNormalSync bool
	// RecheckInterval is how often the store repeats New's checks and
	// records the sequence it saw. Zero means DefaultRecheckInterval.
	RecheckInterval time.Duration
	// SweepInterval is how often the store deletes every expired row
	// ([Store.Sweep]): the table holds the live rows and those expired
	// since the last sweep, and SQLite reuses the pages it frees, so the
	// file stays the size of the largest such table. Zero means
	// DefaultSweepInterval; negative runs no sweeper.
	SweepInterval time.Duration
	// Observer, if set, receives every [replay.Event] (Store "sqlitestore")
	// synchronously, each sweep of the sweeper included; it must not block.
	Observer func(replay.Event)
	// Logger receives the store's lines (no ID, token or key); nil: slog's.
	Logger *slog.Logger
}

// Store is a [replay.Store] on one SQLite database, safe for concurrent
// use. A zero Store refuses every call with ErrConfig.
type Store struct {
	db          *sql.DB
	table       string // main."name": a temporary table of the name never shadows it
	prefix      string
	timeout     time.Duration
	horizon     time.Duration
	normal      bool // synchronous=NORMAL at New
	allowNormal bool
	wal         bool
	journal     string // journal_mode at New, lower case
	boot        string // the kernel's boot id at New ("" where there is none)
	path        string // the main database file
	walLink     string // this Store's link to the WAL (wal.go)
	log         *slog.Logger
	observer    func(replay.Event)
	now         func() time.Time
	recheck     time.Duration
	sweepInt    time.Duration

	// writeMu is the store's one writer, which the group commit and every
	// Work take, so they never wait on SQLite's busy handler for each other.
	writeMu      chan struct{}
	ops          chan *op
	wc           *wconn                // the writer's connection, under writeMu
	file         *heldFile             // held open in WAL mode (heldfile.go)
	failuresSeen atomic.Int64          // the failed write-backs acted on (repair.go)
	repairing    atomic.Bool           // a repair is due or runs (repair.go)
	repairShort  atomic.Pointer[error] // the repair's refusal while it waits for free space
	bg           context.Context
	closedConn   *sql.Conn                // closed: a Tx's statement after its Work fails on it
	savepoint    string                   // random per store, so no handler names it
	guard        guard                    // marker, file identity, refusal (checks.go)
	holds        holds                    // IDs held by Works of AcquireWork
	read         atomic.Pointer[sql.Stmt] // ReadRecord's, once prepared
	readMu       sync.Mutex               // preparing read
	stop         context.CancelFunc
	wg           sync.WaitGroup
	closed       sync.Once
	done         chan struct{}
}

var (
	_ replay.Store        = (*Store)(nil)
	_ replay.Releaser     = (*Store)(nil)
	_ replay.Leaser       = (*Store)(nil)
	_ replay.Recorder     = (*Store)(nil)
	_ replay.Reader       = (*Store)(nil)
	_ replay.Bounded      = (*Store)(nil)
	_ replay.Transactor   = (*Store)(nil)
	_ replay.WorkAcquirer = (*Store)(nil)
)

// New returns a Store on db, a file database opened as the package
// documentation shows. It refuses invalid Options and settings that lose
// claims in one ErrConfig, a database that forgot claims with
// ErrForgotten, and one it cannot write with ErrUnavailable; then it
// starts the goroutines [Store.Close] stops. Close does not close db.
func New(ctx context.Context, db *sql.DB, opts Options) (*Store, error) {
	return newStore(ctx, db, opts, time.Now)
}

func newStore(ctx context.Context, db *sql.DB, opts Options, now func() time.Time) (_ *Store, err error) {
	var faults []string
	if db == nil {
		faults = append(faults, "nil *sql.DB: pass the database sql.Open returned")
	}
	ctx = orBackground(ctx)
	s := &Store{db: db, now: now, done: make(chan struct{})}
	defer func() { err = s.guard.place.lift(malformed(err, s.path, s.table)) }()
	table, fault := tableName(opts.Table)
	if fault != "" {
		faults = append(faults, fault)
	}
	s.table = "main." + table
	s.prefix = cmp.Or(opts.Prefix, DefaultPrefix)
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
	s.log, s.observer = cmp.Or(opts.Logger, slog.Default()), opts.Observer
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
		return nil, cmp.Or(configFaults(faults), unavailable(ctx, err))
	}
	defer conn.Close()
	set, err := readSettings(ctx, conn)
	if err != nil {
		return nil, cmp.Or(configFaults(faults), err)
	}
	if err := configFaults(append(faults, set.faults(opts.AllowNormalSync)...)); err != nil {
		return nil, err
	}
	// New's writes may wait for other processes up to busy_timeout.
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
	s.guard.place, s.guard.log = place{s.path, s.table, s.horizon}, s.log
	// Held before the first write: a failed write-back is seen only by a
	// descriptor open before it (heldfile.go).
	if s.file, err = openHeld(s.path); err != nil {
		s.log.Warn("sqlitestore: the database file cannot be held open: a failed write-back in another connection's checkpoint would not be found", "table", unquote(s.table), "err", err)
	} else {
		s.failuresSeen.Store(s.file.failures.Load())
	}
	repair, err := s.guard.open(ctx, s, conn)
	if err != nil {
		return nil, err
	}
	s.closedConn = conn // closed when New returns
	if s.normal {
		s.log.Warn("sqlitestore: "+riskNormalSync+" (accepted by Options.AllowNormalSync)", "table", unquote(s.table))
		s.observe(replay.Event{Kind: replay.EventRiskAccepted, Option: "AllowNormalSync", Risk: riskNormalSync})
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

// Close stops the store's goroutines, records the sequence it saw, and
// refuses every later call with ErrUnavailable. It does not close the
// *sql.DB, and returns nil.
func (s *Store) Close() error {
	if s == nil || s.stop == nil {
		return nil
	}
	s.closed.Do(func() {
		s.stop()
		s.wg.Wait()
		close(s.done)
		s.readMu.Lock()
		if st := s.read.Load(); st != nil {
			st.Close()
		}
		s.readMu.Unlock()
		s.guard.persist(s)
		// Now, or when an open Work ends.
		settle := func() {
			s.closeWriter()
			s.guard.settle(s)
			<-s.writeMu
		}
		select {
		case s.writeMu <- struct{}{}:
			settle()
		default:
			go func() { s.writeMu <- struct{}{}; settle() }()
		}
	})
	return nil
}

// Prefix returns the key prefix in use.
func (s *Store) Prefix() string { return s.prefix }

// Horizon returns Options.Horizon ([replay.Bounded]).
func (s *Store) Horizon() time.Duration { return s.horizon }

func (s *Store) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	if s.timeout < 0 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, s.timeout)
}

func orBackground(ctx context.Context) context.Context {
	if ctx == nil {
		return context.Background()
	}
	return ctx
}

func (s *Store) readyFor(id string) error {
	if err := s.ready(); err != nil {
		return err
	}
	return checkID(id)
}

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

// key is the prefix's length, the prefix, then id: no two prefixes share one.
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

// nanos is t in Unix nanoseconds, clamped to the int64 range.
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

// unavailable wraps err in ErrUnavailable, and ctx's error if it ended.
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

// Claim records id until the given time and reports, once committed,
// whether this was its first live claim ([replay.Store]). With a context
// carrying a transaction ([WithTx], a [replay.Work]'s), it holds only if
// that commits.
func (s *Store) Claim(ctx context.Context, id string, until time.Time) (bool, error) {
	if err := s.readyFor(id); err != nil {
		return false, err
	}
	// An ID a Work holds is not first, answered without the writer.
	if _, _, ok := s.holds.busy(s.key(id)); ok {
		if err := s.checkUntil(s.now().UnixNano(), nanos(until)); err != nil {
			return false, err
		}
		return false, nil
	}
	ctx = orBackground(ctx)
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

// claim is Claim's step: the upsert writes over no row or an expired one
// not a Work's; otherwise the row tells live from escaped.
func (s *Store) claim(q querier, now int64, id string, until int64) (bool, error) {
	if err := s.checkUntil(now, until); err != nil {
		return false, err
	}
	key := s.key(id)
	n, err := execN(q, `INSERT INTO `+s.table+` (key, state, token, until, fingerprint, result) VALUES (?, 'c', '', ?, NULL, NULL)`+
		` ON CONFLICT (key) DO UPDATE SET state = 'c', token = '', until = excluded.until, fingerprint = NULL, result = NULL`+
		` WHERE until <= ? AND state <> 'w'`, key, until, now)
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
// ([replay.Releaser]); an unclaimed id is no error.
func (s *Store) Release(ctx context.Context, id string) error {
	if err := s.readyFor(id); err != nil {
		return err
	}
	return s.do(ctx, true, func(q querier, now int64) error {
		_, err := q.exec(`DELETE FROM `+s.table+` WHERE key = ?`, s.key(id))
		return err
	})
}

type entry struct {
	found, live bool
	state       string
	token       string
	until       int64
	fingerprint []byte
	result      []byte
}

// row reads key's row; live is whether its until is after now.
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
