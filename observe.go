package ctoken

import (
	"time"

	"github.com/ctoken/ctoken/observe"
)

// Observability: every issuer, codec and handler of this package reports
// each outcome to the [Observer] of its config, with labels drawn from fixed,
// exported sets ([TokenKind], [Outcome], [RefusalReason], [KeyPosition]) so
// that metrics can be pre-registered with a bounded number of label values.
// An [Event] never holds token text, a subject, a caller, a claim or a key.
//
// These types live in package [observe], which the webhook package shares,
// so one observer serves both; the names below are aliases, and their
// values and String forms are stable across minor versions: a minor version
// may add values, never rename or renumber one.

// TokenKind names what an [Event] is about: [observe.TokenKind].
type TokenKind = observe.TokenKind

// Every [TokenKind] ([observe.TokenKind] documents each).
const (
	KindCursor       = observe.KindCursor       // "cursor": a [CursorIssuer]'s cursor
	KindRequestState = observe.KindRequestState // "request_state": a [RequestStateCodec]'s state
	KindOneTime      = observe.KindOneTime      // "one_time": a [OneTimeIssuer]'s token
	KindExchange     = observe.KindExchange     // "exchange": one [ExchangeHandler] request
	KindWebhook      = observe.KindWebhook      // "webhook": one delivery of the webhook package
	KindIdempotency  = observe.KindIdempotency  // "idempotency": one request of the idempotency package
)

// TokenKinds returns every [TokenKind], in order ([observe.TokenKinds]).
func TokenKinds() []TokenKind { return observe.TokenKinds() }

// Outcome is what happened to one operation: [observe.Outcome].
type Outcome = observe.Outcome

// Every [Outcome] ([observe.Outcome] documents each).
const (
	OutcomeIssued       = observe.OutcomeIssued       // "issued"
	OutcomeVerified     = observe.OutcomeVerified     // "verified"; [Event.Key] names the key
	OutcomeRefused      = observe.OutcomeRefused      // "refused"; [Event.Reason] says why
	OutcomeDuplicate    = observe.OutcomeDuplicate    // "duplicate": a single-use token replayed
	OutcomeStoreFailure = observe.OutcomeStoreFailure // "store_failure": refused unjudged (fail closed)
	OutcomeInProgress   = observe.OutcomeInProgress   // "in_progress": webhook deliveries and idempotent requests
	OutcomeProcessed    = observe.OutcomeProcessed    // "processed": webhook deliveries and idempotent requests
	OutcomeReleased     = observe.OutcomeReleased     // "released": idempotent requests only
)

// Outcomes returns every [Outcome], in order ([observe.Outcomes]).
func Outcomes() []Outcome { return observe.Outcomes() }

// KeyPosition names the key of a [Keyring] that checked a token: the
// primary, or the Nth previous key; [observe.KeyPosition]. The zero value,
// [KeyNone], means no key was involved or none matched (a refusal before or
// at the MAC check).
type KeyPosition = observe.KeyPosition

const (
	// KeyNone: no key authenticated the token.
	KeyNone = observe.KeyNone
	// KeyPrimary: the primary key (the first of the ring), which also signs
	// every new token.
	KeyPrimary = observe.KeyPrimary
)

// keyPosition is the position of the key at index i of a ring (0 is the
// primary), or KeyNone for a negative i. Positions past 255 share 255.
func keyPosition(i int) KeyPosition { return observe.KeyAt(i) }

// Event is one outcome reported to an [Observer]: [observe.Event]. It holds
// only values of the fixed sets above and a duration: never token text, a
// subject, a caller, a claim, a purpose or key material.
type Event = observe.Event

// Observer is told of every outcome of the issuer, codec or handler whose
// config holds it: [observe.Observer]. Observe is called synchronously on
// the hot path, once per operation, from every goroutine that uses the
// issuer: it must be safe for concurrent use and must not block (count, or
// hand off to a buffered sink). A nil Observer costs nothing: no event is
// built. An Observer must not retain anything beyond the [Event] value it
// is given.
type Observer = observe.Observer

// ObserverFunc adapts a function to [Observer]: [observe.ObserverFunc].
type ObserverFunc = observe.ObserverFunc

// observeErr reports the outcome of a checking operation: Verified with the
// key at index key when err is nil, else the refusal err describes (and the
// key, if the MAC had already matched). It is called only when obs is
// non-nil.
func observeErr(obs Observer, kind TokenKind, key int, err error, store time.Duration) {
	e := Event{Kind: kind, Key: keyPosition(key), StoreLatency: store}
	if err == nil {
		e.Outcome = OutcomeVerified
	} else {
		e.Reason = ReasonOf(err)
		e.Outcome = outcomeOf(e.Reason)
	}
	obs.Observe(e)
}

// observeIssue reports the outcome of an issuing operation: Issued (by the
// primary key) when err is nil, else the refusal.
func observeIssue(obs Observer, kind TokenKind, err error) {
	e := Event{Kind: kind, Outcome: OutcomeIssued, Key: KeyPrimary}
	if err != nil {
		e.Key = KeyNone
		e.Reason = ReasonOf(err)
		e.Outcome = outcomeOf(e.Reason)
	}
	obs.Observe(e)
}

// outcomeOf is the outcome of a refusal with reason r.
func outcomeOf(r RefusalReason) Outcome {
	switch r {
	case ReasonAlreadyUsed, ReasonAlreadyRedeemed:
		return OutcomeDuplicate
	case ReasonStoreFailed:
		return OutcomeStoreFailure
	}
	return OutcomeRefused
}

// Observers returns an [Observer] that passes every event to each of obs in
// order (nil entries are skipped), for example a [SlogObserver] and a
// metrics adapter ([observe.Multi]). With no non-nil observer it returns
// nil, which costs nothing.
func Observers(obs ...Observer) Observer { return observe.Multi(obs...) }
