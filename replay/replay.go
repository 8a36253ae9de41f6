// Package replay records single-use IDs — webhook deliveries, one-time
// tokens, single-use request states — so that each is accepted once.
// Most users need no code of their own here: they give a store —
// [MemoryStore] for one process (ExampleMemoryStore), the redisstore,
// pgstore or sqlitestore module for a fleet or a restart — to the config
// that consumes IDs.
//
// The first claim of an ID is the one accepted, and a bounded store that
// is full refuses rather than forgets (ExampleMemoryStore):
//
//	store := replay.NewMemoryStore(2)
//	ctx, until := context.Background(), time.Now().Add(time.Minute)
//	for _, id := range []string{"a", "a", "b", "c"} {
//		first, err := store.Claim(ctx, id, until)
//		fmt.Println(id, first, err)
//	}
//
// A [Store] claims an ID until a time; [MemoryStore] is the bounded
// in-process implementation, and the redisstore, pgstore and sqlitestore
// modules offer durable ones. Optional capabilities are separate
// interfaces that a caller detects with a type assertion ([Releaser],
// [Leaser], [Recorder]), so a Store written against this package keeps
// working as capabilities are added. This package depends on the
// standard library only.
//
// # Leases
//
// A claim is final the moment it is made, which suits a token that is
// redeemed by the claim itself. Work that can fail after the claim — a
// webhook handler — needs a [Leaser] instead: the ID is first held for a
// short lease (in progress), then either confirmed as done for a long time
// or released. An ID whose lease is neither confirmed nor released (the
// holder crashed, or lost the store's reply) becomes free again when the
// lease ends, so the outcome of a failed step is always "retry later",
// never "acknowledged but not done".
//
// # Records
//
// Work whose answer every retry must get again — an idempotent HTTP API
// replaying its first response — needs a [Recorder]: a Leaser whose lease
// keeps the fingerprint of the request that took it, and whose
// confirmation writes the result with the done entry in the same atomic
// step, so a retry finds either the lease (busy), or the fingerprint and
// result (done), never a done entry without its result. A [Reader] (every
// store here) answers what a retry would find without writing anything,
// so a poll of an entry costs a read.
//
// # Events
//
// [Event] and [EventKind] are the one vocabulary the durable stores report
// through their Options.Observer: a risk accepted, a refusal and the
// return to service, a sweep, a Redis shard fenced.
package replay

import (
	"context"
	"errors"
	"time"
)

// Store remembers single-use IDs so each is accepted once.
//
// Claim atomically records id until the given time and reports whether this
// call was the first claim of id that is still live. An implementation must
// fail closed: when it cannot decide (full, unreachable, timed out) it
// returns an error, never first == true. Implementations are safe for
// concurrent use.
type Store interface {
	Claim(ctx context.Context, id string, until time.Time) (first bool, err error)
}

// Releaser is an optional interface of a [Store]: Release forgets a claim of
// id made by the caller, so a later Claim of id is first again. Releasing an
// id that is not claimed is not an error. One-time tokens and single-use
// request states never release.
type Releaser interface {
	Release(ctx context.Context, id string) error
}

// LeaseState is what [Leaser.AcquireLease] found for an ID, or what
// [Reader.ReadRecord] reads.
type LeaseState uint8

const (
	// LeaseAcquired means the ID was free and is now held by the caller
	// until the lease ends; [Lease.Token] identifies the holder.
	LeaseAcquired LeaseState = iota + 1
	// LeaseBusy means another holder's lease on the ID is live: the work is
	// in progress elsewhere (or its holder died and the lease has not ended
	// yet). Try again later.
	LeaseBusy
	// LeaseDone means the ID was confirmed done (or claimed with
	// [Store.Claim]) and is still remembered.
	LeaseDone
	// LeaseFree means nothing holds the ID: it is absent, released, or its
	// entry expired or its lease lapsed. Only [Reader.ReadRecord] reports
	// it; AcquireLease of a free ID takes it ([LeaseAcquired]).
	LeaseFree
)

// String returns "acquired", "busy", "done" or "free".
func (s LeaseState) String() string {
	switch s {
	case LeaseAcquired:
		return "acquired"
	case LeaseBusy:
		return "busy"
	case LeaseDone:
		return "done"
	case LeaseFree:
		return "free"
	}
	return "invalid"
}

// Lease is the answer of [Leaser.AcquireLease].
type Lease struct {
	// State is what the store found.
	State LeaseState
	// Token identifies the holder of an acquired lease, for
	// [Leaser.ConfirmLease] and [Leaser.ReleaseLease]; empty otherwise. It
	// is opaque and carries no secret.
	Token string
	// Wait is, for [LeaseBusy], how long the other holder's lease still
	// runs by the store's clock (at most the lease duration it was acquired
	// with); zero when unknown or for other states.
	Wait time.Duration
}

