// Package pgstore is a [replay.Store], [replay.Leaser] and [replay.Recorder]
// backed by PostgreSQL, for fleets of servers that must accept each
// single-use ID (one-time token, single-use request state, webhook
// delivery, idempotency key) exactly once
// across every instance, and keep that promise through a database crash.
// Most users need one [Store], from [New] on a pgxpool, its table made by
// [Migrate] at deployment (ExampleStore_Claim, ExampleSchema; the
// idempotency middleware's store: ExampleStore_AcquireRecord). The
// operator's path (Migrate, and [Rearm] after a loss) is ExampleRearm; the
// transactional mode of webhook and idempotency, whose handler's writes
// commit with the record, Example_webhookTransactional and
// Example_idempotencyTransactional.
//
// Every write of a claim or a lease step is one SQL statement on one row
// of one table, keyed by the prefix's length, the prefix and the id (so
// that no two prefixes share a key, even when one starts with the other):
// a claim is
//
//	INSERT ... ON CONFLICT (key) DO NOTHING
//
// and, only when that statement found an expired row (or a row changed by
// a concurrent statement), a second one that inserts or takes it over:
//
//	INSERT ... ON CONFLICT (key) DO NOTHING, and in the same statement
//	UPDATE ... WHERE key = $1 AND until <= now()  (take over an expired row)
//
// PostgreSQL's unique index lets exactly one of any number of concurrent
// statements on a key insert, and re-checks an expired row after waiting
// for its lock, so of two takeovers one wins; a claim of a live row writes
// nothing. Every deadline is measured by the database's clock (now()),
// never an instance's, so the fleet agrees on when an ID may be taken
// again, and an until already past by that clock is refused. A marker row
// written with the table makes a truncated or emptied table refuse every
// claim ([ErrForgotten]); a database restored from an older backup keeps
// its marker and is not detected (docs/pgstore-reference.md, "A forgotten
// table refuses", says what to do).
// Expired rows are deleted in small batches by a sweeper goroutine of each
// Store (see [Store.Sweep]); a checker goroutine repeats New's checks of
// the server every second ([Options.RecheckInterval]).
//
// A claim is acknowledged only after PostgreSQL committed it, so with
// synchronous_commit on (the default) it survives a crash of the server;
// [New] refuses a session whose synchronous_commit is off unless
// [Options.AllowAsyncCommit] is set, a server with fsync or
// full_page_writes off unless [Options.AllowRollback] is, and a primary
// whose standbys are all asynchronous unless [Options.AllowAsyncStandby]
// is; with a synchronous standby an acknowledged claim also survives a
// failover to it.
// docs/pgstore-reference.md has the table of what survives a crash and a
// failover ("Durability").
//
// The store fails closed: when PostgreSQL is down, slow, read-only, or
// answers anything unexpected, Claim returns first == false and an error
// matching [ErrUnavailable]. Callers must treat every error as "refuse the
// request". The table is created only by [Migrate] (or by running the SQL
// of [Schema]); a Store never creates it.
package pgstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ctoken/ctoken/replay"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// DefaultPrefix is the key prefix used when Options.Prefix is empty.
const DefaultPrefix = "ctoken:replay:"

// DefaultTable is the table used when Options.Table is empty.
const DefaultTable = "ctoken_replay"

// DefaultTimeout bounds each call when Options.Timeout is zero.
const DefaultTimeout = 2 * time.Second

// DefaultRecheckInterval is how often a Store repeats New's checks of the
// server when Options.RecheckInterval is zero.
const DefaultRecheckInterval = time.Second

// DefaultMaxSkew is how far the instance's clock may run behind the
// database's when Options.MaxSkew is zero: half of
// [replay.SkewMargin].
const DefaultMaxSkew = replay.SkewMargin / 2

// MaxIDBytes is the longest ID the store accepts. Longer IDs are refused
// with ErrInvalidClaim before anything is sent to PostgreSQL.
const MaxIDBytes = 512

// MaxPrefixBytes is the longest Options.Prefix New accepts, so that every
// key (prefix and ID) fits the primary key's index (a B-tree entry holds
// at most about 2 700 bytes; a longer key fails every claim).
const MaxPrefixBytes = 256

