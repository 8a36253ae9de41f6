// Package redisstore is a [replay.Store] backed by Redis, for fleets of
// servers that must accept each single-use ID (one-time token, single-use
// request state, webhook delivery) exactly once across every instance.
// Most users need one [Store], from [Open] on a go-redis client
// (ExampleOpen), given as the Replay or Store of a config
// (ExampleStore_Claim, ExampleStore_AcquireRecord); the operator provisions
// its prefix once, before ([Store.ProvisionNew] for a first deploy,
// ExampleStore_ProvisionNew; [Store.Provision] fences a key space of
// unknown history for one lifetime).
//
// Each claim and each lease step is one atomic Lua script (EVALSHA) on two
// keys of one hash slot: the ID's entry <prefix>{NN}:<id> and its shard's
// fence marker <prefix>{NN} (see [Shards]), so every step works unchanged
// on Redis Cluster. Exactly one of any number of concurrent claims of the
// same ID is first; Redis deletes the entry at its absolute expiry, so the
// store needs no sweeper and every instance agrees on when an ID may be
// claimed again. The store implements [replay.Leaser], which the webhook
// middleware needs; a lease is measured by Redis's clock and ends by
// itself. It also implements [replay.Recorder], which an idempotent HTTP
// API needs: the request's fingerprint is kept in the lease's entry, and
// the script that ends the lease records the response in a side key of
// the entry's hash slot, under the entry's fence, expiry and Durability
// wait; the response's bytes travel in plain SET and GET commands, never
// through Lua ([Store.AcquireRecord]). It needs Redis 7.0 or newer, or
// Valkey (PXAT, scripts replicated by their effects, and
// redis.acl_check_cmd, with which every check verifies that the store's
// user may run each command it sends: a missing right is [ErrConfig]
// naming the ACL rules to add, docs/fleet-reference.md "The fleet's ACL");
// the tests run against Redis 7.0 and Valkey 8.
//
// Each one-time token, single-use state and webhook delivery is accepted at
// most once through any single fault of the store:
//
//   - Redis that lost data with its markers (a restart without
//     persistence, FLUSHALL, an LRU policy that evicted a marker): the
//     script fences the shard ([ErrFenced]) until everything claimed
//     before the loss has expired: the key space's longest lifetime
//     ([Store.Lifetime]), recorded by every store before it claims for
//     longer and sent with every script, which refuses a step outliving
//     it by Redis's clock; the longer of two applications' lifetimes
//     wins (past a shorter [Options.Horizon] of the other), and the
//     longest Horizon bounds them all. A restart that
//     rolls back to older data (an RDB snapshot, AOF everysec after a
//     machine crash) keeps its markers and could not be detected, so a
//     Redis configured for it is refused ([ErrConfig], unless
//     [Options.AllowRollback]): persist with appendfsync always, or not
//     at all. Durability.LocalAOF does not stand in for appendfsync
//     always: under everysec WAITAOF can acknowledge the local fsync
//     before it ran (Valkey 8, Redis 7.4 until redis/redis#13793, February 2025).
//   - A failover to a replica that missed the last writes: with
//     [Options.Durability] every write waits for WAIT (and WAITAOF) on the
//     connection that wrote, and too few acknowledgements is
//     [ErrNotDurable]. This covers every failover only when Durability
//     waits for every replica the primary has: a store waiting for fewer
//     replicas than the primary has, or had (a replica whose link is down
//     still counts), refuses to run ([ErrConfig]) unless
//     [Options.AllowFewerReplicas] (right only when every failover promotes
//     the most up-to-date replica) or, without Durability,
//     [Options.AllowAsyncReplicas].
//   - Loss the server reports, found by the checks that run every
//     [Options.RecheckInterval] (1 s by default) while the store is open,
//     whether calls come or not, and compared with what
//     the store saw of the same server before (a server is recognised by
//     its run_id, kept per key space in <prefix>servers, so an app restart
//     compares too): keys evicted or eviction made possible (a
//     maxmemory-policy other than noeviction with maxmemory set), SWAPDB,
//     FLUSHALL or FLUSHDB run, those counters reset (CONFIG RESETSTAT:
//     found by the entry a reset leaves in INFO commandstats, which shows
//     a server's first reset always, and by ROLE's calls or
//     total_commands_processed below what the last check read; see
//     [Options.RecheckInterval]),
//     persistence weakened on the same server (appendfsync no longer
//     always, AOF switched off), a restart that lost markers. The store
//     refuses every call at once, fences every shard for the key space's
//     lifetime and
//     writes a loss entry in the key space's ledger (at once when a claim
//     finds its shard's marker missing).
//   - Eviction switched on at run time, or CONFIG RESETSTAT, between two
//     checks, whatever the policy is by then: Redis evicts only before a
//     command runs, never inside a script, and counts every key it
//     evicts in evicted_keys. The script of every step that can take a
//     free ID (a claim, an acquisition; a confirmation or renewal answers
//     for the caller's own lease, which eviction cannot give to another
//     holder) reads INFO stats itself and refuses ([ErrUnavailable], a
//     [Reason] naming the counters) when evicted_keys differs from what
//     the last check read on that master, or total_commands_processed is
//     below it; every such step then refuses until a check begun after
//     that, run at once, has judged the server, which takes the new
//     counters as its baseline only after fencing for them, while
//     confirmations, renewals and releases go on. So no ID is answered
//     free after an eviction before the check that fences for it has run
//     (TestChecks/a free ID is refused while the counters moved), and a
//     lease taken before is confirmed within its time. On a Cluster
//     master the checks have not read yet (a failover, a new node) those
//     steps are refused the same way until a check has read it. Left: a reset
//     followed by more commands than the server had run until the last
//     check, found by the check's other witnesses (see
//     [Options.RecheckInterval]); a *redis.Ring, where the script
//     compares nothing (a user that may not run INFO is refused).
//   - A failover or restart (a new run_id behind the client) is checked
//     as Open checks a server: refused ([ErrConfig]) while it does not fit
//     the Options, served once it does, and fenced only for loss it shows
//     itself (keys it evicted, fence markers it lacks), never for settings
//     that differ from the old server's; steps that can take a free ID
//     are refused from the switch until that check (its counters are not
//     the old server's).
//   - AOF switched off at run time: while the server runs AOF with
//     appendfsync always and knows WAITAOF (Redis 7.2 or newer, Valkey 8),
//     every write also waits for WAITAOF 1 0, which the server refuses
//     once AOF is off, so no claim made after the switch is reported
//     first. On an older Redis (7.0: Debian bookworm's redis-server) the
//     claims of up to one RecheckInterval after the switch are reported
//     first, and a crash before the recheck accepts them again.
//   - An instance clock behind Redis's by more than [Options.MaxSkew] is
//     refused ([ErrClockSkew]).
//
// Each Allow* option keeps its check running and reports the risk it
// accepts when present ([replay.EventRiskAccepted] and one Warn line). Entries
// deleted by hand while their shard's marker stays cannot be detected:
// never delete entries; delete the markers too, or FLUSHDB, and the fence
// covers it.
//
// A new prefix is provisioned once, as a deployment step before the
// applications start: the command ctoken-store provision -new (in
// redisstore/cmd/ctoken-store), or [Store.ProvisionNew], the operator's
// statement that the prefix never held claims. A key space with no marker
// and no evidence either way (a restart without persistence nobody
// watched looks exactly like a new prefix) is brought back with
// ctoken-store provision without -new ([Store.Provision]), which fences
// it for one lifetime (the recorded one, else the Horizon), after which
// the applications serve by themselves. [Open] refuses a key
// space with no open shard and names the next step: never provisioned, or
// lost ([ErrConfig]), or fenced after a loss ([ErrFenced]). After a loss an
// operator sees what the store knows with ctoken-store status
// ([Store.Status]: shards, fences, the key space's ledger, what each server
// shows) and either waits for the fences to end or accepts the risk with
// ctoken-store reopen ([Store.Reopen]), which is recorded. Provision
// and ProvisionNew refuse wherever anything shows a previous life; docs/fleet.md ("When
// the store refuses") is the runbook. The store fails closed: when Redis
// is down, slow, or answers anything unexpected, Claim returns first ==
// false and an error matching ErrUnavailable. Callers must treat every
// error as "refuse the request".
package redisstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"weak"

	"github.com/ctoken/ctoken/replay"
	"github.com/redis/go-redis/v9"
)

