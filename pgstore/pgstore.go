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
// its marker and is not detected (docs/pgstore.md says what to do).
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
// docs/pgstore.md has the table of what survives a crash and a failover.
//
// The store fails closed: when PostgreSQL is down, slow, read-only, or
// answers anything unexpected, Claim returns first == false and an error
// matching [ErrUnavailable]. Callers must treat every error as "refuse the
// request". The table is created only by [Migrate] (or by running the SQL
// of [Schema]); a Store never creates it.
package pgstore

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
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

// DefaultMaxClockSkew is how far the instance's clock may run behind the
// database's when Options.MaxClockSkew is zero: half of
// [replay.SkewMargin].
const DefaultMaxClockSkew = replay.SkewMargin / 2

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
	// ID as taken, a resent lease step finds its own lease or done row.
	ErrUnavailable = errors.New("pgstore: replay store unavailable")

	// ErrInvalidClaim reports a call refused without recording anything: an
	// empty ID or one over MaxIDBytes, or a lease that is not positive
	// (refused before reaching PostgreSQL), or an until that is not after
	// the database's clock (refused by the statement itself). The last two
	// also match [replay.ErrExpired].
	ErrInvalidClaim = errors.New("pgstore: invalid claim")

	// ErrForgotten reports that the table lost its marker row: it was
	// truncated or emptied, so it no longer remembers which IDs were
	// claimed. Every call then refuses (the error also matches
	// ErrUnavailable) until an operator runs [Rearm] and its fence has
	// passed. It also reports a [Migrate] or [New] that finds such a
	// table.
	ErrForgotten = errors.New("pgstore: table has forgotten its claims (marker row missing)")

	// ErrConfig reports a store that cannot be built as configured: a nil
	// pool, an invalid table name, a missing, unlogged or temporary table
	// or one the role may not write, synchronous_commit off without
	// AllowAsyncCommit, fsync or full_page_writes off without
	// AllowRollback, standbys none of which is synchronous without
	// AllowAsyncStandby, no synchronous standby with
	// RequireSynchronousStandby, an instance clock too far behind the
	// database's, a Prefix over MaxPrefixBytes, a table of the key layout
	// before v2 or without the record columns (run [Migrate]), or a
	// negative option.
	ErrConfig = errors.New("pgstore: invalid configuration")
)

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
	// bounds the call.
	Timeout time.Duration

	// AllowAsyncCommit lets New accept a session whose synchronous_commit
	// is off. PostgreSQL then acknowledges a commit before it is on disk,
	// and a crash of the server forgets the claims of the last moments
	// (up to three times wal_writer_delay): an ID accepted just before the
	// crash may be accepted again after it. The check still runs: while
	// synchronous_commit is off, New and the recheck (once per appearance)
	// log a Warn and emit [EventRiskAccepted] naming this option.
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
	// recheck (once per appearance) log a Warn and emit [EventRiskAccepted]
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
	// log a Warn and emit [EventRiskAccepted] naming this option.
	AllowRollback bool

	// RequireSynchronousStandby makes New refuse (ErrConfig) a session
	// whose commits do not wait for a synchronous standby (see
	// [Durability.WaitsForStandby]): for deployments that must not lose an
	// acknowledged claim in a failover.
	RequireSynchronousStandby bool

	// MaxClockSkew is how far the instance's clock may run behind the
	// database's, at New and at every recheck (read before the check's
	// query, so a slow answer counts as behind). Single use does not
	// depend on it: every deadline is the database's, and a claim whose
	// until the database's clock has passed is refused, so a slow clock
	// cannot make a replay first. But an
	// instance whose clock is behind accepts tokens (one-time, request
	// state) the others already call expired, for as long as it is behind,
	// and refuses them as expired once it is more than
	// [replay.SkewMargin] behind. Zero means DefaultMaxClockSkew; a
	// negative value turns the check off.
	MaxClockSkew time.Duration

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

	// Observer, when not nil, is called with every [Event]: a risk
	// accepted by an Allow* option, a recheck that starts or stops
	// refusing. It is called synchronously (from New or the checker
	// goroutine) and must not block.
	Observer func(Event)

	// Logger receives one line per [Event]. Nil means slog.Default().
	// Lines hold no ID, token or key.
	Logger *slog.Logger

	// SweepBatch is how many expired rows one sweeper statement deletes at
	// most. Zero means DefaultSweepBatch.
	SweepBatch int

	// OnSweep, when set, is called after each sweep of the store's own
	// sweeper with what [Store.Sweep] returned, so that a sweeper that
	// keeps failing (and a table that keeps growing) is seen. It runs on
	// the sweeper's goroutine; keep it short.
	OnSweep func(deleted int64, err error)
}