// Leaser is a [Store] for work that must be done exactly once although it
// can fail after the ID was taken. It embeds Store, so one value of a
// [Recorder] (every store here: MemoryStore, redisstore, pgstore,
// sqlitestore) serves every feature, whether it takes a Store, a Leaser
// or a Recorder.
//
// Implementations are atomic per ID and safe for concurrent use; an ID
// held by a lease, confirmed, or claimed with [Store.Claim] is one entry,
// so Claim of a leased ID reports false and AcquireLease of a claimed ID
// reports [LeaseDone].
type Leaser interface {
	Store

	// AcquireLease takes id for the given lease duration, measured by the
	// store's clock, if nobody holds it. It reports [LeaseAcquired] with a
	// fresh token, [LeaseBusy] when another lease on id is live, or
	// [LeaseDone] when id is confirmed or claimed. A lease that is neither
	// confirmed nor released ends by itself after the duration, and id is
	// free again. On error nothing is known: the lease may or may not have
	// been taken (then it ends by itself), and the caller must refuse the
	// work and let it be retried. A lease that is not positive is refused
	// with [ErrExpired].
	AcquireLease(ctx context.Context, id string, lease time.Duration) (Lease, error)

	// ConfirmLease records id as done until the given time, turning the
	// caller's lease into a long-held entry. It succeeds when the caller's
	// lease is still live, and also when the lease has ended but nobody
	// else has taken id since (the entry is then recorded afresh); it fails
	// with [ErrLeaseLost] when another holder has leased, confirmed or
	// claimed id meanwhile — the work was then done (or is being done)
	// twice. Confirming again with the same token after a lost reply is
	// not an error. An until not after the store's current time is refused
	// with [ErrExpired] and leaves the lease as it was.
	ConfirmLease(ctx context.Context, id, token string, until time.Time) error

	// ReleaseLease frees id if the caller's lease on it is still live, so
	// the next AcquireLease of id is acquired at once. When the lease has
	// ended, or id is held by someone else or done, it changes nothing and
	// returns nil.
	ReleaseLease(ctx context.Context, id, token string) error
}

// Renewer is an optional interface of a [Leaser] whose leases can be
// extended while their work runs: a holder takes a short lease and renews
// it, so that the lease ends soon after the holder stops (a crash, a kill)
// and never while it still works. Every store of this repository
// implements it.
type Renewer interface {
	// RenewLease makes the caller's live lease on id end lease from now,
	// by the store's clock (sooner or later than before). It fails with
	// [ErrLeaseLost] when token holds no live lease on id: the lease
	// ended (even with id still free: a holder that renews too late must
	// not go on as if it had held the lease all along), another holder
	// took id, or id was confirmed or claimed. A lease that is not
	// positive is refused with [ErrExpired], and a store that is
	// [Bounded] refuses one longer than its Horizon, as AcquireLease
	// does; both leave the lease as it was. On any other error nothing is
	// known: the lease may or may not have been extended. A lease taken
	// with [Recorder.AcquireRecord] keeps its fingerprint.
	RenewLease(ctx context.Context, id, token string, lease time.Duration) error
}

// Bounded is an optional interface of a [Store] that holds nothing longer
// than a horizon: a Claim or [Leaser.ConfirmLease] whose until lies more
// than Horizon past the store's current time, or a lease longer than
// Horizon, is refused with an error (never recorded, never reported
// first). A store that can lose its data and detect it (redisstore) needs
// the bound: after a loss it refuses every claim for one Horizon, until
// everything it could have held has expired.
type Bounded interface {
	Horizon() time.Duration
}

// SkewMargin is how long callers hold a claim past the last instant their
// own checks would still accept the ID: an instance whose clock is behind
// the store's (or another instance's) still accepts the ID for that long.
// One-time tokens, single-use request states and signed webhook delivery
// IDs use it. A shared store can bound the skew it allows by it
// (redisstore refuses an instance whose clock is behind Redis's by more).
const SkewMargin = 60 * time.Second

// DefaultMax is the capacity of a [MemoryStore] whose Max is zero.
const DefaultMax = 100_000

var (
	// ErrFull reports that a bounded [Store] holds its maximum number of live
	// entries (or, for a [MemoryStore], of record bytes: MaxRecordBytes) and
	// so cannot record a new one. The claim is refused (fail
	// closed); no live entry is ever dropped to make room.
	ErrFull = errors.New("replay: store full")

	// ErrExpired reports a claim or confirmation whose until is not after
	// the store's current time, or a lease that is not positive: recording
	// it would be forgotten at once, so it is refused.
	ErrExpired = errors.New("replay: claim already expired")

	// ErrLeaseLost reports a [Leaser.ConfirmLease] whose lease ended and
	// whose ID another holder took meanwhile: the work guarded by the lease
	// ran twice (or is running again).
	ErrLeaseLost = errors.New("replay: lease lost to another holder")

	// ErrConfig reports a store whose configuration is invalid (a negative
	// [MemoryStore.Max], an invalid [MemoryStore.MaxRecordBytes]); every
	// call refuses until it is fixed. Every store's own ErrConfig
	// (redisstore, pgstore, sqlitestore) matches it: a refusal only an
	// operator can lift.
	ErrConfig = errors.New("replay: invalid store configuration")

	// ErrUnavailable reports that a store could not decide: its server or
	// file unreachable, timed out, or refusing after a loss. The claim
	// may or may not have been recorded; the caller must refuse the
	// request, and resending it is safe. Every store's own ErrUnavailable
	// (redisstore, pgstore, sqlitestore) matches it, so code written
	// against this package tells "could not decide" apart on any store.
	ErrUnavailable = errors.New("replay: store unavailable")

	// ErrInvalidClaim reports a call a store refused before recording
	// anything (an empty or too long ID, an until or lease out of range).
	// Every store's own ErrInvalidClaim matches it.
	ErrInvalidClaim = errors.New("replay: invalid claim")
)

// RetryAt reports when a store's refusal err ends by itself, when the
// store knows: it finds, through wrapping (errors.As), an error with a
// method RetryAt() time.Time returning a non-zero time. redisstore's
// refusal of a fenced shard has one (when the fence opens), and so has
// pgstore's refusal of a table fenced after a promotion, when its end is
// known. ok is false
// for every other error, a refusal whose end is unknown included. A
// refusal matching [ErrConfig] lasts until an operator acts, whatever the
// time says.
func RetryAt(err error) (t time.Time, ok bool) {
	var r interface{ RetryAt() time.Time }
	if err == nil || !errors.As(err, &r) {
		return time.Time{}, false
	}
	t = r.RetryAt()
	return t, !t.IsZero()
}