// DefaultPrefix is the key prefix used when Options.Prefix is empty.
const DefaultPrefix = "ctoken:replay:"

// DefaultTimeout bounds each claim when Options.Timeout is zero.
const DefaultTimeout = time.Second

// DefaultHorizon is the store's horizon when Options.Horizon is zero: the
// webhook middleware's default DedupWindow (24 h) plus room for its
// tolerance and the allowed clock skew.
const DefaultHorizon = 25 * time.Hour

// MaxIDBytes is the longest ID Claim accepts. Longer IDs are refused with
// ErrInvalidClaim before anything is sent to Redis.
const MaxIDBytes = 512

// Client is the part of a go-redis client the store uses. *redis.Client,
// *redis.ClusterClient, *redis.Ring and redis.UniversalClient all satisfy it.
// A [Durability] setting needs a *redis.Client (standalone, or Sentinel's
// failover client) or a *redis.ClusterClient: WAIT must run on the
// connection that wrote.
type Client interface {
	Do(ctx context.Context, args ...any) *redis.Cmd
}

// Options configures a Store. The zero value is ready to use on a single
// Redis without replicas. A zero field means its default; a negative
// duration is refused with [ErrConfig], except Timeout (negative: no store
// deadline).
type Options struct {
	// Prefix is prepended to every key, so several stores (or
	// applications) can share one Redis without seeing each other's claims.
	// Empty means DefaultPrefix. The keys are <prefix>{NN} (a shard's fence
	// marker) and <prefix>{NN}:<id> (see [Shards]). A prefix holding '{' or
	// '}' is refused with [ErrConfig]: the first '{' of every key then marks
	// where its prefix ends, so no two prefixes share a key even when one
	// begins with the other ("app:" and "app:webhooks:"), and the hash tag
	// {NN} keeps a shard's keys in one Cluster slot. (A brace in the prefix
	// would let "<p>{02}:" live inside the key space of "<p>": one store's
	// Release could delete the other's fence marker or claim.)
	Prefix string

	// Timeout bounds every call: the effective deadline is the earlier of
	// the caller's context deadline and now + Timeout. Zero means
	// DefaultTimeout; a negative value means only the caller's context
	// bounds the call (and, without one, the client's own timeouts).
	Timeout time.Duration

	// Now returns this instance's current time. Nil means time.Now. It
	// refuses an until that has already passed without asking Redis, and
	// is sent with every claim and lease step so Redis can refuse an
	// instance whose clock is behind its own by more than MaxSkew.
	// Expiries and the horizon are measured by Redis's clock.
	Now func() time.Time

	// Horizon is the longest a claim, a confirmed lease or a lease may be
	// held, measured from Redis's clock: an until (or lease) reaching
	// further is refused with [ErrInvalidClaim]. It is also how long a
	// shard stays fenced after the store finds it lost data ([ErrFenced]),
	// which is what makes the fence safe: every claim made before the loss
	// has expired when the fence opens. A fence therefore costs one
	// Horizon of refusals (503s) for every call of its shards: size it to
	// the work, not larger. Set it to the longest lifetime you hand the
	// store: ctoken one-time tokens and single-use request states hold a
	// claim for their TTL + 1 s + [replay.SkewMargin] (a store used only
	// for 5-minute tokens needs about 6 minutes, not a day); the webhook
	// middleware holds a delivery for the longer of its DedupWindow
	// (default 24 h) and twice its Tolerance + replay.SkewMargin, plus
	// replay.SkewMargin; the Idempotency-Key middleware for its Window +
	// Lease. Those constructors refuse a store whose
	// horizon is shorter ([replay.Bounded]). Zero means DefaultHorizon
	// (25 h, for the webhook default). Lower it only once the claims made
	// under the higher value have expired. A fence lasts the key space's
	// longest lifetime ([Store.Lifetime]: what its stores claim for, with
	// headroom; another application's longer record included, even past
	// this Horizon); a store that has claimed nothing
	// and read no record fences for the Horizon. docs/fleet-reference.md ("What a fence costs") lists
	// each cause of a fence and its cost.
	Horizon time.Duration

	// MaxSkew is how far this instance's clock may be behind Redis's before
	// every claim and lease step is refused with [ErrClockSkew]. Callers
	// hold claims past their acceptance window by [replay.SkewMargin], so a
	// larger MaxSkew would let a lagging instance accept a token whose claim
	// Redis already let expire: it is refused with [ErrConfig]. An instance
	// ahead of Redis is not refused: it stops accepting a token earlier
	// than the others, and a claim that reaches past the horizon is
	// refused. Zero means replay.SkewMargin.
	MaxSkew time.Duration

	// Durability is what a write must reach before a claim is reported
	// first or a lease step succeeds. The zero value waits for nothing:
	// right for a single Redis with AOF, wrong with replicas (see
	// AllowAsyncReplicas).
	Durability Durability

	// AllowAsyncReplicas lets a store without a Durability setting run on
	// a Redis that has replicas (or had: a replica whose link is down still
	// counts, see [Open]). Without it such a store refuses to run
	// ([ErrConfig]): a failover to a replica that missed acknowledged
	// writes accepts those IDs again. A split brain (the old primary still
	// taking writes after a replica was promoted) accepts every ID claimed
	// on both sides again for as long as the two primaries coexist, since
	// nothing waits for a replica (docs/faults.md).
	// With Durability.Replicas instead, every claim waits for WAIT, which
	// a primary whose replicas are gone answers with too few
	// acknowledgements: [ErrNotDurable].
	// The check still runs: when the risk is present it is logged (one
	// Warn line per appearance) and reported as [replay.EventRiskAccepted].
	AllowAsyncReplicas bool

	// AllowEviction lets the store run on a Redis whose maxmemory-policy is
	// not noeviction. Without it such a store refuses to run ([ErrConfig])
	// for as long as the policy stays: an LRU or LFU policy evicts cold
	// claims and keeps the fence markers every call touches, so the script
	// cannot see the loss; a volatile-* policy evicts only keys with an
	// expiry, which every claim has and no marker has. Without
	// AllowEviction, eviction made possible after the store saw the server
	// (the policy with maxmemory set) or evicted_keys growing is evidence
	// of loss and fences the key space (see RecheckInterval), and every
	// step that can take a free ID is refused from the first eviction
	// until that fence (see the package doc); with it, evictions are the
	// accepted risk and fence nothing. A policy the store cannot read
	// (CONFIG GET forbidden or renamed away, as on managed services: no
	// other read shows it) is this same risk: refused without
	// AllowEviction, accepted and reported with it. The check still runs
	// with AllowEviction: when the risk is present it is logged (one Warn
	// line per appearance) and reported as [replay.EventRiskAccepted].
	AllowEviction bool

	// AllowRollback lets the store run on a Redis whose restart can bring
	// back older data: RDB snapshots without AOF (save not ""), or AOF
	// with an appendfsync other than always, with or without
	// Durability.LocalAOF (a machine crash loses the last second). Such a restart keeps the
	// fence markers and drops the newest claims, so those IDs are accepted
	// again unseen (TestRollbackAcceptsTwiceWhenAllowed shows it). Without
	// it such a store refuses to run ([ErrConfig]). Where CONFIG GET is
	// forbidden or renamed away (managed services), INFO persistence is
	// read instead: it shows AOF on or off and RDB snapshots taken, never
	// appendfsync or the save points, so it cannot show a restart safe and
	// such a server is this same risk: refused without AllowRollback. The
	// check still runs with AllowRollback: when the
	// risk is present it is logged (one Warn line per appearance) and
	// reported as [replay.EventRiskAccepted]. Persistence weakened on a server
	// the store saw is fenced even with AllowRollback (see
	// RecheckInterval).
	AllowRollback bool

	// RecheckInterval is how often the store runs the server checks of
	// [Open] again while it is open: in the background of the first call
	// after each interval, and by itself when no call comes (one goroutine
	// per Store, which [Store.Close] ends; a Store dropped without Close
	// ends it once the garbage collector has taken the Store). A server
	// that no longer fits the Options (a replica
	// attached, an eviction policy, RDB snapshots, a failover to a primary
	// with weaker persistence) is found within about this long and every
	// call refuses with [ErrConfig] for as long as it does not fit: the
	// store serves again by itself once a check finds it fits. Evidence of
	// loss on a server the store saw before (same run_id): keys evicted,
	// eviction made possible (policy with maxmemory set), SWAPDB, FLUSHALL
	// or FLUSHDB run, those counters reset by CONFIG RESETSTAT (or
	// total_commands_processed, which only a reset brings down, or ROLE's
	// calls; the reset's own entry in INFO commandstats, calls=1 after
	// any reset, appeared or changed: a server's first reset is always
	// seen, a later one made while no store of the key space ran can be
	// missed, see docs/fleet-reference.md),
	// appendfsync no longer always, AOF switched off (which leaves the old
	// AOF for the next start to load), or a restart that lost fence
	// markers, makes every call refuse at once ([ErrFenced]) and fences
	// the key space for one horizon (one ledger entry, one
	// [replay.EventFenceRaised] per shard); the fences then refuse, until they
	// open or an operator reopens the key space. A claim that finds its
	// shard's marker missing, or whose script finds the loss counters
	// moved (see AllowEviction), has the next call run the checks at once.
	// Otherwise this interval is the window: claims answered between the
	// change and the check are not covered, and it can only be shortened,
	// not closed, by a lower value. For eviction it is left only where
	// the scripts cannot read the counters (a *redis.Ring: an entry
	// evicted by a volatile-* policy and claimed again inside it is
	// accepted twice); a user that may not run INFO is refused.
	// Each recheck is a few commands on every master (the rights check's
	// EVAL, ROLE, INFO server, stats and commandstats, CONFIG GET, TIME,
	// one EXISTS), also while
	// the store is idle. Zero means DefaultRecheckInterval (1 s); negative,
	// or under a millisecond, is refused.
	//
	// AOF switched off at run time (CONFIG SET appendonly no) has no window
	// on a server that runs AOF with appendfsync always and knows WAITAOF
	// (Redis 7.2 or newer, Valkey 8): the checks find it so and from then
	// on every write waits for WAITAOF 1 0 (with Durability's ReplicaAOF
	// and Timeout, or DefaultDurabilityTimeout), which the server refuses
	// once AOF is off, so every claim from the switch to the recheck fails
	// with [ErrNotDurable]. The checks decide this per server, at every
	// check: a failover to a server without WAITAOF, AOF or appendfsync
	// always ends it. On a server without WAITAOF (Redis 7.0), or a client
	// other than *redis.Client and *redis.ClusterClient (the wait must run
	// on the connection that wrote), the window is one RecheckInterval:
	// the claims reported first between the switch and the recheck are
	// accepted again after a crash that restarts Redis from its old AOF
	// (TestDurability/AOF switched off at run time measures both).
	RecheckInterval time.Duration

	// AllowFewerReplicas lets Durability.Replicas (or ReplicaAOF) be lower
	// than the number of replicas the primary has (or had: a replica whose
	// link is down still counts, see [Open]). Without it such a store
	// refuses to run ([ErrConfig]). Set it only when every failover
	// promotes the replica that received the most writes: Sentinel or
	// Cluster failover with the same replica-priority on every replica, no
	// manual promotion (REPLICAOF NO ONE, CLUSTER FAILOVER TAKEOVER), and
	// no failure that takes the acknowledging replica down together with
	// the primary. Otherwise a promoted replica that missed writes accepts
	// those IDs again. When the risk is present it is logged and reported
	// as [replay.EventRiskAccepted].
	AllowFewerReplicas bool

	// Observer, when not nil, is called with every [replay.Event] (Store
	// "redisstore"): a shard fenced, a refusal for a fence, clock skew or
	// durability, a lease released after an unknown outcome, a risk an
	// Allow* option accepts, a claim resent after a lost reply. It is
	// called synchronously from the calling goroutine (or the background
	// recheck) and must not block.
	Observer func(replay.Event)

	// Logger receives one line when a shard is fenced, one Warn line each
	// time a risk an Allow* option accepts appears, and at most one a
	// minute per kind while refusals for a fence, clock skew or durability
	// go on. Nil means slog.Default(). Lines hold no ID, token or key.
	Logger *slog.Logger
}

