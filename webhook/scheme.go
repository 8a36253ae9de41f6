package webhook

import (
	"crypto/hmac"
	"fmt"
	"net/http"
	"time"

	"github.com/ctoken/ctoken/internal/mac"
	"github.com/ctoken/ctoken/internal/reason"
	"github.com/ctoken/ctoken/observe"
)

// Scheme is a webhook signature scheme: how a sender signs a delivery,
// which headers carry the signature, the delivery ID and (for some schemes)
// a signed timestamp, and what a secret looks like. Its values come from
// this package's functions ([Cursor], [HMACSHA256], [GitHub],
// [StandardWebhooks], [StandardWebhooksEd25519], [Svix], [Stripe], [Slack],
// [Shopify], [ShopifyByEvent]); the
// unexported methods keep the set closed, so new schemes and new
// capabilities can be added without breaking callers.
type Scheme interface {
	// String returns the scheme's name, such as "standard-webhooks".
	String() string

	// loadKeys parses secrets into ks, for a signer when signer is set.
	loadKeys(ks *keySet, secrets []string, signer bool) error
	// configure resolves the header names of cfg into p and refuses
	// options that have no effect under the scheme.
	configure(cfg *Config, p *params) error
	// forbidsDot reports whether a delivery ID may not contain '.'.
	forbidsDot() bool
	// verify checks the signature (and timestamp) of a delivery under the
	// secrets in effect (one load of p.set) and returns what it verified;
	// once the signature matched, also on a later refusal, verified.key
	// names the secret that matched. For schemes with an ID header (p.idHeader
	// set) id is that header's checked value; the others read the ID from
	// the verified body and return it in verified.id. It returns only
	// preallocated errors and, returning by value, allocates nothing on
	// refusal.
	verify(p *params, h http.Header, body []byte, id string) (verified, error)
	// sign sets the headers authenticating body as delivery id at now. It
	// fails, leaving h unchanged, only when id is not the ID a verifier
	// would read from body (schemes without an ID header).
	sign(p *params, h http.Header, id string, body []byte, now time.Time) error
}

// verified is what a scheme's verify established about a delivery.
type verified struct {
	ts time.Time // the signed timestamp (schemes that sign one)
	id string    // the delivery ID read from the body (schemes without an ID header)
	// key is the position of the first secret whose signature matched,
	// observe.KeyNone when none did.
	key observe.KeyPosition
}

// ownScheme reports whether s is one of this package's scheme types (and
// not a type that merely embeds the Scheme interface, whose methods are
// not ours).
func ownScheme(s Scheme) bool {
	switch s.(type) {
	case *hmacSHA256, *standard, *standardEd25519, *stripe, *slack, *shopify:
		return true
	}
	return false
}

// loadHMACKeys parses secrets with parse into pooled HMAC keys on ks. An
// error names the secret's position, never the secret.
func loadHMACKeys(ks *keySet, secrets []string, parse func(string) ([]byte, error)) error {
	for i, s := range secrets {
		k, err := newKey(parse, s)
		if err != nil {
			return fmt.Errorf("%w (secret %d of %d)", err, i+1, len(secrets))
		}
		ks.keys = append(ks.keys, k)
	}
	return nil
}

// configureTolerance sets p.tolerance from cfg for a scheme that signs a
// timestamp. The reference libraries compare whole seconds, so a Tolerance
// that is not a whole number of seconds is refused rather than rounded.
func configureTolerance(cfg *Config, p *params) error {
	if cfg.Tolerance%time.Second != 0 {
		return errToleranceFraction
	}
	p.tolerance = cfg.Tolerance
	if p.tolerance == 0 {
		p.tolerance = DefaultTolerance
	}
	return nil
}

// checkWindow checks a signed timestamp of ts unix seconds against the
// clock as the reference libraries do, in whole seconds: the clock is
// truncated to its second, and the delivery is refused when it lies more
// than the tolerance before or after it. So with a 300 s tolerance a
// delivery stamped t is accepted through the whole second t+300 and
// refused from t+301 on.
func checkWindow(p *params, ts int64) (time.Time, error) {
	now := p.now().Unix()
	tol := int64(p.tolerance / time.Second)
	if now-ts > tol {
		return time.Time{}, errTSTooOld
	}
	if ts-now > tol {
		return time.Time{}, errTSFuture
	}
	return time.Unix(ts, 0), nil
}

