package observe

import (
	"strconv"
	"strings"
	"time"
)

// TokenKind names what an [Event] is about. Its value is its label
// ("cursor", "webhook"): string(k), fmt's verbs and String all print the
// words. The zero value is outside the set.
type TokenKind string

const (
	// KindCursor is a pagination cursor (ctoken.CursorIssuer).
	KindCursor TokenKind = "cursor"
	// KindRequestState is an MCP request state (ctoken.RequestStateCodec).
	KindRequestState TokenKind = "request_state"
	// KindOneTime is a one-time token (ctoken.OneTimeIssuer).
	KindOneTime TokenKind = "one_time"
	// KindExchange is one token exchange request (exchange.Handler).
	KindExchange TokenKind = "exchange"
	// KindWebhook is one webhook delivery (webhook.Verifier and
	// webhook.Signer).
	KindWebhook TokenKind = "webhook"
	// KindIdempotency is one request with an idempotency key
	// (idempotency.Middleware).
	KindIdempotency TokenKind = "idempotency"
)

// String returns the kind's stable label: "cursor", "request_state",
// "one_time", "exchange", "webhook" or "idempotency" ("" for a value
// outside the set, so a metric label stays bounded).
func (k TokenKind) String() string {
	switch k {
	case KindCursor, KindRequestState, KindOneTime, KindExchange, KindWebhook, KindIdempotency:
		return string(k)
	}
	return ""
}

// TokenKinds returns every [TokenKind], in order of declaration.
func TokenKinds() []TokenKind {
	return []TokenKind{KindCursor, KindRequestState, KindOneTime, KindExchange, KindWebhook, KindIdempotency}
}

// Outcome is what happened to one operation. Its value is its label
// ("verified", "refused"): string(o), fmt's verbs and String all print the
// words. The zero value is outside the set.
type Outcome string

const (
	// OutcomeIssued: a token was issued (cursor Issue, state Encode,
	// one-time Mint), for [KindExchange] a credential was issued, and for
	// [KindWebhook] a delivery was signed.
	OutcomeIssued Outcome = "issued"
	// OutcomeVerified: a token or a delivery was accepted (cursor Verify,
	// state Decode, one-time Verify or Redeem, webhook Verify).
	// [Event.Key] names the key or secret that verified it.
	OutcomeVerified Outcome = "verified"
	// OutcomeRefused: a token, a delivery or an input was refused;
	// [Event.Reason] says why.
	OutcomeRefused Outcome = "refused"
	// OutcomeDuplicate: an authentic, unexpired single-use token was
	// presented again (a replay), and refused; or a webhook delivery
	// already processed arrived again (a sender's retry), and was
	// acknowledged without being processed; or ([KindIdempotency]) a
	// retry of a completed request was answered with its stored response
	// without running the handler.
	OutcomeDuplicate Outcome = "duplicate"
	// OutcomeStoreFailure: the replay store could not answer, so the token
	// or delivery was refused unjudged (fail closed), or (webhook) could not
	// record that a delivery was processed.
	OutcomeStoreFailure Outcome = "store_failure"
	// OutcomeInProgress: a copy of a webhook delivery arrived while another
	// attempt held its lease, and was refused so that the sender retries;
	// or ([KindIdempotency]) a request arrived while another request with
	// the same key was running, and was refused with 409.
	OutcomeInProgress Outcome = "in_progress"
	// OutcomeProcessed: the replay store recorded a webhook delivery as
	// processed (its lease was confirmed); or ([KindIdempotency]) it
	// recorded the response of the first request with a key.
	OutcomeProcessed Outcome = "processed"
	// OutcomeReleased ([KindIdempotency]): the handler ran but asked for
	// a retry (a 5xx or another retry status), panicked, or returned
	// without a response after the client went away, so the key was freed
	// and the client's retry runs the handler again; [Event.Reason] says
	// which.
	OutcomeReleased Outcome = "released"
	// OutcomeRotateKey: the primary key has sealed so many messages under
	// AES-256-GCM with random 96-bit nonces (ctoken's "v1e." request
	// states) that it should be retired: past 2^32 messages per key the
	// chance of a repeated nonce exceeds NIST SP 800-38D's bound, and a
	// repeat lets the holder of the two states forge states. It is
	// reported when the count of one process reaches 2^28 and again at
	// every doubling (2^29, 2^30, ...); [Event.Seals] holds the count and
	// [Event.Key] is [KeyPrimary]. Nothing was refused: rotate the key
	// (put a new primary in front of the ring).
	OutcomeRotateKey Outcome = "rotate_key"
)

// String returns the outcome's stable label: "issued", "verified",
// "refused", "duplicate", "store_failure", "in_progress", "processed",
// "released" or "rotate_key" ("" outside the set, so a metric label stays
// bounded).
func (o Outcome) String() string {
	switch o {
	case OutcomeIssued, OutcomeVerified, OutcomeRefused, OutcomeDuplicate, OutcomeStoreFailure,
		OutcomeInProgress, OutcomeProcessed, OutcomeReleased, OutcomeRotateKey:
		return string(o)
	}
	return ""
}

