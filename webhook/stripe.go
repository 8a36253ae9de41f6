package webhook

import (
	"encoding/hex"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/ctoken/ctoken/internal/mac"
	"github.com/ctoken/ctoken/internal/reason"
	"github.com/ctoken/ctoken/observe"
)

// HeaderStripeSignature is the signature header of [Stripe].
const HeaderStripeSignature = "Stripe-Signature"

// stripe is Stripe's webhook scheme.
type stripe struct {
	name string
}

var schemeStripe = &stripe{name: "stripe"}

// Stripe returns Stripe's webhook scheme
// (https://docs.stripe.com/webhooks#verify-manually): the header
// [HeaderStripeSignature] holds "t=<unix seconds>" and one or more
// "v1=<hex HMAC-SHA256(secret, t + "." + body)>" items, comma-separated
// (hex of either case, as stripe-go decodes it; Stripe writes lower case);
// items of other schemes (v0, sent in test mode) are ignored, as Stripe's
// libraries do, and every v1 item is compared (their number is bounded by
// [MaxSignatureHeaderBytes] only). Secrets are the endpoint's signing
// secret, "whsec_..." used as raw bytes as Stripe does; a secret without
// that prefix (an API key pasted by mistake) is refused. A signer writes one
// v1 item per secret, as Stripe does while a rolled secret is still valid.
//
// A delivery whose timestamp lies more than [Config.Tolerance] (default
// 300 s, Stripe's) before or after the clock, compared in whole seconds, is
// refused; Stripe's libraries refuse only the past side (stripe-go v83.2.1:
// time.Since(t) > tolerance). Stripe sends no ID
// header: the delivery ID is the event's "id", read from the authentic body,
// which must be one JSON object carrying "id" once as a string of 1 to
// [MaxIDBytes] printable ASCII characters (else [ErrMalformed]). Stripe
// retries an event with the same id, so retries are de-duplicated by it.
// The header names are fixed: [Config.SignatureHeader] and
// [Config.IDHeader] are refused.
func Stripe() Scheme { return schemeStripe }

const stripeSecretPrefix = "whsec_"

// maxStripeV1 is the most "v1=<64 hex>" items a header of
// MaxSignatureHeaderBytes can hold.
const maxStripeV1 = (MaxSignatureHeaderBytes + 1) / (len("v1=") + 2*mac.Size + 1)

var (
	errStripeSecret  = reason.New(ErrSecretInvalid, "Stripe signing secret does not start with whsec_")
	errStripeEventID = reason.New(ErrMalformed, "body is not a JSON object with one string id of 1 to 256 printable ASCII characters")
	errStripeSignID  = reason.New(ErrMalformed, "id is not the id of the event in the body")
	errStripeT       = reason.New(ErrMalformed, "signature header has no t= item or more than one")
)

func (s *stripe) String() string { return s.name }

func (s *stripe) parseSecret(secret string) ([]byte, error) {
	if secret == "" {
		return nil, errSecretEmpty
	}
	if !strings.HasPrefix(secret, stripeSecretPrefix) || len(secret) == len(stripeSecretPrefix) {
		return nil, errStripeSecret
	}
	return []byte(secret), nil
}

func (s *stripe) loadKeys(ks *keySet, secrets []string, _ bool) error {
	return loadHMACKeys(ks, secrets, s.parseSecret)
}

func (s *stripe) configure(cfg *Config, p *params) error {
	if cfg.SignatureHeader != "" || cfg.IDHeader != "" {
		return errHeadersUnused
	}
	p.sigHeader = HeaderStripeSignature
	return configureTolerance(cfg, p)
}

func (s *stripe) forbidsDot() bool { return false }

func (s *stripe) verify(p *params, h http.Header, body []byte, _ string) (verified, error) {
	sig, ok := single(h, p.sigHeader)
	if !ok {
		return verified{}, errSigHeader
	}
	if len(sig) > MaxSignatureHeaderBytes {
		return verified{}, errSigMalformed
	}
	var cands [maxStripeV1][mac.Size]byte
	tsText, n, err := parseStripeHeader(sig, &cands)
	if err != nil {
		return verified{}, err
	}
	key := verifyOne(p.set.Load().keys, cands[:n], func(st *mac.State) {
		st.WriteString(tsText)
		st.WriteByte('.')
		st.Write(body)
	})
	if key == observe.KeyNone {
		return verified{}, errSigMismatch
	}
	ts, _ := parseUnixSeconds(tsText) // checked by parseStripeHeader
	t, err := checkWindow(p, ts)
	if err != nil {
		return verified{key: key}, err
	}
	id, ok := stripeEventID(body)
	if !ok {
		return verified{key: key}, errStripeEventID
	}
	return verified{key: key, ts: t, id: id}, nil
}

// parseStripeHeader parses a Stripe-Signature value: comma-separated
// key=value items, exactly one "t" of 1 to 12 digits without a leading
// zero, and v1 items of 64 hex digits (either case) decoded into dst.
// Items with other keys are skipped, as are v1 values that are not 64 hex
// digits (they never match). It fails when t is absent, repeated or
// malformed ([ErrMalformed]) or no usable v1 item remains ([ErrSignature]).
// It does not allocate.
func parseStripeHeader(s string, dst *[maxStripeV1][mac.Size]byte) (tsText string, n int, err error) {
	seenT := false
	for len(s) > 0 {
		item := s
		if i := strings.IndexByte(s, ','); i >= 0 {
			item, s = s[:i], s[i+1:]
		} else {
			s = ""
		}
		key, val, _ := strings.Cut(item, "=")
		switch key {
		case "t":
			if seenT {
				return "", 0, errStripeT
			}
			seenT = true
			if _, ok := parseUnixSeconds(val); !ok {
				return "", 0, errTSMalformed
			}
			tsText = val
		case "v1":
			if n < len(dst) && parseHexTag(val, &dst[n]) {
				n++
			}
		}
	}
	if !seenT {
		return "", 0, errStripeT
	}
	if n == 0 {
		return "", 0, errSigMalformed
	}
	return tsText, n, nil
}

// stripeEventID reads and checks the event id of an authentic body.
func stripeEventID(body []byte) (string, bool) {
	id, found, ok := bodyStringMember(body, "id")
	if !ok || !found || checkID(id, false) != nil {
		return "", false
	}
	return id, true
}

func (s *stripe) sign(p *params, h http.Header, id string, body []byte, now time.Time) error {
	if got, ok := stripeEventID(body); !ok || got != id {
		return errStripeSignID
	}
	ts := strconv.FormatInt(now.Unix(), 10)
	var b strings.Builder
	b.WriteString("t=")
	b.WriteString(ts)
	for _, k := range p.set.Load().keys {
		st := k.Begin()
		st.WriteString(ts)
		st.WriteByte('.')
		st.Write(body)
		b.WriteString(",v1=")
		b.WriteString(hex.EncodeToString(st.Tag()[:]))
		k.End(st)
	}
	h[p.sigHeader] = []string{b.String()}
	return nil
}

// signsID reports that the delivery ID, read from the verified body, is
// signed: it identifies the delivery across the sender's retries, which are
// signed afresh with a new timestamp.
func (s *stripe) signsID() bool { return true }
