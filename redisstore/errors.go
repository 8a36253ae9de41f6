package redisstore

import (
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/ctoken/ctoken/replay"
)

// Sentinel errors, usable with errors.Is. Every error a Store method returns
// matches [ErrUnavailable], [ErrInvalidClaim] or [ErrConfig], and a call that
// returns an error never reports an ID as first or a lease as acquired.
var (
	// ErrUnavailable reports that the store could not decide whether the
	// claim was first: Redis unreachable, timed out, or answered with an
	// error or an unexpected reply; a step that can take a free ID found
	// the server's loss counters moved since the last check (Reason says
	// so; nothing of the ID was recorded, and the store checks the server
	// at once); or one of the refusals below that also match it
	// ([ErrFenced], [ErrClockSkew], [ErrNotDurable]). When the
	// caller's context had ended by the time the call returned, the error
	// also matches the context's error (context.DeadlineExceeded or
	// context.Canceled); a client socket timeout that fires just before the
	// deadline matches only ErrUnavailable. The claim may or may not have
	// been recorded; the caller must refuse the request. It matches
	// [replay.ErrUnavailable].
	ErrUnavailable error = &sentinel{"redisstore: replay store unavailable", replay.ErrUnavailable}

	// ErrInvalidClaim reports a claim refused before anything was recorded:
	// an empty ID, an ID over MaxIDBytes, an until that is not in the future
	// (by Options.Now or by Redis's clock; these also match
	// [replay.ErrExpired]: an already expired single-use token must be
	// refused as expired, and there is nothing left to remember), or an
	// until or lease reaching past the store's horizon ([Options.Horizon]).
	// It matches [replay.ErrInvalidClaim].
	ErrInvalidClaim error = &sentinel{"redisstore: invalid claim", replay.ErrInvalidClaim}

	// ErrFenced reports that the key space's shard holding the ID is fenced:
	// its marker was missing, so Redis lost data it had acknowledged
	// (restart without persistence, FLUSHALL, eviction, a replica promoted
	// with an empty data set). The store refuses every claim and lease step
	// of that shard until every claim made before the loss has expired (the key
	// space's longest lifetime, [Store.Lifetime], at most one
	// [Options.Horizon], by Redis's clock), then opens it by itself, or until
	// an operator accepts the risk with [Store.Reopen]. [Open] returns it
	// when no shard is open and some are fenced. It matches
	// [ErrUnavailable].
	ErrFenced error = &unavailableError{"redisstore: replay store fenced"}

	// ErrClockSkew reports that this instance's clock (Options.Now) is
	// behind Redis's clock by more than [Options.MaxSkew]: it could accept a
	// token whose claim Redis has already let expire, so the store refuses.
	// It matches [ErrUnavailable].
	ErrClockSkew error = &unavailableError{"redisstore: instance clock behind Redis"}

	// ErrNotDurable reports that a write was applied on the Redis primary
	// but fewer replicas (or AOF fsyncs) acknowledged it within
	// [Durability.Timeout] than [Options.Durability] requires: a failover
	// could lose it, so the claim is not reported first (it stays recorded
	// on the primary and a retry is refused). It matches [ErrUnavailable].
	ErrNotDurable error = &unavailableError{"redisstore: write not acknowledged by enough replicas"}

	// ErrConfig reports a store that must not run as configured: invalid
	// Options (found by [New] and [Open]), or a server that does not fit
	// them (found by [Open], by the first call of a Store from [New], or by
	// a later check, refused for as long as it does not fit):
	// replicas without a durability setting, an eviction policy that can
	// drop claims, WAITAOF on a server older than Redis 7.2, a user that
	// may not run a command the store needs (its Reason names the ACL
	// rules to add; such an error from a call matches [ErrUnavailable]
	// too), a fact the checks cannot read; or a key space
	// with no shard marker (never provisioned, or lost; see
	// [Store.Provision]). It is [replay.ErrConfig].
	ErrConfig = replay.ErrConfig
)

// sentinel is one of the store's errors: its own text, and it matches its
// counterpart in package replay (ErrUnavailable, ErrInvalidClaim), so code
// written against replay's vocabulary holds on every store.
type sentinel struct {
	msg    string
	shared error
}