// Store is a [replay.Store] backed by one PostgreSQL table. It also
// implements the optional [replay.Releaser] (Release), [replay.Leaser]
// (AcquireLease, ConfirmLease, ReleaseLease), which the webhook middleware
// uses to process each delivery exactly once, and [replay.Recorder]
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
	simple  bool // the pool's DefaultQueryExecMode is the simple protocol (work.go)
	durable atomic.Pointer[Durability]
	refusal atomic.Pointer[error] // set by the recheck while a check of New fails
	checks  checks

	claimSQL, takeoverSQL, releaseSQL              string
	acquireSQL, confirmSQL, releaseLeaseSQL, sweep string
	fenceSQL, claimTxSQL, takeoverTxSQL            string // work.go
	lockedReadSQL, lockedFenceSQL                  string // lockedwork.go
	sweepBatch                                     int
	onSweep                                        func(int64, error)
	observer                                       func(Event)
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
// Options.MaxClockSkew (else ErrConfig). It then starts the sweeper and
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
// safe. Each change is reported as an [Event] and logged once.
//
// New and the checker also keep the table's history record (in the
// marker row: the server's timeline and which standbys were synchronous),
// and judge a server that is primary on another timeline than the record
// names: unless the record names it a confirmed synchronous standby of
// the old primary, its history is unknown and the table is fenced
// ([ErrFenced]) for the longest lifetime of a claim the Stores saw, plus
// [replay.SkewMargin]; New then returns a Store that refuses until the
// fence has passed, and serves after it. Until a check has judged such a
// server, every claim, lease and record step on it refuses
// (docs/pgstore.md, "Unknown history").
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
	if opts.SweepBatch < 0 {
		return nil, fmt.Errorf("%w: negative SweepBatch", ErrConfig)
	}
	if opts.RecheckInterval < 0 {
		return nil, fmt.Errorf("%w: negative RecheckInterval (the checks of the server always run)", ErrConfig)
	}
	if len(opts.Prefix) > MaxPrefixBytes {
		return nil, fmt.Errorf("%w: Prefix longer than %d bytes", ErrConfig, MaxPrefixBytes)
	}
	s := &Store{pool: pool, table: table, prefix: opts.Prefix, timeout: opts.Timeout, sweepBatch: opts.SweepBatch, onSweep: opts.OnSweep,
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
	if err := s.resolve(ctx, opts.Table); err != nil {
		return nil, err
	}
	s.prepare()

	s.checks = checks{
		asyncCommit: opts.AllowAsyncCommit, asyncStandby: opts.AllowAsyncStandby,
		requireStandby: opts.RequireSynchronousStandby, rollback: opts.AllowRollback, maxSkew: opts.MaxClockSkew, now: now,
	}
	if s.checks.maxSkew == 0 {
		s.checks.maxSkew = DefaultMaxClockSkew
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
		return nil, fmt.Errorf("%w: %w: table %s", ErrUnavailable, ErrForgotten, opts.Table)
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
	fenced := s.keepHistory(ctx, st, judgeHistory(st))
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
// (without a sweeper, and without rechecks).
func (s *Store) Close() {
	s.closed.Do(func() {
		if s.stop != nil {
			s.stop()
		}
		s.sweeping.Wait()
	})
}

// Prefix returns the key prefix the store writes under.
func (s *Store) Prefix() string { return s.prefix }

// Durability is what [New] read of the session's commit settings: what a
// claim's acknowledgement means.
type Durability struct {
	// SynchronousCommit is the session's synchronous_commit: "on",
	// "remote_apply" or "remote_write" (flushed locally, and also sent to
	// the synchronous standbys if any are configured), "local" (flushed
	// locally only), or "off" (not flushed: accepted only with
	// Options.AllowAsyncCommit).
	SynchronousCommit string
	// SynchronousStandbyNames is the server's synchronous_standby_names;
	// empty when no standby is synchronous.
	SynchronousStandbyNames string
	// Standbys is how many physical standbys were streaming from the
	// server at the last check (pg_stat_replication without logical
	// walsenders and without pg_basebackup's).
	Standbys int
	// StandbySlots is how many permanent physical replication slots the
	// server had at the last check (pg_replication_slots), whether a
	// standby is streaming from them or not.
	StandbySlots int
}

// WaitsForStandby reports whether an acknowledged claim has also reached a
// synchronous standby: synchronous_standby_names is set and
// synchronous_commit is on, remote_write or remote_apply. A failover that
// promotes such a standby keeps every acknowledged claim (a failover to an
// asynchronous one may not). Without it, an acknowledged claim survives a
// crash of the server (synchronous_commit not off) but not the loss of its
// disk.
func (d Durability) WaitsForStandby() bool {
	switch d.SynchronousCommit {
	case "on", "remote_write", "remote_apply":
		return d.SynchronousStandbyNames != ""
	}
	return false
}

// Durability returns the commit settings New read, or the latest recheck
// read since.
func (s *Store) Durability() Durability {
	if d := s.durable.Load(); d != nil {
		return *d
	}
	return Durability{}
}

// checks are New's checks of the server, which the sweeper repeats.
type checks struct {
	asyncCommit, asyncStandby, requireStandby, rollback bool
	maxSkew                                             time.Duration
	now                                                 func() time.Time
}

// serverState is what one query reads of the server and the table.
type serverState struct {
	durable          Durability
	recovery, marker bool
	sawStandby       bool          // a standby not waited for was seen before (see Store.sawStandby)
	legacy           bool          // the table has the marker of key layout 1: not migrated
	writable         bool          // the role may SELECT, INSERT, UPDATE and DELETE the table
	permanent        bool          // the table is neither unlogged nor temporary
	recordable       bool          // the table has the columns fingerprint and result (bytea)
	fsync, fullPages bool          // the server's fsync and full_page_writes
	behind           time.Duration // how far the instance's clock is behind now()

	// The server's history (see [judgeHistory]): its timeline (0 in
	// recovery), the marker row's record, the physical standbys
	// streaming, the name it streamed under if it was a standby, the
	// longest remaining lifetime of a live row (seconds), and how long
	// the marker's fence still lasts (0: none).
	timeline  int64
	record    string
	standbys  []standby
	self      self
	longest   float64
	fencedFor time.Duration
}

// resolve finds, at New, the schema of the table named name (quoted, as
// [quoteTable] returns it; an unqualified name is looked up along the
// session's search_path, as PostgreSQL does) and sets s.table to the
// schema-qualified name, which every statement of the store then uses: a
// temporary table of the same name, which an unqualified name would find
// first in a session that created one, cannot take the store's statements.
// It also reads the database's name, the server's system identifier,
// address and port, which a transaction of [WithTx] must share (a copy of
// the data directory, such as a promoted standby, has the same identifier,
// not the same address and port). A table that does not exist
// is refused with ErrConfig.
func (s *Store) resolve(ctx context.Context, name string) error {
	type resolved struct {
		schema, table *string
		db            string
		sysID         int64
		port          *int32
		addr          *string
	}
	r, err := call(s, ctx, func(ctx context.Context) (resolved, error) {
		var r resolved
		err := s.pool.QueryRow(ctx, `SELECT n.nspname, c.relname, current_database(), (SELECT system_identifier FROM pg_control_system()),
			inet_server_port(), inet_server_addr()::text FROM (SELECT to_regclass($1) AS oid) t LEFT JOIN pg_class c ON c.oid = t.oid LEFT JOIN pg_namespace n ON n.oid = c.relnamespace`, name).Scan(
			&r.schema, &r.table, &r.db, &r.sysID, &r.port, &r.addr)
		return r, err
	})
	switch {
	case err != nil:
		return err
	case r.schema == nil || r.table == nil:
		return fmt.Errorf("%w: table %s does not exist: run pgstore.Migrate or the SQL of pgstore.Schema", ErrConfig, strings.ReplaceAll(name, `"`, ""))
	}
	s.table = pgx.Identifier{*r.schema, *r.table}.Sanitize()
	s.dbName, s.sysID, s.port, s.addr = r.db, r.sysID, r.port, r.addr
	return nil
}

// readServer reads the session's settings, the standbys, the server's
// clock and the marker row in one query.
func (s *Store) readServer(ctx context.Context) (serverState, error) {
	type read struct {
		st                 serverState
		dbNow              time.Time
		record, conninfo   *string
		standbys           string
		slot, cluster      string
		longest, fencedFor *float64
	}
	// The instance's clock is read before the query: a slow answer (a
	// lock wait, a loaded server) then makes the instance look further
	// behind, never less.
	before := s.checks.now()
	r, err := call(s, ctx, func(ctx context.Context) (read, error) {
		var r read
		// Physical standbys: walsenders without a logical slot (a CDC
		// consumer is no failover target), leaving out pg_basebackup's (a
		// base backup in progress: restoring it is a rollback, not a
		// failover), and permanent physical slots (a standby's
		// primary_slot_name; pg_basebackup's own slot is temporary). A
		// role without pg_read_all_stats sees no state or name (NULL):
		// such walsenders count.
		err := s.pool.QueryRow(ctx, `SELECT current_setting('synchronous_commit'), current_setting('synchronous_standby_names'),
			current_setting('fsync')::bool, current_setting('full_page_writes')::bool,
			(SELECT count(*) FROM pg_stat_replication r LEFT JOIN pg_replication_slots l ON l.active_pid = r.pid
			  WHERE l.slot_type IS DISTINCT FROM 'logical' AND r.state IS DISTINCT FROM 'backup'
			    AND r.application_name IS DISTINCT FROM 'pg_basebackup'),
			(SELECT count(*) FROM pg_replication_slots WHERE slot_type = 'physical' AND NOT temporary),
			pg_is_in_recovery(), now(), EXISTS (SELECT 1 FROM `+s.table+` WHERE key = `+markerSQL+` AND state = 'm'),
			EXISTS (SELECT 1 FROM `+s.table+` WHERE key = `+legacyMarkerSQL+` AND state = 'm'),
			has_table_privilege($1, 'SELECT') AND has_table_privilege($1, 'INSERT') AND
			has_table_privilege($1, 'UPDATE') AND has_table_privilege($1, 'DELETE'),
			(SELECT relpersistence = 'p' FROM pg_class WHERE oid = $1::regclass),
			(SELECT count(*) = 2 FROM pg_attribute WHERE attrelid = $1::regclass AND attname IN ('fingerprint', 'result')
			  AND atttypid = 'bytea'::regtype AND attnum > 0 AND NOT attisdropped),
			CASE WHEN pg_is_in_recovery() THEN 0 ELSE `+timelineSQL+` END,
			(SELECT token FROM `+s.table+` WHERE key = `+markerSQL+` AND state = 'm'),
			(SELECT coalesce(json_agg(json_build_object('app', r.application_name, 'slot', l.slot_name, 'state', r.sync_state) ORDER BY r.application_name, l.slot_name, r.pid), '[]')::text
			  FROM pg_stat_replication r LEFT JOIN pg_replication_slots l ON l.active_pid = r.pid
			  WHERE l.slot_type IS DISTINCT FROM 'logical' AND r.state IS DISTINCT FROM 'backup'
			    AND r.application_name IS DISTINCT FROM 'pg_basebackup'),
			coalesce(current_setting('primary_slot_name', true), ''), current_setting('cluster_name'),
			CASE WHEN pg_has_role('pg_read_all_settings', 'USAGE') THEN current_setting('primary_conninfo') END,
			(SELECT extract(epoch FROM max(until) - now())::float8 FROM `+s.table+` WHERE until > now() AND until < 'infinity' AND state <> 'm'),
			(SELECT CASE WHEN until = 'infinity' THEN 'Infinity'::float8 WHEN until > now() THEN extract(epoch FROM until - now())::float8 ELSE 0 END
			  FROM `+s.table+` WHERE key = `+markerSQL+` AND state = 'm')`, s.table).Scan(
			&r.st.durable.SynchronousCommit, &r.st.durable.SynchronousStandbyNames, &r.st.fsync, &r.st.fullPages, &r.st.durable.Standbys, &r.st.durable.StandbySlots, &r.st.recovery, &r.dbNow, &r.st.marker, &r.st.legacy, &r.st.writable, &r.st.permanent, &r.st.recordable,
			&r.st.timeline, &r.record, &r.standbys, &r.slot, &r.cluster, &r.conninfo, &r.longest, &r.fencedFor)
		return r, err
	})
	if err != nil {
		return serverState{}, err
	}
	r.st.behind = r.dbNow.Sub(before)
	if r.record != nil {
		r.st.record = *r.record
	}
	if r.longest != nil {
		r.st.longest = *r.longest
	}
	if r.fencedFor != nil {
		r.st.fencedFor = time.Duration(min(*r.fencedFor, maxFence.Seconds()) * float64(time.Second))
	}
	if json.Unmarshal([]byte(r.standbys), &r.st.standbys) != nil {
		r.st.standbys = nil
	}
	r.st.self = selfFrom(r.slot, r.cluster, r.conninfo)
	return r.st, nil
}

// judge returns why the store must not run on a server in state st (nil
// if it may), and the risks present that an Allow* option accepts.
func (c checks) judge(st serverState) ([]risk, error) {
	d := st.durable
	standby := (d.Standbys > 0 || d.StandbySlots > 0 || st.sawStandby) && !d.WaitsForStandby()
	var accepted []risk
	accept := func(r risk, allowed bool) {
		if allowed {
			accepted = append(accepted, r)
		}
	}
	if d.SynchronousCommit == "off" {
		accept(riskAsyncCommit, c.asyncCommit)
	}
	if !st.fsync {
		accept(riskFsync, c.rollback)
	}
	if !st.fullPages {
		accept(riskFullPages, c.rollback)
	}
	if standby {
		accept(riskStandby, c.asyncStandby)
	}
	switch {
	case st.recovery:
		return accepted, fmt.Errorf("%w: the server is a read-only standby", ErrUnavailable)
	case !st.writable:
		return accepted, fmt.Errorf("%w: the role may not SELECT, INSERT, UPDATE and DELETE the table (GRANT them)", ErrConfig)
	case !st.permanent:
		return accepted, fmt.Errorf("%w: the table is unlogged or temporary: a crash (or the session's end) empties it, and a standby never has it (ALTER TABLE ... SET LOGGED)", ErrConfig)
	case !st.recordable:
		return accepted, fmt.Errorf("%w: the table lacks the columns fingerprint and result (bytea) of replay.Recorder: it was made by an earlier pgstore (run pgstore.Migrate)", ErrConfig)
	case d.SynchronousCommit == "off" && !c.asyncCommit:
		return accepted, fmt.Errorf("%w: synchronous_commit is off: a crash would forget acknowledged claims (set it on, or Options.AllowAsyncCommit)", ErrConfig)
	case !st.fsync && !c.rollback:
		return accepted, fmt.Errorf("%w: fsync is off: a crash of the machine can lose acknowledged claims and leave the marker row, so they would be accepted again (set fsync on, or Options.AllowRollback)", ErrConfig)
	case !st.fullPages && !c.rollback:
		return accepted, fmt.Errorf("%w: full_page_writes is off: a crash of the machine can tear pages that recovery cannot repair, losing acknowledged claims (set full_page_writes on, or Options.AllowRollback)", ErrConfig)
	case standby && !c.asyncStandby:
		return accepted, fmt.Errorf("%w: the server streams to %d standby(s) and has %d physical replication slot(s) (a standby seen since the store started counts until synchronous replication covers it), but commits wait for no standby: a failover could accept acknowledged claims again. %s",
			ErrConfig, d.Standbys, d.StandbySlots, howToCoverStandby)
	case c.requireStandby && !d.WaitsForStandby():
		return accepted, fmt.Errorf("%w: commits do not wait for a synchronous standby (synchronous_commit %s, synchronous_standby_names %q)",
			ErrConfig, d.SynchronousCommit, d.SynchronousStandbyNames)
	case c.maxSkew > 0 && st.behind > c.maxSkew:
		return accepted, fmt.Errorf("%w: this instance's clock is %v behind the database's (limit %v): fix NTP", ErrConfig, st.behind.Round(time.Millisecond), c.maxSkew)
	}
	return accepted, nil
}

// howToCoverStandby is what New's refusal of a standby that commits do
// not wait for says to do: what the checks accept as covered.
const howToCoverStandby = "To cover the standbys, make commits wait for them: set synchronous_standby_names to name them " +
	"(their application_name, e.g. 'FIRST 1 (standby1)'; every standby a failover may promote must be synchronous) " +
	"and keep synchronous_commit on, remote_write or remote_apply (not local or off), then reload; " +
	"and give every standby a physical replication slot (primary_slot_name, or pg_basebackup -C -S <slot>), " +
	"since a standby without a slot that is not streaming when a Store starts cannot be seen and is not covered. " +
	"Or set Options.AllowAsyncStandby to accept the risk"

// newSessionCommit reads synchronous_commit in a new session, opened with
// the pool's connection settings and closed at once: what the next
// connection the pool opens will have.
func (s *Store) newSessionCommit(ctx context.Context) (string, error) {
	return call(s, ctx, func(ctx context.Context) (string, error) {
		c, err := pgx.ConnectConfig(ctx, s.pool.Config().ConnConfig.Copy())
		if err != nil {
			return "", err
		}
		defer c.Close(context.Background())
		var v string
		err = c.QueryRow(ctx, `SELECT current_setting('synchronous_commit')`).Scan(&v)
		return v, err
	})
}

// commitRank orders synchronous_commit values from the weakest (off).
func commitRank(v string) int {
	switch v {
	case "off":
		return 0
	case "local":
		return 1
	case "remote_write":
		return 2
	case "on":
		return 3
	}
	return 4 // remote_apply
}

// noteStandby records a standby that commits do not wait for (sticky
// until they do).
func (s *Store) noteStandby(d Durability) {
	switch {
	case d.WaitsForStandby():
		s.sawStandby.Store(false)
	case d.Standbys > 0 || d.StandbySlots > 0:
		s.sawStandby.Store(true)
	}
}

// recheck repeats New's checks (on the checker goroutine): while one
// fails, Claim, AcquireLease and ConfirmLease refuse with its reason. A
// server that cannot be read leaves things as they are (the calls fail on
// their own).
func (s *Store) recheck(ctx context.Context) {
	st, err := s.readServer(ctx)
	if err != nil {
		return
	}
	// The pool's sessions keep the settings they started with; a session
	// the pool opens next gets what ALTER ROLE or ALTER DATABASE set since.
	if c, err := s.newSessionCommit(ctx); err == nil && commitRank(c) < commitRank(st.durable.SynchronousCommit) {
		st.durable.SynchronousCommit = c
	}
	s.noteStandby(st.durable)
	st.sawStandby = s.sawStandby.Load()
	s.durable.Store(&st.durable)
	accepted, err := s.checks.judge(st)
	// The history is kept whatever the other checks say: a fence is the
	// table's, for every Store on it, and the one reason that counts.
	if fenced := s.keepHistory(ctx, st, judgeHistory(st)); fenced != nil {
		err = fenced
	}
	if err != nil {
		if !errors.Is(err, ErrUnavailable) {
			err = fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
		s.refusal.Store(&err)
	} else {
		s.refusal.Store(nil)
	}
	s.report(accepted, err)
}

// report emits an event for each accepted risk that the previous check did
// not report, and for a refusal that starts, changes or ends.
func (s *Store) report(accepted []risk, refusal error) {
	for _, r := range accepted {
		seen := false
		for _, p := range s.accepted {
			seen = seen || p == r
		}
		if !seen {
			s.emit(Event{Kind: EventRiskAccepted, Option: r.option, Risk: r.what})
		}
	}
	s.accepted = accepted
	switch {
	case refusal != nil && "refusing: "+reasonClass(refusal) != s.refusing:
		s.refusing = "refusing: " + reasonClass(refusal)
		s.emit(Event{Kind: EventRefusing, Reason: refusal})
	case refusal == nil && s.refusing != "":
		s.refusing = ""
		s.emit(Event{Kind: EventServing})
	}
}

// reasonClass is a refusal's text without its words holding figures (how
// far a clock is behind, how many standbys stream), so that a reason whose figures move
// at every recheck is reported once, not every second.
func reasonClass(err error) string {
	words := strings.Fields(err.Error())
	kept := words[:0]
	for _, w := range words {
		if !strings.ContainsAny(w, "0123456789") {
			kept = append(kept, w)
		}
	}
	return strings.Join(kept, " ")
}

// checker runs recheck every interval until ctx ends.
func (s *Store) checker(ctx context.Context, interval time.Duration) {
	defer s.sweeping.Done()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			s.recheck(ctx)
		}
	}
}

// refused returns the recheck's reason to refuse calls, or nil.
func (s *Store) refused() error {
	if err := s.refusal.Load(); err != nil {
		return *err
	}
	return nil
}

// prepare writes the store's statements for its table.
func (s *Store) prepare() {
	t := s.table
	// A claim runs claimSQL, and takeoverSQL only when claimSQL found the
	// marker but neither inserted nor found a live row. In both, m is the
	// marker row: when the table was truncated or emptied it is gone, and
	// the statement neither inserts nor takes anything over. leg is a live row of the same ID
	// under the layout before version 2 ($3, see [Migrate]): a claim made
	// before the table was migrated, which keeps the ID taken until it
	// expires.
	//
	// claimSQL looks up the marker and the ID's row (cur, in the
	// statement's snapshot). A live row refuses the claim: leg is a
	// subquery PostgreSQL evaluates only when the insert's condition
	// reaches it, so it is not read, and nothing is written or locked: a
	// flood of replays costs two index lookups each, not commits.
	// Otherwise it inserts the key when the marker row is there, until is
	// in the future and leg is not live; a row committed after the
	// snapshot is found by ON CONFLICT DO NOTHING, again without a write.
	// It returns whether it inserted, whether the marker is there, whether
	// cur was live and whether until is in the future. When the marker is
	// there and it neither inserted nor found a live row (an expired row,
	// a live leg, a past until, or a concurrent statement that inserted,
	// took over or deleted the row), Claim runs takeoverSQL, which decides
	// each of those.
	s.claimSQL = `WITH m AS (SELECT 1 FROM ` + t + ` WHERE key = ` + markerSQL + ` AND state = 'm' AND until <= now() AND ` + historyGuardSQL + `),
cur AS (SELECT 1 FROM ` + t + ` WHERE key = $1::bytea AND until > now()),
ins AS (
  INSERT INTO ` + t + ` (key, state, token, until)
  SELECT $1::bytea, 'c', '', $2::timestamptz FROM m
  WHERE NOT EXISTS (SELECT 1 FROM cur) AND $2::timestamptz > now()
    AND NOT EXISTS (SELECT 1 FROM ` + t + ` WHERE key = $3::bytea AND until > now())
  ON CONFLICT (key) DO NOTHING
  RETURNING 1
)
SELECT EXISTS (SELECT 1 FROM ins), EXISTS (SELECT 1 FROM m), EXISTS (SELECT 1 FROM cur), $2::timestamptz > now()`
	// takeoverSQL inserts a free key (ins) or takes over a row that has
	// expired (upd: after waiting for its row lock, PostgreSQL checks until
	// again on the row's newest version, so of two takeovers one wins). A
	// claim of a live row matches neither and writes nothing. The last
	// column reports an expired row in the statement's snapshot that the
	// claim could have taken: when neither ins nor upd took it, a
	// concurrent statement changed it first (took it over, or a sweeper or
	// release deleted it), and the claim runs again to see which.
	s.takeoverSQL = `WITH m AS (SELECT 1 FROM ` + t + ` WHERE key = ` + markerSQL + ` AND state = 'm' AND until <= now() AND ` + historyGuardSQL + `),
leg AS (SELECT 1 FROM ` + t + ` WHERE key = $3::bytea AND until > now()),
ins AS (
  INSERT INTO ` + t + ` (key, state, token, until)
  SELECT $1::bytea, 'c', '', $2::timestamptz FROM m WHERE $2::timestamptz > now() AND NOT EXISTS (SELECT 1 FROM leg)
  ON CONFLICT (key) DO NOTHING
  RETURNING 1
),
upd AS (
  UPDATE ` + t + ` SET state = 'c', token = '', until = $2::timestamptz
  WHERE key = $1::bytea AND until <= now() AND $2::timestamptz > now()
    AND EXISTS (SELECT 1 FROM m) AND NOT EXISTS (SELECT 1 FROM ins) AND NOT EXISTS (SELECT 1 FROM leg)
  RETURNING 1
)
SELECT EXISTS (SELECT 1 FROM m), $2::timestamptz > now(),
  EXISTS (SELECT 1 FROM ins) OR EXISTS (SELECT 1 FROM upd),
  EXISTS (SELECT 1 FROM m) AND $2::timestamptz > now() AND NOT EXISTS (SELECT 1 FROM leg)
    AND EXISTS (SELECT 1 FROM ` + t + ` WHERE key = $1::bytea AND until <= now())`
	s.releaseSQL = `DELETE FROM ` + t + ` WHERE key = $1`
	s.prepareLease()
	s.prepareSweep()
	s.prepareWork()
	s.prepareLockedWork()
}

// call runs fn within the store's deadline and returns its result.
//
// It returns when the deadline passes or ctx is cancelled even if the
// driver has not, so a hung server cannot hold the caller past it. When
// the pool's connections end a statement as soon as its context ends
// (s.direct: pgconn's DeadlineContextWatcherHandler without a delay, pgx's
// default; see [honoursContext]), fn runs on the caller's goroutine and
// the driver itself returns at the deadline. Otherwise fn runs on a
// goroutine of its own, and call stops waiting for it at the deadline;
// the abandoned fn then writes only into its own result, which nobody
// reads. Errors are wrapped in ErrUnavailable, together with the context
// error when the deadline or a cancellation ended the call; on error the
// result is T's zero value.
func call[T any](s *Store, ctx context.Context, fn func(ctx context.Context) (T, error)) (T, error) {
	return callIn(s, ctx, s.direct, fn)
}

// callIn is [call], with fn run on the caller's goroutine when direct is
// set, else on a goroutine of its own.
func callIn[T any](s *Store, ctx context.Context, direct bool, fn func(ctx context.Context) (T, error)) (T, error) {
	var zero T
	if s.pool == nil {
		return zero, fmt.Errorf("%w: zero Store (use pgstore.New)", ErrConfig)
	}
	if ctx == nil {
		ctx = context.Background()
	}
	if s.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.timeout)
		defer cancel()
	}
	if err := ctx.Err(); err != nil {
		return zero, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	var v T
	var err error
	if direct {
		v, err = fn(ctx)
	} else {
		type result struct {
			v   T
			err error
		}
		done := make(chan result, 1) // buffered: the sender never blocks
		go func() {
			v, err := fn(ctx)
			done <- result{v, err}
		}()
		select {
		case r := <-done:
			v, err = r.v, r.err
		case <-ctx.Done():
			return zero, fmt.Errorf("%w: %w", ErrUnavailable, ctx.Err())
		}
	}
	if err == nil {
		return v, nil
	}
	if ctxErr := ctx.Err(); ctxErr != nil && !errors.Is(err, ctxErr) {
		return zero, fmt.Errorf("%w: %w (%w)", ErrUnavailable, ctxErr, err)
	}
	return zero, fmt.Errorf("%w: %w", ErrUnavailable, err)
}

