package redisstore

import (
	"log/slog"
	"time"
)

// EventKind names what an [Event] reports.
type EventKind uint8

const (
	// EventFenceRaised: a call found its shard's fence marker missing —
	// Redis lost data — and fenced the shard until [Event.Until]. Exactly
	// one call per loss and shard reports it (the one whose script wrote
	// the fence).
	EventFenceRaised EventKind = iota + 1
	// EventFenced: a call was refused because its shard is fenced until
	// [Event.Until]; or [Open] (or the first call of a Store from [New])
	// found the shard fenced, or its marker missing (Until zero: its next
	// call fences it), while other shards are open.
	EventFenced
	// EventClockSkew: a call was refused because this instance's clock is
	// behind Redis's by more than MaxSkew.
	EventClockSkew
	// EventNotDurable: a write was not acknowledged by as many replicas (or
	// AOF fsyncs) as Durability requires, and the call was refused.
	EventNotDurable
	// EventLeaseReleased: a lease whose acquisition had an unknown outcome
	// was released in the background (or cancelled before it landed).
	EventLeaseReleased
	// EventLeaseAbandoned: such a release could not be done (Redis did not
	// answer within the lease, or too many were pending); the lease, if it
	// was taken, ends by itself.
	EventLeaseAbandoned
	// EventRiskAccepted: an operator reopened a fenced key space
	// ([Store.Reopen]; Option "Reopen"), or a server check found a risk
	// that an Allow* option of [Options] accepts (RDB snapshots or AOF
	// without fsync on every write under AllowRollback, an evicting
	// maxmemory-policy under AllowEviction, replicas no Durability setting
	// covers under AllowAsyncReplicas or AllowFewerReplicas). [Event.Option] names the
	// option and [Event.Risk] the risk. It is reported by Open (or the
	// first call of a Store from New) and by a recheck when the risk
	// appears, once per appearance, together with one Warn line: a
	// dashboard counting it finds every weakened deployment.
	EventRiskAccepted
	// EventClaimResent: the client resent a claim whose reply was lost
	// (go-redis retries by default) and the first send had been recorded;
	// the claim's own nonce identified it, and Claim reported it first.
	// Without the nonce that ID would have been refused as a replay.
	EventClaimResent

	numEventKinds // not a kind: the size of the set
)

var eventNames = [numEventKinds]string{"", "fence_raised", "fenced", "clock_skew", "not_durable", "lease_released", "lease_abandoned", "risk_accepted", "claim_resent"}

// String returns the kind's stable label: "fence_raised", "fenced",
// "clock_skew", "not_durable", "lease_released", "lease_abandoned",
// "risk_accepted" or "claim_resent" ("" outside the set).
func (k EventKind) String() string {
	if k < numEventKinds {
		return eventNames[k]
	}
	return ""
}

// Event is one occurrence reported to [Options.Observer]. It holds no ID,
// token or key.
type Event struct {
	// Kind is what happened.
	Kind EventKind
	// Shard is the shard of the key space concerned (0 to Shards-1); -1
	// for EventRiskAccepted, which concerns the server.
	Shard int
	// Until is, for EventFenceRaised and EventFenced, when the fence opens
	// by Redis's clock; zero otherwise.
	Until time.Time
	// Option is, for EventRiskAccepted, the Options field that accepts the
	// risk ("AllowRollback", "AllowEviction", "AllowAsyncReplicas",
	// "AllowFewerReplicas"), or "Reopen" for [Store.Reopen]; "" otherwise.
	Option string
	// Risk is, for EventRiskAccepted, a fixed description of the risk; ""
	// otherwise.
	Risk string
}

// emit reports e to the observer and, at most once a minute per kind (every
// time for a fence raised), to the log.
func (s *Store) emit(e Event) {
	if s.opts.Observer != nil {
		s.opts.Observer(e)
	}
	now := time.Now().UnixMilli()
	if e.Kind != EventFenceRaised && e.Kind != EventRiskAccepted {
		last := s.logged[e.Kind].Load()
		if now-last < time.Minute.Milliseconds() || !s.logged[e.Kind].CompareAndSwap(last, now) {
			return
		}
	}
	attrs := []any{slog.String("event", e.Kind.String()), slog.String("prefix", s.prefix), slog.Int("shard", e.Shard)}
	if !e.Until.IsZero() {
		attrs = append(attrs, slog.Time("until", e.Until))
	}
	if e.Option != "" {
		attrs = append(attrs, slog.String("option", e.Option), slog.String("risk", e.Risk))
	}
	switch e.Kind {
	case EventFenceRaised:
		s.log.Error("redisstore: Redis lost acknowledged data (a shard marker is missing); the shard refuses every claim until the fence opens; see `ctoken-store status`, and `ctoken-store reopen` to accept the risk and serve before then", attrs...)
	case EventFenced:
		s.log.Warn("redisstore: refusing claims of a fenced shard", attrs...)
	case EventClockSkew:
		s.log.Warn("redisstore: refusing claims: this instance's clock is behind Redis's by more than MaxSkew", attrs...)
	case EventNotDurable:
		s.log.Warn("redisstore: refusing claims: fewer replicas acknowledged the write than Durability requires", attrs...)
	case EventRiskAccepted:
		s.log.Warn("redisstore: the server has a risk an Allow* option accepts; claims may be accepted twice if it materializes", attrs...)
	case EventClaimResent:
		s.log.Info("redisstore: a claim's reply was lost and the client resent it; its own nonce identified it", attrs...)
	case EventLeaseAbandoned:
		s.log.Warn("redisstore: could not release a lease whose acquisition had an unknown outcome; it ends by itself", attrs...)
	}
}