func (e *sentinel) Error() string        { return e.msg }
func (e *sentinel) Is(target error) bool { return target == e.shared }

// unavailableError is a refusal that also matches ErrUnavailable (and so
// replay.ErrUnavailable).
type unavailableError struct{ msg string }

func (e *unavailableError) Error() string { return e.msg }
func (e *unavailableError) Is(target error) bool {
	return target == ErrUnavailable || target == replay.ErrUnavailable
}

// Reason returns the fixed, log-safe reason of an error a Store returned
// ("replay store fenced after losing data", "instance clock behind Redis by
// more than MaxSkew", ...), or "" when it carries none. A reason never
// contains an ID, a token or a key.
func Reason(err error) string {
	if err == nil {
		return "" // without the allocation errors.As makes
	}
	var r *refusal
	if errors.As(err, &r) {
		return r.why
	}
	return ""
}

// refusal is an error matching sentinel (errors.Is) and, through Unwrap,
// cause, with a fixed reason.
type refusal struct {
	sentinel error
	why      string
	cause    error
	// retryAt is when the refusal ends by itself (a fence's end, by
	// Redis's clock); zero when unknown.
	retryAt time.Time
}

// RetryAt returns when the refusal ends by itself: for [ErrFenced], when
// the shard's fence opens (the key space's lifetime after it was
// raised, by Redis's clock). It is the zero time for every other refusal. [replay.RetryAt]
// finds it through wrapping.
func (r *refusal) RetryAt() time.Time { return r.retryAt }

func (r *refusal) Error() string {
	s := r.sentinel.Error() + ": " + r.why
	if r.cause != nil {
		s += ": " + r.cause.Error()
	}
	return s
}

func (r *refusal) Is(target error) bool { return errors.Is(r.sentinel, target) }
func (r *refusal) Unwrap() error        { return r.cause }

// refuse returns an error matching sentinel and cause (when not nil) whose
// Reason is why. Refusals of the unavailable kind pass a cause matching
// ErrUnavailable.
func refuse(sentinel error, why string, cause error) error {
	return &refusal{sentinel: sentinel, why: why, cause: cause}
}

// configFaults returns nil when there is no fault, an [ErrConfig] refusal
// whose Reason is the fault when there is one, and when there are several
// one refusal whose Reason names each in order ("2 configuration faults:
// a; b"), so that a user fixes the Options in one pass instead of meeting
// the next fault after each fix. Each fault is a fixed text naming its fix.
func configFaults(faults []string) error {
	switch len(faults) {
	case 0:
		return nil
	case 1:
		return refuse(ErrConfig, faults[0], nil)
	}
	return refuse(ErrConfig, strconv.Itoa(len(faults))+" configuration faults: "+strings.Join(faults, "; "), nil)
}

// Fixed reasons.
const (
	whyFenced        = "replay store fenced after losing data: the shard refuses until its fence ends; see `ctoken-store status`; to serve before then, an operator who accepts the risk runs `ctoken-store reopen`"
	whyFenceRaised   = "replay store lost data (the shard's marker is missing): shard fenced until every claim made before the loss has expired; see `ctoken-store status`; to serve before then, an operator who accepts the risk runs `ctoken-store reopen`"
	whyBadMarker     = "replay store fence marker holds an unknown value"
	whySkew          = "instance clock behind Redis by more than MaxSkew"
	whyNotDurable    = "fewer replicas acknowledged the write than Durability requires"
	whyCountersMoved = "the server's loss counters moved since the last check (keys evicted, CONFIG RESETSTAT, or another server): the answer is refused and the server checked"
	whyHorizon       = "until beyond the store's horizon"
	whyLeaseLong     = "lease longer than the store's horizon"
	whyPastRedis     = "until not in the future by Redis's clock"
	// whyRefusedCommand matches ErrConfig and ErrUnavailable.
	whyRefusedCommand = "the Redis user may not run a command the store needs (NOPERM), or it is renamed away: add the right to the user's ACL (the store's next check names the exact line; docs/fleet-reference.md, \"The fleet's ACL\")"
)
