package replay

import "time"

// EventKind names what an [Event] reports. It is the one vocabulary of the
// durable stores (the redisstore, pgstore and sqlitestore modules): each
// reports through its Options.Observer the kinds that apply to it, named
// at each kind. A kind keeps its value and its String label; the set may
// grow, so a switch over it needs a default.
type EventKind uint8

const (
	// EventRiskAccepted (every store): a check of the server found a risk
	// that an Allow* option of the store's Options accepts, or an operator
	// accepted one (redisstore's Store.Reopen, Option "Reopen").
	// [Event.Option] names the option and [Event.Risk] the risk. It is
	// reported by the store's constructor, and by a recheck each time the
	// risk appears again, each with one Warn line: a dashboard counting it
	// finds every weakened deployment.
	EventRiskAccepted EventKind = iota + 1
	// EventRefusing (pgstore, sqlitestore): a check failed, and calls refuse
	// with [Event.Reason] until it holds again (or, after sqlitestore found
	// a loss, until its Rearm). Reported with one Warn line when the reason
	// appears or changes, not when only its figures change.
	EventRefusing
	// EventServing (pgstore, sqlitestore): the checks hold again after
	// EventRefusing; calls are served. Reported with one Info line.
	EventServing
	// EventSwept (pgstore, sqlitestore): the store's own sweeper ran one
	// Sweep, which deleted [Event.Deleted] expired rows and failed with
	// [Event.Reason] (nil when it succeeded); a failed sweep is retried at
	// the next interval.
	EventSwept
	// EventFenceRaised (redisstore): a call found its shard's fence marker
	// missing (Redis lost data) and fenced the shard until [Event.Until].
	// Exactly one call per loss and shard reports it.
	EventFenceRaised
	// EventFenced (redisstore): a call was refused because its shard is
	// fenced until [Event.Until]; or opening the store found the shard
	// fenced, or its marker missing (Until zero: its next call fences it),
	// while other shards are open.
	EventFenced
	// EventClockSkew (redisstore): a call was refused because this
	// instance's clock is behind Redis's by more than MaxSkew.
	EventClockSkew
	// EventNotDurable (redisstore): a write was not acknowledged by as many
	// replicas (or AOF fsyncs) as Durability requires, and the call was
	// refused.
	EventNotDurable
	// EventLeaseReleased (redisstore): a lease whose acquisition had an
	// unknown outcome was released in the background (or cancelled before
	// it landed).
	EventLeaseReleased
	// EventLeaseAbandoned (redisstore): such a release could not be done
	// (Redis did not answer within the lease, or too many were pending);
	// the lease, if it was taken, ends by itself.
	EventLeaseAbandoned
	// EventClaimResent (redisstore): the client resent a claim whose reply
	// was lost and the first send had been recorded; the claim's own nonce
	// identified it, where the ID alone would have been refused as a
	// replay.
	EventClaimResent

	numEventKinds // not a kind: the size of the set
)

var eventNames = [numEventKinds]string{"", "risk_accepted", "refusing", "serving", "swept",
	"fence_raised", "fenced", "clock_skew", "not_durable", "lease_released", "lease_abandoned", "claim_resent"}

// String returns the kind's stable label, the "event" attribute of the
// stores' log lines: "risk_accepted", "refusing", "serving", "swept",
// "fence_raised", "fenced", "clock_skew", "not_durable", "lease_released",
// "lease_abandoned" or "claim_resent" ("" outside the set).
func (k EventKind) String() string {
	if k < numEventKinds {
		return eventNames[k]
	}
	return ""
}

// Event is one occurrence a durable store reports to its Options.Observer,
// synchronously (an Observer must not block). It holds no ID, token or key;
// a field that does not apply to its Kind is zero, except Shard.
type Event struct {
	// Kind is what happened.
	Kind EventKind
	// Store names the store's module: "redisstore", "pgstore" or
	// "sqlitestore".
	Store string
	// Table is, for pgstore and sqlitestore, the store's table as their log
	// lines name it, unquoted (pgstore's with its schema: "public.t");
	// "" for redisstore.
	Table string
	// Shard is, for redisstore's kinds from EventFenceRaised on, the shard
	// of the key space concerned (0 to Shards-1); -1 for every other event,
	// which concerns no shard.
	Shard int
	// Until is, for EventFenceRaised and EventFenced, when the fence opens
	// by Redis's clock.
	Until time.Time
	// Option is, for EventRiskAccepted, the Options field that accepts the
	// risk ("AllowRollback", "AllowAsyncCommit", ...), or "Reopen" for
	// redisstore's Store.Reopen.
	Option string
	// Risk is, for EventRiskAccepted, a fixed description of the risk.
	Risk string
	// Reason is, for EventRefusing, the error calls return (it matches the
	// store's ErrUnavailable); for EventSwept, the sweep's error.
	Reason error
	// Deleted is, for EventSwept, how many expired rows the sweep deleted.
	Deleted int64
}
