package ctoken

import (
	"strconv"
	"time"
)

// Observability: every issuer, codec and handler of this package reports
// each outcome to the [Observer] of its config, with labels drawn from fixed,
// exported sets ([TokenKind], [Outcome], [RefusalReason], [KeyPosition]) so
// that metrics can be pre-registered with a bounded number of label values.
// An [Event] never holds token text, a subject, a caller, a claim or a key.
//
// The values of these sets and their String forms are stable across minor
// versions: a minor version may add values, never rename or renumber one.

// TokenKind names what an [Event] is about.
type TokenKind uint8

const (
	// KindCursor is a pagination cursor ([CursorIssuer]).
	KindCursor TokenKind = iota + 1
	// KindRequestState is an MCP request state ([RequestStateCodec]).
	KindRequestState
	// KindOneTime is a one-time token ([OneTimeIssuer]).
	KindOneTime
	// KindExchange is one token exchange request ([ExchangeHandler]).
	KindExchange
)

var kindNames = [...]string{"", "cursor", "request_state", "one_time", "exchange"}

// String returns the kind's stable label: "cursor", "request_state",
// "one_time" or "exchange" ("" for a value outside the set).
func (k TokenKind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return ""
}

// TokenKinds returns every [TokenKind], in order.
func TokenKinds() []TokenKind {
	return []TokenKind{KindCursor, KindRequestState, KindOneTime, KindExchange}
}

// Outcome is what happened to one token operation.
type Outcome uint8

const (
	// OutcomeIssued: a token was issued (cursor Issue, state Encode,
	// one-time Mint) or, for [KindExchange], a credential was issued.
	OutcomeIssued Outcome = iota + 1
	// OutcomeVerified: a token was accepted (cursor Verify, state Decode,
	// one-time Verify or Redeem). [Event.Key] names the key that verified it.
	OutcomeVerified
	// OutcomeRefused: a token or an input was refused; [Event.Reason] says
	// why.
	OutcomeRefused
	// OutcomeDuplicate: an authentic, unexpired single-use token was
	// presented again (a replay), and refused.
	OutcomeDuplicate
	// OutcomeStoreFailure: the replay store could not answer, so the token
	// was refused unjudged (fail closed).
	OutcomeStoreFailure
)

var outcomeNames = [...]string{"", "issued", "verified", "refused", "duplicate", "store_failure"}

// String returns the outcome's stable label: "issued", "verified",
// "refused", "duplicate" or "store_failure" ("" outside the set).
func (o Outcome) String() string {
	if int(o) < len(outcomeNames) {
		return outcomeNames[o]
	}
	return ""
}

// Outcomes returns every [Outcome], in order.
func Outcomes() []Outcome {
	return []Outcome{OutcomeIssued, OutcomeVerified, OutcomeRefused, OutcomeDuplicate, OutcomeStoreFailure}
}

// KeyPosition names the key of a [Keyring] that checked a token: the
// primary, or the Nth previous key. The zero value, [KeyNone], means no key
// was involved or none matched (a refusal before or at the MAC check).
type KeyPosition uint8

const (
	// KeyNone: no key authenticated the token.
	KeyNone KeyPosition = 0
	// KeyPrimary: the primary key (the first of the ring), which also signs
	// every new token.
	KeyPrimary KeyPosition = 1
)

// keyPosition is the position of the key at index i of a ring (0 is the
// primary), or KeyNone for a negative i. Positions past 255 share 255.
func keyPosition(i int) KeyPosition {
	switch {
	case i < 0:
		return KeyNone
	case i >= 254:
		return 255
	}
	return KeyPosition(i + 1)
}

// Previous returns the N of "previous N" (1 for the first previous key),
// or 0 for [KeyNone] and [KeyPrimary].
func (p KeyPosition) Previous() int {
	if p <= KeyPrimary {
		return 0
	}
	return int(p) - 1
}

// String returns "none", "primary", or "previous N" (N from 1).
func (p KeyPosition) String() string {
	switch p {
	case KeyNone:
		return "none"
	case KeyPrimary:
		return "primary"
	}
	return "previous " + strconv.Itoa(p.Previous())
}

// Event is one outcome reported to an [Observer]. It holds only values of
// the fixed sets above and a duration: never token text, a subject, a
// caller, a claim, a purpose or key material.
type Event struct {
	// Kind is what the event is about.
	Kind TokenKind
	// Outcome is what happened.
	Outcome Outcome
	// Reason is why a token was refused; [ReasonNone] for
	// [OutcomeIssued] and [OutcomeVerified]. For [OutcomeDuplicate] and
	// [OutcomeStoreFailure] it is the [Reason] of the returned error
	// ("already used", "already redeemed", "replay store failed").
	Reason RefusalReason
	// Key is the key that authenticated the token: set on
	// [OutcomeVerified], on [OutcomeIssued] ([KeyPrimary]: the primary signs
	// every new token), and on refusals found after the MAC check (expired,
	// wrong scope, duplicate); [KeyNone] otherwise.
	Key KeyPosition
	// StoreLatency is how long the replay store took, when one was called
	// (single-use request state, one-time Redeem, exchange); 0 otherwise.
	StoreLatency time.Duration
}

// Observer is told of every outcome of the issuer, codec or handler whose
// config holds it. Observe is called synchronously on the hot path, once per
// operation, from every goroutine that uses the issuer: it must be safe for
// concurrent use and must not block (count, or hand off to a buffered
// sink). A nil Observer costs nothing: no event is built. An Observer must
// not retain anything beyond the [Event] value it is given.
type Observer interface {
	Observe(Event)
}

// ObserverFunc adapts a function to [Observer].
type ObserverFunc func(Event)

// Observe calls f(e).
func (f ObserverFunc) Observe(e Event) { f(e) }

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
// metrics adapter. With no non-nil observer it returns nil, which costs
// nothing.
func Observers(obs ...Observer) Observer {
	var all multiObserver
	for _, o := range obs {
		if o != nil {
			all = append(all, o)
		}
	}
	switch len(all) {
	case 0:
		return nil
	case 1:
		return all[0]
	}
	return all
}

type multiObserver []Observer

func (m multiObserver) Observe(e Event) {
	for _, o := range m {
		o.Observe(e)
	}
}