// errToleranceFraction refuses a Tolerance the schemes cannot honour.
var errToleranceFraction = reason.New(ErrConfig, "Tolerance is not a whole number of seconds")

// Header names of the schemes.
const (
	// HeaderWebhookSignature is the signature header of [Cursor] and the
	// default one of [HMACSHA256].
	HeaderWebhookSignature = "X-Webhook-Signature"
	// HeaderWebhookID is the delivery ID header of [Cursor] and the
	// default one of [HMACSHA256].
	HeaderWebhookID = "X-Webhook-ID"
	// HeaderGitHubSignature is the signature header of [GitHub].
	HeaderGitHubSignature = "X-Hub-Signature-256"
	// HeaderGitHubDelivery is the delivery ID header of [GitHub].
	HeaderGitHubDelivery = "X-GitHub-Delivery"
	// HeaderStandardID is the delivery ID header of [StandardWebhooks].
	HeaderStandardID = "webhook-id"
	// HeaderStandardTimestamp is the timestamp header (unix seconds) of
	// [StandardWebhooks].
	HeaderStandardTimestamp = "webhook-timestamp"
	// HeaderStandardSignature is the signature header of [StandardWebhooks].
	HeaderStandardSignature = "webhook-signature"
)

// Limits on what a delivery may carry, checked before anything is parsed.
const (
	// MaxIDBytes caps a delivery ID (it becomes a replay store key).
	MaxIDBytes = 256
	// MaxSignatureHeaderBytes caps a signature header.
	MaxSignatureHeaderBytes = 4096
	// MaxSignatures caps the Ed25519 (v1a) entries of one signature header
	// that [StandardWebhooksEd25519] verifies: each costs a public-key
	// verification, so further v1a entries are ignored, not refused.
	// HMAC-SHA256 entries (Standard Webhooks and Svix v1, Stripe v1) are
	// bounded by [MaxSignatureHeaderBytes] alone: the MAC is computed once
	// per secret and every entry costs one constant-time compare.
	MaxSignatures = 16
)

// single returns the one non-empty value of the header with canonical key
// name. Absent, empty and repeated headers are refused: a repeated header
// is ambiguous. Looking the canonical key up directly costs no allocation.
func single(h http.Header, name string) (string, bool) {
	vs := h[name]
	if len(vs) != 1 || vs[0] == "" {
		return "", false
	}
	return vs[0], true
}

// checkID accepts 1 to MaxIDBytes bytes of printable ASCII other than space
// ('!' through '~'); when noDot, also no '.'.
func checkID(id string, noDot bool) error {
	if len(id) == 0 || len(id) > MaxIDBytes {
		return errIDLength
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if c <= ' ' || c > '~' || (c == '.' && noDot) {
			return errIDChar
		}
	}
	return nil
}

// verifyOne reports, in constant time per comparison, the position of the
// first key whose HMAC of the message written by write equals one of the
// candidate tags, or observe.KeyNone when no key's does. Every candidate
// is compared under every key: there is no early exit.
func verifyOne(keys []*mac.Key, cands [][mac.Size]byte, write func(st *mac.State)) observe.KeyPosition {
	matched := -1
	for i, k := range keys {
		st := k.Begin()
		write(st)
		tag := st.Tag()
		for j := range cands {
			if equalTag(tag, &cands[j]) && matched < 0 {
				matched = i
			}
		}
		k.End(st)
	}
	return observe.KeyAt(matched)
}

// equalTag compares two tags in constant time.
func equalTag(a, b *[mac.Size]byte) bool { return hmac.Equal(a[:], b[:]) }

// fromHex decodes one hex digit of either case: every sender's own Go
// library decodes its signature with encoding/hex, which accepts both.
func fromHex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// parseHexTag decodes exactly 64 hex digits (either case) into dst without
// allocating.
func parseHexTag(s string, dst *[mac.Size]byte) bool {
	if len(s) != 2*mac.Size {
		return false
	}
	for i := range dst {
		hi, ok1 := fromHex(s[2*i])
		lo, ok2 := fromHex(s[2*i+1])
		if !ok1 || !ok2 {
			return false
		}
		dst[i] = hi<<4 | lo
	}
	return true
}