// Store is a [replay.Store] backed by Redis. It also implements the
// optional [replay.Releaser] (Release), [replay.Leaser] (AcquireLease,
// ConfirmLease, ReleaseLease), [replay.Renewer] (RenewLease),
// [replay.Recorder] (AcquireRecord, ConfirmRecord), [replay.Reader]
// (ReadRecord) and [replay.Bounded] (Horizon). It is safe for concurrent use; its settings are fixed at
// construction.
type Store struct {
	client  Client
	prefix  string
	tags    [Shards]string
	timeout time.Duration
	now     func() time.Time
	horizon time.Duration
	maxSkew time.Duration
	// skewArg and horizonArg are maxSkew and horizon in ms, as the
	// scripts take them.
	skewArg, horizonArg string
	dur                 durability
	opts                Options // as given, for the server checks
	log                 *slog.Logger

	// checked is set once the server checks passed; check serializes them.
	checked      atomic.Bool
	recheckEvery time.Duration
	// srv is what the checks know of each server (by run_id), and the
	// refusal they left (see baseline.go and loss.go).
	srv       servers
	warned    atomic.Uint32 // what warnOnce has logged
	lastCheck atomic.Int64  // unix ms of the last server check
	check     chan struct{}

	// risks is the riskSet of the last server check.
	risks atomic.Uint32

	// nonceBase (random, per Store) and nonces make each Claim's nonce,
	// which is also its entry's value: "1" + 16 hex digits + "." + the
	// counter in base 36.
	nonceBase string
	nonces    atomic.Uint64

	// spaceOK is set once the key-space check passed (see readySpace);
	// spaceCheck serializes it; spaceErr, at spaceAt, is its last refusal.
	spaceOK    atomic.Bool
	spaceCheck chan struct{}
	spaceErr   error
	spaceAt    time.Time

	// life is the longest lifetime (ms) the store knows the key space's
	// steps to have, 0 none yet; boundArg is what the guarded scripts take
	// as their bound and fence (ARGV[3]): life, or the horizon while life
	// is 0. lifeMu serializes their updates (see lifetime.go).
	life     atomic.Int64
	boundArg atomic.Pointer[string]
	lifeMu   sync.Mutex
	// judged is, per shard, the fence marker and bound the last
	// lengthenFences judged (see lifetime.go), under judgedMu.
	judged   [Shards]string
	judgedMu sync.Mutex

	logged  [replay.EventClaimResent + 1]atomic.Int64 // unix ms of the last log line per kind (the store reports no kind above)
	cancels cancels
	// watched is closed when the store's watch ends (see [watch]).
	watched chan struct{}
}