// honoursContext reports whether pool's connections end a statement, a
// read or a write as soon as its context ends: their context watcher is
// pgconn's DeadlineContextWatcherHandler with no DeadlineDelay (pgx's
// default), which sets the connection's deadline to now when the context
// is done, so a blocked read or write returns at once. (Acquiring a
// connection and dialing honour the context in pgx whatever the handler.)
// Any other handler — one that sends a cancel request first, waits a
// delay, or is the caller's own — is not trusted, and each call then runs
// on a goroutine of its own. The handler is built on a zero PgConn, which
// pgx's default reads no more of than its nil net.Conn; a builder that
// panics on it is not trusted either.
func honoursContext(pool *pgxpool.Pool) (ok bool) {
	build := pool.Config().ConnConfig.BuildContextWatcherHandler
	if build == nil {
		return false
	}
	defer func() {
		if recover() != nil {
			ok = false
		}
	}()
	h, isDeadline := build(new(pgconn.PgConn)).(*pgconn.DeadlineContextWatcherHandler)
	return isDeadline && h.DeadlineDelay == 0
}

// run is call for a statement without a result.
func (s *Store) run(ctx context.Context, fn func(ctx context.Context) error) error {
	_, err := call(s, ctx, func(ctx context.Context) (struct{}, error) { return struct{}{}, fn(ctx) })
	return err
}

