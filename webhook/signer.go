package webhook

import (
	"fmt"
	"log/slog"
	"net/http"

	"github.com/ctoken/ctoken/observe"
)

// Signer signs outgoing deliveries so that a [Verifier] with the same
// scheme, secrets and header names accepts them. It is safe for concurrent
// use. A zero Signer refuses every call with [ErrNoSecret]; it prints no
// secret (see [Signer.Format]).
type Signer struct {
	p *params
}

// NewSigner validates cfg and returns a signer. Only Scheme, Secrets, the
// header names, Now and Observer apply to a signer; the receiving options
// (Tolerance, MaxBody, Replay, DedupWindow, OnReject) are refused with
// [ErrConfig], as are the errors of [NewVerifier], several faults in one
// error as there.
func NewSigner(cfg Config) (*Signer, error) {
	p, err := newParams(cfg, true)
	if err != nil {
		return nil, err
	}
	return &Signer{p: p}, nil
}

// Sign sets on h the headers that authenticate body as delivery id under
// the signer's scheme, at the signer's clock. The id must be 1 to
// [MaxIDBytes] bytes of printable ASCII other than space, and free of '.'
// under [StandardWebhooks], [StandardWebhooksEd25519] and [Svix]; under
// [Stripe] and [Slack], which carry the ID in the body, it must be the ID
// the body carries (see each scheme). Otherwise Sign fails with
// [ErrMalformed] and leaves h unchanged. A nil h is refused with
// [ErrMalformed].
//
// The [Config.Observer] is told of each call: [observe.OutcomeIssued] with
// [observe.KeyPrimary], or [observe.OutcomeRefused] with the [ReasonOf] of
// the error.
func (s *Signer) Sign(h http.Header, id string, body []byte) error {
	if s == nil || s.p == nil {
		return errZeroSigner
	}
	err := s.p.sign(h, id, body)
	if s.p.obs != nil {
		key := observe.KeyPrimary // the first secret signs (with the others, under some schemes)
		if err != nil {
			key = observe.KeyNone
		}
		s.p.report(observe.OutcomeIssued, key, err, 0)
	}
	return err
}

// sign is Sign.
func (p *params) sign(h http.Header, id string, body []byte) error {
	if err := checkID(id, p.scheme.forbidsDot()); err != nil {
		return err
	}
	if h == nil {
		return errNilHeader
	}
	return p.scheme.sign(p, h, id, body, p.now())
}

// String describes s without its secrets.
func (s Signer) String() string { return s.p.describe("Signer") }

// Format prints s with its secrets redacted under every verb, by value and
// by pointer.
func (s Signer) Format(f fmt.State, verb rune) { formatRedacted(f, verb, s.String()) }

// LogValue gives log/slog a description of s without its secrets.
func (s Signer) LogValue() slog.Value { return s.p.logValue() }
