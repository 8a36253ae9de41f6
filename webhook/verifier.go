package webhook

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"

	"github.com/ctoken/ctoken/replay"
)

// Verifier checks signed webhook deliveries and de-duplicates them. It is
// safe for concurrent use. A zero Verifier refuses every call with
// [ErrNoSecret]; it prints no secret (see [Verifier.Format]).
type Verifier struct {
	p *params
}

// NewVerifier validates cfg and returns a verifier. It fails with
// [ErrConfig] for a nil Scheme, a negative duration or size, or an option
// the scheme does not use; [ErrNoSecret] when there is no secret; and
// [ErrSecretInvalid] for a malformed secret or, in FIPS 140-3 mode, one too
// short for the mode.
func NewVerifier(cfg Config) (*Verifier, error) {
	p, err := newParams(cfg, false)
	if err != nil {
		return nil, err
	}
	return &Verifier{p: p}, nil
}

// Verify checks that body with headers h is an authentic delivery. It does
// not consult the replay store (see [Verifier.Claim]).
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
func (v *Verifier) Verify(h http.Header, body []byte) (Delivery, error) {
	if v == nil || v.p == nil {
		return Delivery{}, errZeroVerifier
	}
	p := v.p
	if int64(len(body)) > p.maxBody {
		return Delivery{}, errBodyTooLarge
	}
	var id string
	if p.idHeader != "" { // else the scheme reads the ID from the verified body
		var ok bool
		if id, ok = single(h, p.idHeader); !ok {
			return Delivery{}, errIDHeader
		}
		if err := checkID(id, p.scheme.forbidsDot()); err != nil {
			return Delivery{}, err
		}
	}
	got, err := p.scheme.verify(p, h, body, id)
	if err != nil {
		return Delivery{}, err // fail closed: nothing of a refused delivery
	}
	if p.idHeader == "" {
		id = got.id
	}
	return Delivery{ID: id, Timestamp: got.ts, mac: got.mac, verified: true}, nil
}

// Claim records an authentic delivery d (from [Verifier.Verify]) in the
// replay store and reports whether it is the first time d was seen. For
// [HMACSHA256] and [GitHub] a delivery counts as seen when either its
// signature (that is, the same body) or its ID was seen within the dedup
// window; for [StandardWebhooks] when its signed ID was seen within the
// dedup window (or, if later, before its timestamp left the tolerance
// window), so a retry with a fresh timestamp is also a duplicate.
//
// A store failure is returned as an error matching [ErrReplayStore] and the
// store's error, with first false: the caller must refuse the delivery and
// let the sender retry. When one of a delivery's two claims succeeded and
// the next failed, the first is released again (if the store implements
// [replay.Releaser]), so the retry is not mistaken for a duplicate. A
// Delivery not from Verify is refused with [ErrMalformed].
func (v *Verifier) Claim(ctx context.Context, d Delivery) (first bool, err error) {
	if v == nil || v.p == nil {
		return false, errZeroVerifier
	}
	if !d.verified || checkID(d.ID, v.p.scheme.forbidsDot()) != nil {
		return false, errNotVerified
	}
	keys, until := v.p.scheme.claimKeys(v.p, &d)
	for i, k := range keys {
		first, err := v.p.store.Claim(ctx, k, until)
		if err != nil {
			v.releaseKeys(context.WithoutCancel(ctx), keys[:i])
			return false, storeError(err)
		}
		if !first {
			return false, nil
		}
	}
	return true, nil
}

// Release undoes a successful [Verifier.Claim] of d, so that the sender's
// retry is processed rather than acknowledged as a duplicate; call it when
// processing d failed. It returns nil without doing anything when the store
// does not implement [replay.Releaser] (the delivery then stays claimed,
// which is the safe side); a store failure matches [ErrReplayStore].
func (v *Verifier) Release(ctx context.Context, d Delivery) error {
	if v == nil || v.p == nil {
		return errZeroVerifier
	}
	if !d.verified {
		return errNotVerified
	}
	keys, _ := v.p.scheme.claimKeys(v.p, &d)
	return v.releaseKeys(ctx, keys)
}

// releaseKeys releases keys when the store supports it and returns the
// first failure.
func (v *Verifier) releaseKeys(ctx context.Context, keys []string) error {
	r, ok := v.p.store.(replay.Releaser)
	if !ok {
		return nil
	}
	var first error
	for _, k := range keys {
		if err := r.Release(ctx, k); err != nil && first == nil {
			first = storeError(err)
		}
	}
	return first
}

// String describes v without its secrets.
func (v Verifier) String() string { return v.p.describe("Verifier") }

// Format prints v with its secrets redacted under every verb, by value and
// by pointer.
func (v Verifier) Format(f fmt.State, verb rune) { formatRedacted(f, verb, v.String()) }

// LogValue gives log/slog a description of v without its secrets.
func (v Verifier) LogValue() slog.Value { return v.p.logValue() }