// maxRaces is how many times a claim or an acquire runs when a concurrent
// statement changed the expired row it found (nothing was written by the
// runs that lost); errRaced reports that it lost every time.
const maxRaces = 3

var errRaced = errors.New("the row kept changing under concurrent statements")

// key is the row key of id: the prefix's length (two bytes, big-endian),
// the prefix, then id. The length makes the key unambiguous across
// prefixes: no key of one prefix is a key of another, even when one prefix
// starts with another ("ctoken:replay:" and "ctoken:replay:webhooks:").
// Its first byte is 0x00 or 0x01 (1 <= len(prefix) <= MaxPrefixBytes), and
// the marker row's key is two zero bytes (a prefix of length 0).
func (s *Store) key(id string) []byte {
	k := make([]byte, 0, 2+len(s.prefix)+len(id))
	k = binary.BigEndian.AppendUint16(k, uint16(len(s.prefix)))
	return append(append(k, s.prefix...), id...)
}

// legacyKey is the row key of id under the layout before version 2
// (prefix then id, ambiguous across nested prefixes). The store writes no
// such key; a live row under it is a claim made before [Migrate] upgraded
// the table, and keeps id taken until it expires.
func (s *Store) legacyKey(id string) []byte {
	k := make([]byte, 0, len(s.prefix)+len(id))
	return append(append(k, s.prefix...), id...)
}