var (
	_ replay.Store    = (*Store)(nil)
	_ replay.Releaser = (*Store)(nil)
	_ replay.Bounded  = (*Store)(nil)
)

// New returns a Store that records claims through client, without talking
// to Redis: it refuses invalid Options with an error matching [ErrConfig]
// whose [Reason] names every fault at once, each with its fix, and runs
// the server checks of [Open] before its first call instead (every call
// then refuses with ErrConfig if they fail, or with ErrUnavailable
// while Redis cannot answer them). Prefer Open, which reports a server that
// does not fit the Options at construction.
//
// The client keeps its own connection settings; the Store adds the
// per-call deadline of Options.Timeout and returns when it passes even if
// the client has not (go-redis ignores context deadlines on the socket
// unless the client's ContextTimeoutEnabled option is set, which is
// recommended). Without that option the abandoned call keeps its goroutine
// and pool connection until the client's own ReadTimeout ends it, so never
// combine it with ReadTimeout -1: a hung Redis would then pin a goroutine
// per timed-out claim, up to the pool size, for as long as it hangs.
//
// A call under a context that can be cancelled (a request's) runs on a
// goroutine of its own, so that it returns as soon as the context ends:
// go-redis cannot interrupt a read. On the Intel Xeon VM of
// docs/benchmarks.md that hop costs about 20 µs a claim without
// Durability. Claim, AcquireLease, ConfirmLease, RenewLease,
// AcquireRecord and ConfirmRecord under a context that cannot be
// cancelled, or one from [replay.WithDeadlineOnly] (for steps that must
// finish whatever the caller does), on a client with
// ContextTimeoutEnabled, run on the caller's goroutine instead.
//
// A client retry after a lost reply is safe for every method: a retried
// Claim finds its own entry (by its nonce) and reports first, and a
// resent lease script finds its own lease or done entry. Retries only
// lengthen a call; the store's deadline still bounds it.
//
// A Store from New runs the key-space check of [Open] before its first
// call too: while no shard is open every call refuses like Open (writing
// nothing), and it checks again at most every 250 ms, so a store that
// starts before its prefix is provisioned serves once it is.
func New(client Client, opts Options) (*Store, error) {
	var faults []string
	if client == nil {
		faults = append(faults, "nil client (pass a *redis.Client, *redis.ClusterClient or another Client)")
	}
	s := &Store{client: client, prefix: opts.Prefix, timeout: opts.Timeout, now: opts.Now,
		horizon: opts.Horizon, maxSkew: opts.MaxSkew, opts: opts, log: opts.Logger,
		check: make(chan struct{}, 1), spaceCheck: make(chan struct{}, 1)}
	if s.prefix == "" {
		s.prefix = DefaultPrefix
	}
	if strings.ContainsAny(s.prefix, "{}") {
		faults = append(faults, "Prefix holds '{' or '}': it could share keys with another prefix (choose a Prefix without braces)")
	}
	s.tags = shardTags(s.prefix)
	if s.timeout == 0 {
		s.timeout = DefaultTimeout
	}
	if s.now == nil {
		s.now = time.Now
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	switch {
	case s.horizon < 0:
		faults = append(faults, "negative Horizon (set 0 for DefaultHorizon, or at least a millisecond)")
	case s.horizon == 0:
		s.horizon = DefaultHorizon
	case s.horizon < time.Millisecond:
		faults = append(faults, "Horizon under a millisecond (set at least a millisecond, or 0 for DefaultHorizon)")
	}
	switch {
	case s.maxSkew < 0:
		faults = append(faults, "negative MaxSkew (set 0 for replay.SkewMargin, or a positive margin)")
	case s.maxSkew == 0:
		s.maxSkew = replay.SkewMargin
	case s.maxSkew > replay.SkewMargin:
		faults = append(faults, "MaxSkew over replay.SkewMargin, the margin callers hold claims for (set at most replay.SkewMargin, or 0 for it)")
	}
	switch {
	case opts.RecheckInterval < 0:
		faults = append(faults, "negative RecheckInterval (set 0 for DefaultRecheckInterval, or a positive interval)")
	case opts.RecheckInterval > 0 && opts.RecheckInterval < time.Millisecond:
		faults = append(faults, "RecheckInterval under a millisecond: the checks would run back to back, also while idle (set 0 for DefaultRecheckInterval, or at least 1 ms)")
	case opts.RecheckInterval == 0:
		s.recheckEvery = DefaultRecheckInterval
	default:
		s.recheckEvery = opts.RecheckInterval
	}
	d, durabilityFaults := newDurability(client, opts.Durability, s.timeout)
	if err := configFaults(append(faults, durabilityFaults...)); err != nil {
		return nil, err
	}
	s.skewArg = strconv.FormatInt(s.maxSkew.Milliseconds(), 10)
	s.horizonArg = strconv.FormatInt(s.horizon.Milliseconds(), 10)
	s.boundArg.Store(&s.horizonArg)
	s.dur = d
	var b [8]byte
	rand.Read(b[:])
	s.nonceBase = "1" + hex.EncodeToString(b[:]) + "."
	s.cancels.init()
	s.watched = make(chan struct{})
	go watch(weak.Make(s), s.recheckEvery, s.cancels.stop, s.watched)
	return s, nil
}

// Open returns a Store like [New] and checks the server before returning:
// that every master answers, that Durability waits for every replica a
// master has or had (a replica that is away counts when INFO replication
// shows a replication backlog: or AllowAsyncReplicas without Durability,
// AllowFewerReplicas with it), that WAITAOF exists when Durability asks
// for it (Redis 7.2 or newer), that maxmemory-policy is noeviction (or
// AllowEviction), that a restart cannot bring back older data (or
// AllowRollback), and that this instance's clock is not behind Redis's by
// more than MaxSkew. A server that does not fit is refused with an error
// matching [ErrConfig]; a lagging clock with [ErrClockSkew]; a Redis that
// cannot answer with [ErrUnavailable]. ctx bounds the checks.
//
// Then it reads the shard markers: with no marker at all (a prefix never
// provisioned, or a Redis that lost the key space) it refuses with
// [ErrConfig], with no open shard but fences with [ErrFenced] (naming when
// the last fence ends); each error's [Reason] names the next step
// (ctoken-store status, provision, reopen). With some shards open it
// serves, and logs the fenced or missing ones once and reports them to the
// Observer ([replay.EventFenced]).
func Open(ctx context.Context, client Client, opts Options) (*Store, error) {
	s, err := New(client, opts)
	if err != nil {
		return nil, err
	}
	if err := s.ready(ctx); err != nil {
		s.Close() // its watch ends now, not when the garbage collector takes it
		return nil, err
	}
	if err := s.checkKeySpace(ctx); err != nil {
		s.Close()
		return nil, err
	}
	s.spaceOK.Store(true)
	return s, nil
}

// Close stops the store's background work (the server checks it runs
// every [Options.RecheckInterval], and the releases of leases whose
// acquisition had an unknown outcome; those leases then end by themselves)
// and waits for it. It does not close the client. A closed Store keeps
// answering calls, and runs no more checks.
func (s *Store) Close() error {
	s.cancels.close()
	if s.watched != nil {
		<-s.watched // the watch ends at its next select: stop is closed
	}
	return nil
}

// Prefix returns the key prefix the store writes under.
func (s *Store) Prefix() string { return s.prefix }

// Horizon implements [replay.Bounded]: the longest a claim, a confirmed
// lease or a lease may be held, measured from Redis's clock, and how long
// a shard stays fenced after a loss.
func (s *Store) Horizon() time.Duration { return s.horizon }

// Claim records id until the given time and reports whether this call was
// the first live claim of id, across every process sharing the Redis
// server (or Cluster) and prefix. Exactly one of any number of concurrent
// claims of the same ID returns true, and once it has, no later call
// returns true for id before until (by Redis's clock) through any single
// fault of the store: a restart without persistence, FLUSHALL or eviction
// (the shard is fenced: [ErrFenced]; an eviction since the store's last
// check refuses the claim by the loss counters its script reads, see
// [Options.AllowEviction], or where they cannot be read from the store's
// next check, see [Options.RecheckInterval]), a failover to a replica that missed
// the write (with a [Durability] setting: [ErrNotDurable] instead of true),
// or a lagging instance clock ([ErrClockSkew]).
//
// Claim fails closed: on any error it returns first == false and an error
// matching ErrUnavailable (Redis could not answer in time or answered
// unexpectedly, or one of the refusals above) or ErrInvalidClaim (empty
// or oversize id, until not in the future, or until past the horizon).
// Error text never contains id.
//
// Each Claim call carries a nonce of its own, stored with the claim: a
// client retry of a claim whose reply was lost (go-redis retries by
// default) finds its own entry and reports first == true, with an
// [replay.EventClaimResent], instead of refusing a legitimate first use. A lost
// reply the client does not retry returns an error (ErrUnavailable), and
// the ID stays claimed: refused, never accepted twice.
func (s *Store) Claim(ctx context.Context, id string, until time.Time) (bool, error) {
	if err := checkID(id); err != nil {
		return false, err
	}
	ms, err := s.untilMillis(until)
	if err != nil {
		return false, err
	}
	code, _, err := s.run(ctx, &claimLua, id, ms, s.nonceBase, s.nonces.Add(1))
	switch {
	case err != nil:
		return false, err
	case code == 1:
		return true, nil
	case code == 2:
		// The client resent this claim after its reply was lost, and the
		// first send had recorded it: this call is the first.
		s.emit(replay.Event{Kind: replay.EventClaimResent, Shard: shardOf(id)})
		return true, nil
	case code == 0:
		return false, nil
	}
	return false, fmt.Errorf("%w: unexpected reply to the claim script", ErrUnavailable)
}

// Release forgets the claim of id, so the next Claim of id is first again.
// It is for a caller that claimed id and then failed to act on it (a webhook
// handler that errored, so the sender's retry must be processed); one-time
// tokens must never be released. Releasing an ID that is not claimed is not
// an error. Release deletes the entry (and the record
// [Store.ConfirmRecord] wrote beside it) whoever claimed it, so release
// only IDs you claimed, before their until. Errors match ErrUnavailable or, for an
// empty or oversize id, ErrInvalidClaim; the claim then stays in force.
func (s *Store) Release(ctx context.Context, id string) error {
	if id == "" || len(id) > MaxIDBytes {
		return fmt.Errorf("%w: empty or oversize id", ErrInvalidClaim)
	}
	marker, entry, _ := s.keys(id)
	v, err := s.do(ctx, "DEL", entry, sideKey(marker, id)) // an entry and its record
	if err != nil {
		return err
	}
	if _, ok := v.(int64); !ok {
		return fmt.Errorf("%w: unexpected reply to DEL", ErrUnavailable)
	}
	return nil
}

// errNil is the reply of a command that found nothing (SET NX refused).
var errNil = redis.Nil

// do runs one command within the store's deadline (see [Store.call]).
func (s *Store) do(ctx context.Context, args ...any) (any, error) {
	ctx, cancel := s.deadline(ctx)
	defer cancel()
	return s.call(ctx, args...)
}

// deadline bounds ctx by the store's timeout.
func (s *Store) deadline(ctx context.Context) (context.Context, context.CancelFunc) {
	if ctx == nil {
		ctx = context.Background()
	}
	if s.timeout <= 0 {
		return ctx, func() {}
	}
	if dl, ok := ctx.Deadline(); ok && !dl.After(time.Now().Add(s.timeout)) {
		// The caller's deadline comes first: it is the call's, and ctx
		// already ends at it (a context ends at its deadline).
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, s.timeout)
}

// result is a command's reply, passed back from the goroutine that waits
// for the client.
type result struct {
	val any
	err error
}

// donePool holds the channels call hands its goroutine; one goes back only
// after its reply was received, so no goroutine still holds it.
var donePool = sync.Pool{New: func() any { return make(chan result, 1) }}

// call runs one command. It returns when ctx is done even if the client is
// still waiting, so a hung Redis cannot hold the caller past it. Errors
// other than redis.Nil are wrapped in ErrUnavailable, together with the
// context error when the deadline or a cancellation ended the call.
func (s *Store) call(ctx context.Context, args ...any) (any, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	done := donePool.Get().(chan result) // buffered: the sender never blocks
	go func() {
		v, err := s.client.Do(ctx, args...).Result()
		done <- result{v, err}
	}()
	var r result
	select {
	case r = <-done:
		donePool.Put(done)
	case <-ctx.Done():
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, ctx.Err())
	}
	switch {
	case r.err == nil:
		return r.val, nil
	case errors.Is(r.err, redis.Nil):
		return nil, r.err
	}
	return nil, s.wrapErr(ctx, r.err)
}
