package webhook

import (
	"crypto/sha256"
	"fmt"
	"log/slog"
	"net/http"

	"github.com/ctoken/ctoken/observe"
)

// Verifier checks signed webhook deliveries ([Verifier.Verify]) and makes
// sure each is processed once ([Verifier.Acquire], [Verifier.Middleware]).
// It is safe for concurrent use. A zero Verifier refuses every call with
// [ErrNoSecret]; it prints no secret (see [Verifier.Format]).
type Verifier struct {
	p *params
}

// NewVerifier validates cfg and returns a verifier. It fails with
// [ErrConfig] for a nil Scheme, a negative duration or size, an option
// the scheme does not use, a [Dedup] policy the scheme refuses, or a Replay
// store that does not implement [replay.Leaser]; [ErrNoSecret] when there is no secret; and
// [ErrSecretInvalid] for a malformed secret or, in FIPS 140-3 mode, one too
// short for the mode. The faults of the scheme, the options and the secrets
// are reported together (an all-zero Config: no scheme and no secret) in
// one error that errors.Is matches against each fault's sentinel; the
// scheme's own checks of its options run once those pass.
func NewVerifier(cfg Config) (*Verifier, error) {
	p, err := newParams(cfg, false)
	if err != nil {
		return nil, err
	}
	return &Verifier{p: p}, nil
}

// Verify checks that body with headers h is an authentic delivery. It does
// not consult the replay store (see [Verifier.Acquire]).
//
// Order: body cap ([ErrTooLarge]); ID present, 1 to [MaxIDBytes] bytes of
// printable ASCII, and for schemes that sign a timestamp the timestamp
// present and 1 to 12 digits without a leading zero ([ErrMalformed]);
// signature header present, at most [MaxSignatureHeaderBytes], and a
// signature matching under some secret, compared in constant time
// ([ErrSignature]); for schemes that sign a time, the timestamp within the
// tolerance either way ([ErrTimestamp]). The timestamp window is checked after the signature,
// so ErrTimestamp always means an authentic but stale or future delivery.
// Schemes that carry the delivery ID in the body ([Stripe], [Slack]) read
// and check it last, from the authentic body ([ErrMalformed]).
// A refused delivery returns the zero Delivery and costs no allocation,
// except a well-formed forged Ed25519 signature (see
// [StandardWebhooksEd25519]).
//
// The [Config.Observer] is told of each call: [observe.OutcomeVerified]
// with the position of the first secret that matched ([observe.KeyPrimary]
// for the first of the list, "previous N" for the others), or
// [observe.OutcomeRefused] with the [ReasonOf] of the error (and the
// matching secret's position when the signature matched but a later check
// refused the delivery).
func (v *Verifier) Verify(h http.Header, body []byte) (Delivery, error) {
	if v == nil || v.p == nil {
		return Delivery{}, errZeroVerifier
	}
	d, err := v.p.verify(h, body)
	if v.p.obs != nil {
		v.p.report(observe.OutcomeVerified, d.key, err, 0)
	}
	if err != nil {
		return Delivery{}, err // fail closed: nothing of a refused delivery
	}
	return d, nil
}

// verify is Verify. On a refusal after the signature matched it returns a
// Delivery holding only the matching key's position, for the observer.
func (p *params) verify(h http.Header, body []byte) (Delivery, error) {
	if int64(len(body)) > p.maxBody {
		return Delivery{}, errBodyTooLarge
	}
	var id string
	if p.idHeader != "" { // else the scheme reads the ID from the verified body
		var ok bool
		if id, ok = either(h, p.idHeader, p.idAlt); !ok {
			return Delivery{}, errIDHeader
		}
		if err := checkID(id, p.scheme.forbidsDot()); err != nil {
			return Delivery{}, err
		}
	}
	got, err := p.scheme.verify(p, h, body, id)
	if err != nil {
		return Delivery{key: got.key}, err // fail closed: Verify returns nothing of a refused delivery
	}
	if p.idHeader == "" {
		id = got.id
	}
	d := Delivery{ID: id, Timestamp: got.ts, key: got.key, verified: true}
	if p.dedupBy == DedupSignature || p.dedupBy == DedupIDAndSignature {
		d.body = sha256.Sum256(body)
	}
	return d, nil
}

// String describes v without its secrets.
func (v Verifier) String() string { return v.p.describe("Verifier") }

// Format prints v with its secrets redacted under every verb, by value and
// by pointer.
func (v Verifier) Format(f fmt.State, verb rune) { formatRedacted(f, verb, v.String()) }

// LogValue gives log/slog a description of v without its secrets.
func (v Verifier) LogValue() slog.Value { return v.p.logValue() }