// Outcomes returns every [Outcome], in order of declaration.
func Outcomes() []Outcome {
	return []Outcome{OutcomeIssued, OutcomeVerified, OutcomeRefused, OutcomeDuplicate, OutcomeStoreFailure,
		OutcomeInProgress, OutcomeProcessed, OutcomeReleased, OutcomeRotateKey}
}

// KeyPosition names the key of a ring (or the secret of a webhook
// verifier's list) that checked a token: the primary, or the Nth previous
// key. The zero value, [KeyNone], means no key was involved or none matched
// (a refusal before or at the MAC check). Its value is its label
// ("primary", "previous 2"), so string(p) prints the words, except for
// KeyNone, whose value is "" and whose String is "none"; build positions
// with [KeyAt].
type KeyPosition string

const (
	// KeyNone: no key authenticated the token. String returns "none".
	KeyNone KeyPosition = ""
	// KeyPrimary: the primary key (the first of the ring), which also signs
	// every new token.
	KeyPrimary KeyPosition = "primary"
)

// keyPositions holds every position KeyAt returns, by index + 1, so that
// KeyAt costs no allocation.
var keyPositions = func() (p [256]KeyPosition) {
	p[1] = KeyPrimary
	for i := 2; i < len(p); i++ {
		p[i] = KeyPosition("previous " + strconv.Itoa(i-1))
	}
	return p
}()

// KeyAt returns the position of the key at index i of a ring or secret
// list (0 is the primary, 1 the first previous key), or [KeyNone] for a
// negative i. Indexes from 254 on share the position "previous 254".
func KeyAt(i int) KeyPosition {
	switch {
	case i < 0:
		return KeyNone
	case i >= 254:
		return keyPositions[255]
	}
	return keyPositions[i+1]
}

// Previous returns the N of "previous N" (1 for the first previous key),
// or 0 for [KeyNone], [KeyPrimary] and a value [KeyAt] does not return.
func (p KeyPosition) Previous() int {
	n, err := strconv.Atoi(strings.TrimPrefix(string(p), "previous "))
	if err != nil || n < 1 || n > 254 || keyPositions[n+1] != p {
		return 0
	}
	return n
}

// String returns "none", "primary", or "previous N" (N from 1), and ""
// for a value [KeyAt] does not return.
func (p KeyPosition) String() string {
	switch {
	case p == KeyNone:
		return "none"
	case p == KeyPrimary || p.Previous() > 0:
		return string(p)
	}
	return ""
}

// Event is one outcome reported to an [Observer]. It holds only values of
// the fixed sets of this package, a duration and a count: never token text,
// a delivery's ID or body, a subject, a caller, a claim, a purpose or key
// material.
type Event struct {
	// Kind is what the event is about.
	Kind TokenKind
	// Outcome is what happened.
	Outcome Outcome
	// Reason is why a token was refused; [ReasonNone] for
	// [OutcomeIssued], [OutcomeVerified] and [OutcomeProcessed]. For
	// [OutcomeDuplicate], [OutcomeInProgress] and [OutcomeStoreFailure] it
	// is the reason of the returned error ("already used", "already
	// redeemed", "replay store failed", "delivery already processed", ...),
	// and for [OutcomeReleased] why the key was freed.
	Reason RefusalReason
	// Key is the key that authenticated the token: set on
	// [OutcomeVerified], on [OutcomeIssued] ([KeyPrimary]: the primary signs
	// every new token), and on refusals found after the MAC check (expired,
	// wrong scope, duplicate); [KeyNone] otherwise.
	Key KeyPosition
	// StoreLatency is how long the replay store took, when one was called
	// (single-use request state, one-time Redeem, exchange, webhook lease
	// acquisition and confirmation); 0 otherwise.
	StoreLatency time.Duration
	// Seals is, for [OutcomeRotateKey], how many messages the primary key
	// has sealed in this process (a power of two from 2^28 on); 0 for
	// every other outcome.
	Seals uint64
}

// Observer is told of every outcome of the issuer, codec, verifier or
// handler whose config holds it. Observe is called synchronously on the hot
// path, once per operation, from every goroutine that uses it: it must be
// safe for concurrent use and must not block (count, or hand off to a
// buffered sink). A nil Observer costs nothing: no event is built. An
// Observer must not retain anything beyond the [Event] value it is given.
type Observer interface {
	Observe(Event)
}

// ObserverFunc adapts a function to [Observer].
type ObserverFunc func(Event)

// Observe calls f(e).
func (f ObserverFunc) Observe(e Event) { f(e) }

// Multi returns an [Observer] that passes every event to each of obs in
// order (nil entries are skipped), for example a log adapter and a metrics
// adapter. With no non-nil observer it returns nil, which costs nothing;
// with one, it returns that one.
func Multi(obs ...Observer) Observer {
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