// keys returns id's row key and its layout-1 key (see [Store.key] and
// [Store.legacyKey]) in one allocation.
func (s *Store) keys(id string) (key, legacy []byte) {
	n := 2 + len(s.prefix) + len(id)
	b := make([]byte, 0, n+len(s.prefix)+len(id))
	b = binary.BigEndian.AppendUint16(b, uint16(len(s.prefix)))
	b = append(append(b, s.prefix...), id...)
	b = append(append(b, s.prefix...), id...)
	return b[:n:n], b[n:]
}

// Claim records id until the given time and reports whether this call was
// the first live claim of id, across every process sharing the table and
// prefix. Exactly one of any number of concurrent claims of the same ID
// returns true, and it returns only after the claim is committed. Once
// until has passed by the database's clock, the ID can be claimed again; an
// until after the year 9999 is held forever, and one before the year 1 is
// refused as expired.
//
// Claim fails closed: on any error it returns first == false and an error
// matching ErrUnavailable (PostgreSQL could not answer in time, answered
// with an error, or the table forgot its claims: [ErrForgotten]) or
// ErrInvalidClaim (empty or oversize id, or, also matching
// [replay.ErrExpired], an until not after the database's current time;
// nothing is recorded). Error text never contains id.
//
// A claim whose reply is lost may still have been committed, and a resend
// then reports first == false: the ID is consumed and refused, never
// accepted twice.
//
// When ctx carries a transaction ([WithTx], or the Context of a Work of
// [Store.BeginWork] of a Store on the same pool), Claim runs its
// statements in that transaction, on the caller's goroutine, so first ==
// true means the claim holds if and only if the transaction commits; a
// concurrent claim of the same ID waits for that transaction to end
// (docs/pgstore.md, "Transactional mode"). The Work of a Store on another
// pool, which may be another database, is not used: the claim then runs
// on this Store's pool, as without a transaction. A transaction of
// [WithTx] on another database or server fails the claim with an error
// matching [ErrConfig].
func (s *Store) Claim(ctx context.Context, id string, until time.Time) (bool, error) {
	if err := checkID(id); err != nil {
		return false, err
	}
	if err := s.refused(); err != nil {
		return false, err
	}
	var c claimed
	var err error
	if tx := s.claimTx(ctx); tx != nil {
		c, err = claimInTx(s, ctx, func(ctx context.Context) (claimed, error) {
			return s.claim(ctx, tx, s.claimTxSQL, s.takeoverTxSQL, id, until, s.dbName, s.sysID, s.port, s.addr)
		})
	} else {
		c, err = call(s, ctx, func(ctx context.Context) (claimed, error) {
			return s.claim(ctx, s.pool, s.claimSQL, s.takeoverSQL, id, until)
		})
	}
	marker, future, first := c.marker, c.future, c.first
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &pgErr) && strings.Contains(pgErr.Message, errForeignTx):
		return false, errForeign
	case err != nil:
		return false, err
	case first:
		return true, nil
	case !marker:
		return false, fmt.Errorf("%w: %w", ErrUnavailable, ErrForgotten)
	case !future:
		return false, fmt.Errorf("%w: %w: until is not after the database's clock", ErrInvalidClaim, replay.ErrExpired)
	}
	return false, nil
}