// Sentinel errors, usable with errors.Is.
var (
	// ErrUnavailable reports that the store could not decide: PostgreSQL
	// unreachable, timed out, read-only (a standby), a serialization
	// failure, a lost connection, or an unexpected answer. When the
	// caller's context had ended, the error also matches the context's
	// error. The claim may or may not have been recorded; the caller must
	// refuse the request. Resending it is safe: a resent claim reports the
	// ID as taken, a resent lease step finds its own lease or done row. It
	// matches [replay.ErrUnavailable].
	ErrUnavailable error = &sentinel{"pgstore: replay store unavailable", replay.ErrUnavailable}

	// ErrInvalidClaim reports a call refused without recording anything: an
	// empty ID or one over MaxIDBytes, or a lease that is not positive
	// (refused before reaching PostgreSQL), or an until that is not after
	// the database's clock (refused by the statement itself). The last two
	// also match [replay.ErrExpired]. It matches [replay.ErrInvalidClaim].
	ErrInvalidClaim error = &sentinel{"pgstore: invalid claim", replay.ErrInvalidClaim}

	// ErrForgotten reports that the table lost its marker row: it was
	// truncated or emptied, so it no longer remembers which IDs were
	// claimed. Every call then refuses (the error also matches
	// ErrUnavailable) until an operator runs [Rearm] and its fence has
	// passed; the refusals of New, Migrate and the recheck name the call.
	// A statement also reports it while Rearm's fence lasts, and on a
	// server of another timeline or cluster than the table's history
	// record until a check has judged it.
	ErrForgotten = errors.New("pgstore: table has forgotten its claims (marker row missing, fenced by Rearm, or of another server's history)")

	// ErrConfig reports a store that cannot be built as configured: a nil
	// pool, an invalid table name, a missing, unlogged or temporary table
	// or one the role may not write, synchronous_commit off without
	// AllowAsyncCommit, fsync or full_page_writes off without
	// AllowRollback, standbys none of which is synchronous without
	// AllowAsyncStandby, no synchronous standby with
	// RequireSynchronousStandby, an instance clock too far behind the
	// database's, a Prefix over MaxPrefixBytes, a table of the key layout
	// before v2 or without the record columns (run [Migrate]), or a
	// negative option. It matches [replay.ErrConfig], so the middlewares
	// answer it as a refusal only an operator can lift.
	ErrConfig error = &sentinel{"pgstore: invalid configuration", replay.ErrConfig}
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

// Options configures a Store. The zero value is ready to use.
type Options struct {
	// Table is the table's name, optionally schema-qualified
	// ("replay.ctoken_replay"); each part is a lower-case SQL identifier
	// ([a-z_][a-z0-9_]*, at most 48 bytes), and the schema is not one of
	// PostgreSQL's own (pg_*: pg_temp would give each connection a table
	// of its own). Empty means DefaultTable. An unqualified name is found
	// by each session's search_path: qualify it when roles' search_paths
	// differ, so every instance uses the same table.
	Table string

	// Prefix, with its length, is prepended to every ID to form the row's
	// key, so several stores (or applications) can share one table without
	// seeing each other's claims, leases or releases, even when one prefix
	// starts with another ("ctoken:replay:" and "ctoken:replay:webhooks:";
	// TestKeys/nested prefixes never share keys). Empty means
	// DefaultPrefix; longer than MaxPrefixBytes is refused with ErrConfig.
	Prefix string

	// Timeout bounds every call: the effective deadline is the earlier of
	// the caller's context deadline and now + Timeout. Zero means
	// DefaultTimeout; a negative value means only the caller's context
	// bounds the call. A Work's Commit or Rollback that must find out or
	// record whether the handler's SQL committed its transaction runs
	// those steps past the caller's context, each within Timeout
	// (DefaultTimeout when Timeout is negative).
	Timeout time.Duration

	// AllowAsyncCommit lets New accept a session whose synchronous_commit
	// is off. PostgreSQL then acknowledges a commit before it is on disk,
	// and a crash of the server forgets the claims of the last moments
	// (up to three times wal_writer_delay): an ID accepted just before the
	// crash may be accepted again after it. The check still runs: while
	// synchronous_commit is off, New and the recheck (once per appearance)
	// log a Warn and report [replay.EventRiskAccepted] naming this option.
	AllowAsyncCommit bool

	// AllowAsyncStandby lets New accept a primary that streams to physical
	// standbys while its commits wait for none of them (see
	// [Durability.WaitsForStandby]). A failover to such a standby can lose
	// the last acknowledged claims, and the store cannot detect it: those
	// IDs would be accepted a second time. Without this option New refuses
	// it with ErrConfig; set synchronous_standby_names instead. A standby
	// counts while it streams, while it has a physical replication slot
	// (streaming or not), and, for a running Store, from the first recheck
	// that saw it until synchronous replication covers it (see [New]). The
	// check still runs: while such a standby is present, New and the
	// recheck (once per appearance) log a Warn and report [replay.EventRiskAccepted]
	// naming this option.
	AllowAsyncStandby bool

	// AllowRollback lets New accept a server whose machine crash (a power
	// cut, a kernel panic: not only a crash of PostgreSQL) can lose or
	// corrupt acknowledged commits: fsync off (commits are never flushed
	// to the disk) or full_page_writes off (a page torn by the crash cannot
	// be repaired from the WAL). After such a crash the table may have
	// rolled back past claims it acknowledged, with its marker row intact,
	// so the store cannot tell: those IDs would be accepted a second time.
	// Without this option New refuses both with ErrConfig. The check still
	// runs: while either is off, New and the recheck (once per appearance)
	// log a Warn and report [replay.EventRiskAccepted] naming this option.
	AllowRollback bool

	// RequireSynchronousStandby makes New refuse (ErrConfig) a session
	// whose commits do not wait for a synchronous standby (see
	// [Durability.WaitsForStandby]): for deployments that must not lose an
	// acknowledged claim in a failover.
	RequireSynchronousStandby bool

	// MaxSkew is how far the instance's clock may run behind the
	// database's, at New and at every recheck (read before the check's
	// query, so a slow answer counts as behind). Single use does not
	// depend on it: every deadline is the database's, and a claim whose
	// until the database's clock has passed is refused, so a slow clock
	// cannot make a replay first. But an
	// instance whose clock is behind accepts tokens (one-time, request
	// state) the others already call expired, for as long as it is behind,
	// and refuses them as expired once it is more than
	// [replay.SkewMargin] behind. Zero means DefaultMaxSkew; a
	// negative value turns the check off.
	MaxSkew time.Duration

	// SweepInterval is how often the store's sweeper deletes expired rows
	// (see [Store.Sweep]). Zero means DefaultSweepInterval; a negative
	// value runs no sweeper (call Sweep yourself). It does not pace the
	// rechecks of the server (RecheckInterval does).
	SweepInterval time.Duration

	// RecheckInterval is how often the store repeats New's checks of the
	// server (see [New]) on a goroutine of its own, so that a setting
	// weakened after New (synchronous_commit or fsync turned off, a standby
	// attached) is refused within about this long. Zero means
	// DefaultRecheckInterval; a negative value is refused with ErrConfig
	// (the checks always run). Each recheck is one query on a pooled
	// connection and one on a connection opened for it and closed at once
	// (which sees what ALTER ROLE or ALTER DATABASE set since the pool's
	// sessions started): at the default, one connection a second per
	// Store.
	RecheckInterval time.Duration

	// Observer, when not nil, is called with every [replay.Event] (Store
	// "pgstore"): a risk accepted by an Allow* option, a recheck that
	// starts or stops refusing, and each sweep of the store's own sweeper
	// (so that a sweeper that keeps failing, and a table that keeps
	// growing, is seen). It is called synchronously (from New, the checker
	// or the sweeper goroutine) and must not block.
	Observer func(replay.Event)

	// Logger receives one line per event other than EventSwept. Nil means
	// slog.Default(). Lines hold no ID, token or key.
	Logger *slog.Logger

	// SweepBatch is how many expired rows one sweeper statement deletes at
	// most. Zero means DefaultSweepBatch.
	SweepBatch int

	// Horizon is the longest lifetime any Store of the table gives a
	// claim, lease or record: the fleet's, so set the same on every
	// instance. A Claim, ConfirmLease, ConfirmRecord or Work's Commit
	// whose until lies more than Horizon past the instance's clock, and a
	// lease longer than Horizon, is refused with ErrInvalidClaim before
	// anything is sent. It bounds the fence of unknown history (a
	// promoted standby that cannot show it has every acknowledged claim,
	// another cluster such as a logical replica switched to: see [New]):
	// that fence lasts Horizon, or the longest lifetime the table's
	// history record or live rows show if longer, plus
	// [replay.SkewMargin] (which also covers an instance clock that far
	// ahead of the database's), and then ends by itself. Zero means no
	// horizon: claims of any lifetime are accepted, and such a fence
	// lasts until an operator runs [Rearm] with the fence that covers
	// the fleet's longest lifetime (no copy of the record can show it:
	// a standby that was away, or another cluster, holds an older one).
	// Negative is refused with ErrConfig.
	Horizon time.Duration
}

// Store is a [replay.Store] backed by one PostgreSQL table. It also
// implements the optional [replay.Releaser] (Release), [replay.Leaser]
// (AcquireLease, ConfirmLease, ReleaseLease), which the webhook middleware
// uses to process each delivery exactly once, [replay.Renewer]
// (RenewLease), and [replay.Recorder]
// (AcquireRecord, ConfirmRecord), which the idempotency middleware uses to
// answer every retry with the first response. It is safe for concurrent
// use; its settings are fixed at construction. A zero Store refuses every
// call with ErrConfig.
type Store struct {
	pool    *pgxpool.Pool
	table   string  // schema-qualified and quoted, ready for SQL (see [Store.resolve])
	dbName  string  // current_database() at New: a caller's transaction must be on it
	sysID   int64   // the server's system identifier at New: likewise
	port    *int32  // inet_server_port() at New (nil on a Unix socket): likewise
	addr    *string // inet_server_addr() at New (nil on a Unix socket): likewise
	prefix  string
	timeout time.Duration
	direct  bool // calls run on the caller's goroutine: see [call]
	simple  bool // the pool's DefaultQueryExecMode is the simple protocol (worktx.go)
	durable atomic.Pointer[Durability]
	refusal atomic.Pointer[error] // set by the recheck while a check of New fails
	checks  checks

	claimSQL, takeoverSQL, releaseSQL              string
	acquireSQL, confirmSQL, releaseLeaseSQL, sweep string
	renewSQL, readSQL                              string
	claimTxSQL, takeoverTxSQL                      string   // work.go
	lockedReadSQL                                  string   // lockedwork.go
	fenceCall, lockedFenceCall, resetCall          string   // functions.go
	fnSigs, fnSrcs, fnCfgs                         []string // the functions New and the recheck check (see functionsCheckSQL)
	sweepBatch                                     int
	observer                                       func(replay.Event)
	log                                            *slog.Logger

	// sawStandby is set once a check saw a physical standby (streaming, or
	// with a slot) that commits do not wait for, and cleared when commits
	// wait for a synchronous standby: a standby that stopped streaming and
	// has no slot still counts. accepted and refusing are what the last
	// check reported (see [Store.report]); only New and then the checker
	// goroutine touch them.
	sawStandby atomic.Bool
	accepted   []risk
	refusing   string

	stop     context.CancelFunc
	sweeping sync.WaitGroup
	closed   sync.Once
}

var (
	_ replay.Store    = (*Store)(nil)
	_ replay.Releaser = (*Store)(nil)
	_ replay.Leaser   = (*Store)(nil)
	_ replay.Recorder = (*Store)(nil)
	_ replay.Renewer  = (*Store)(nil)
	_ replay.Reader   = (*Store)(nil)
)

// New returns a Store on pool's database. It resolves the table's schema
// (an unqualified name along the session's search_path), and every
// statement of the Store names the table with it, so a temporary table or
// another schema's table of the same name never takes its statements. It
// checks, in one query, that
// the table exists and still holds its marker row (else ErrConfig or
// ErrForgotten: run [Migrate]) and has the record columns of
// [replay.Recorder] (else ErrConfig: run [Migrate]), that it is neither
// unlogged nor temporary
// and that the session's role may SELECT, INSERT, UPDATE and DELETE it
// (else ErrConfig), that the server is not a read-only standby (else
// ErrUnavailable), that the session's synchronous_commit is not off (else
// ErrConfig, unless Options.AllowAsyncCommit), that the server's fsync and
// full_page_writes are on (else ErrConfig, unless Options.AllowRollback),
// that a server with physical standbys makes commits wait for a
// synchronous one (else ErrConfig, unless Options.AllowAsyncStandby), and
// that the instance's clock is not behind the database's by more than
// Options.MaxSkew (else ErrConfig). It then starts the sweeper and
// checker goroutines, which [Store.Close] stops. The pool stays the
// caller's: Close does not close it.
//
// A physical standby counts while it streams (pg_stat_replication) and
// while it has a physical replication slot (pg_replication_slots, whether
// or not it is connected), so a standby whose link is down when New runs
// is refused if it has a slot; give every standby a slot
// (primary_slot_name), since one without a slot that is not streaming at
// New cannot be seen. A slot kept by another physical consumer (a WAL
// archiver such as pg_receivewal) counts as a standby too.
//
// The checker repeats these checks every Options.RecheckInterval (one
// second by default): while one fails (a standby attached later without
// synchronous replication, synchronous_commit or fsync turned off by ALTER
// SYSTEM or ALTER ROLE, the table made unlogged, the server demoted to a
// standby, the instance's clock drifted behind), Claim, AcquireLease and
// ConfirmLease refuse with ErrUnavailable and the reason's sentinel, until
// it holds again. A standby that a check saw keeps counting after it stops
// streaming and its slot is dropped, until synchronous replication covers
// it (synchronous_standby_names set, synchronous_commit not local or off)
// or the Store is replaced: its disconnect does not make a failover to it
// safe. Each change is reported as a [replay.Event] and logged once.
//
// New and the checker also keep the table's history record (in the
// marker row: the server's cluster and timeline, and which standbys were
// synchronous), and judge a server of another cluster than the record
// names (a logical replica switched to), or that is primary on another
// timeline: unless the record names it a confirmed synchronous standby
// of the old primary, its history is unknown and the table is fenced
// ([ErrFenced]) for Options.Horizon plus [replay.SkewMargin], or without
// a Horizon until [Rearm] names the fence; New then returns a Store that
// refuses until the fence has passed, and serves after it. Until a check
// has judged such a server, every claim, lease and record step on it
// refuses (docs/pgstore-reference.md, "Unknown history").
//
// New refuses a session that is read-only (ErrUnavailable: a write
// freeze, which the checker refuses too until it is lifted), and a pool
// behind a pooler that does not keep sessions between transactions
// (PgBouncer's pool_mode = transaction) while its exec mode prepares
// named statements (pgx's default): ErrConfig naming
// pgx.QueryExecModeExec or pool_mode = session.
//
// Every session the pool opens should have the settings of the one New
// checks: set synchronous_commit per role or database (ALTER ROLE ... SET),
// or in the pool's RuntimeParams, not per connection afterwards.
func New(ctx context.Context, pool *pgxpool.Pool, opts Options) (*Store, error) {
	return newStore(ctx, pool, opts, time.Now)
}

// newStore is New with the instance's clock as a parameter (for the tests
// of the skew check).
func newStore(ctx context.Context, pool *pgxpool.Pool, opts Options, now func() time.Time) (*Store, error) {
	if pool == nil {
		return nil, fmt.Errorf("%w: nil pool", ErrConfig)
	}
	if opts.Table == "" {
		opts.Table = DefaultTable
	}
	table, err := quoteTable(opts.Table)
	if err != nil {
		return nil, err
	}
	if opts.Horizon < 0 {
		return nil, fmt.Errorf("%w: negative Horizon", ErrConfig)
	}
	if opts.SweepBatch < 0 {
		return nil, fmt.Errorf("%w: negative SweepBatch", ErrConfig)
	}
	if opts.RecheckInterval < 0 {
		return nil, fmt.Errorf("%w: negative RecheckInterval (the checks of the server always run)", ErrConfig)
	}
	if len(opts.Prefix) > MaxPrefixBytes {
		return nil, fmt.Errorf("%w: Prefix longer than %d bytes", ErrConfig, MaxPrefixBytes)
	}
	s := &Store{pool: pool, table: table, prefix: opts.Prefix, timeout: opts.Timeout, sweepBatch: opts.SweepBatch,
		observer: opts.Observer, log: opts.Logger}
	if s.log == nil {
		s.log = slog.Default()
	}
	if s.prefix == "" {
		s.prefix = DefaultPrefix
	}
	if s.timeout == 0 {
		s.timeout = DefaultTimeout
	}
	if s.sweepBatch == 0 {
		s.sweepBatch = DefaultSweepBatch
	}
	s.direct = honoursContext(pool)
	s.simple = pool.Config().ConnConfig.DefaultQueryExecMode == pgx.QueryExecModeSimpleProtocol
	if err := s.checkPooler(ctx); err != nil {
		return nil, err
	}
	if err := s.resolve(ctx, opts.Table); err != nil {
		return nil, err
	}
	s.prepare()

	s.checks = checks{
		asyncCommit: opts.AllowAsyncCommit, asyncStandby: opts.AllowAsyncStandby,
		requireStandby: opts.RequireSynchronousStandby, rollback: opts.AllowRollback, maxSkew: opts.MaxSkew, now: now,
		horizon: opts.Horizon,
	}
	if s.checks.maxSkew == 0 {
		s.checks.maxSkew = DefaultMaxSkew
	}
	st, err := s.readServer(ctx)
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &pgErr) && pgErr.Code == "42P01": // undefined_table
		return nil, fmt.Errorf("%w: table %s does not exist: run pgstore.Migrate or the SQL of pgstore.Schema", ErrConfig, opts.Table)
	case errors.As(err, &pgErr) && pgErr.Code == "42501": // insufficient_privilege
		return nil, fmt.Errorf("%w: the role may not read table %s (GRANT SELECT, INSERT, UPDATE, DELETE)", ErrConfig, opts.Table)
	case err != nil:
		return nil, err
	case !st.marker && st.legacy:
		return nil, fmt.Errorf("%w: table %s has the key layout of pgstore before v2: run pgstore.Migrate (stores of earlier versions then refuse it)", ErrConfig, opts.Table)
	case !st.marker:
		return nil, forgottenRefusal(s.tableName())
	}
	s.noteStandby(st.durable)
	st.sawStandby = s.sawStandby.Load()
	accepted, err := s.checks.judge(st)
	if err != nil {
		return nil, err
	}
	s.durable.Store(&st.durable)
	// A fence of unknown history does not fail New: the Store refuses
	// until it has passed, and then serves without a restart.
	fenced := s.keepHistory(ctx, st, judgeHistory(st, s.checks.horizon))
	if fenced != nil {
		s.refusal.Store(&fenced)
	}
	s.report(accepted, fenced)

	interval := opts.SweepInterval
	if interval == 0 {
		interval = DefaultSweepInterval
	}
	recheck := opts.RecheckInterval
	if recheck == 0 {
		recheck = DefaultRecheckInterval
	}
	sctx, stop := context.WithCancel(context.Background())
	s.stop = stop
	if interval > 0 {
		s.sweeping.Add(1)
		go s.sweeper(sctx, interval)
	}
	s.sweeping.Add(1)
	go s.checker(sctx, recheck)
	return s, nil
}

// Close stops the store's sweeper and checker and waits for them to
// return. It does not close the pool. Calls after Close still work
// (without a sweeper, and without rechecks). It returns nil (the
// signature is io.Closer's, as every store's).
func (s *Store) Close() error {
	s.closed.Do(func() {
		if s.stop != nil {
			s.stop()
		}
		s.sweeping.Wait()
	})
	return nil
}

// Prefix returns the key prefix the store writes under.
func (s *Store) Prefix() string { return s.prefix }