// claimed is what a claim's statements reported; again: takeoverSQL must
// run again (a concurrent statement changed the row it found).
type claimed struct{ marker, future, first, again bool }

// claim runs a claim's statements (claimSQL, then takeoverSQL when
// needed) on q: the pool, or a caller's transaction.
//
// guard, in a caller's transaction, is the database's name, the server's
// system identifier, port and address (the statements' $4 to $7, checked in the
// statement itself, see [Store.prepareWork]), read back as one more
// column.
func (s *Store) claim(ctx context.Context, q querier, claimSQL, takeoverSQL, id string, until time.Time, guard ...any) (claimed, error) {
	key, legacy := s.keys(id)
	u := pgTime(until)
	var c claimed
	var live bool
	var g int
	args := append([]any{key, u, legacy}, guard...)
	scan := func(dest ...any) []any {
		if len(guard) > 0 {
			dest = append(dest, &g)
		}
		return dest
	}
	if err := q.QueryRow(ctx, claimSQL, args...).Scan(scan(&c.first, &c.marker, &live, &c.future)...); err != nil || c.first || !c.marker || live {
		return c, err
	}
	// Neither inserted nor refused by a live row (an expired row, a row
	// that changed under a concurrent statement, a live leg, a past
	// until): take it over, or see why not.
	for range maxRaces {
		if err := q.QueryRow(ctx, takeoverSQL, args...).Scan(scan(&c.marker, &c.future, &c.first, &c.again)...); err != nil || c.first || !c.again {
			return c, err
		}
	}
	return c, errRaced
}

// Release forgets the claim of id, so the next Claim of id is first again.
// It is for a caller that claimed id and then failed to act on it; one-time
// tokens must never be released. Releasing an ID that is not claimed is not
// an error. Release deletes the row whoever claimed it, so release only IDs
// you claimed, before their until. Errors match ErrUnavailable or, for an
// empty or oversize id, ErrInvalidClaim; the claim may then stay in force.
func (s *Store) Release(ctx context.Context, id string) error {
	if err := checkID(id); err != nil {
		return err
	}
	return s.run(ctx, func(ctx context.Context) error {
		_, err := s.pool.Exec(ctx, s.releaseSQL, s.key(id))
		return err
	})
}

// checkID refuses an ID that cannot be a key.
func checkID(id string) error {
	switch {
	case id == "":
		return fmt.Errorf("%w: empty id", ErrInvalidClaim)
	case len(id) > MaxIDBytes:
		return fmt.Errorf("%w: id longer than %d bytes", ErrInvalidClaim, MaxIDBytes)
	}
	return nil
}
