package webhook

import (
	"crypto/hmac"
	"net/http"
	"time"

	"github.com/ctoken/ctoken/internal/mac"
)

// Scheme is a webhook signature scheme: how a sender signs a delivery,
// which headers carry the signature, the delivery ID and (for some schemes)
// a signed timestamp, and what a secret looks like. Its values come from
// this package's functions ([HMACSHA256], [GitHub], [StandardWebhooks]);
// the unexported methods keep the set closed, so new schemes and new
// capabilities can be added without breaking callers.
type Scheme interface {
	// String returns the scheme's name, such as "standard-webhooks".
	String() string

	// parseSecret decodes one configured secret into HMAC key bytes.
	parseSecret(s string) ([]byte, error)
	// configure resolves the header names of cfg into p and refuses
	// options that have no effect under the scheme.
	configure(cfg *Config, p *params) error
	// forbidsDot reports whether a delivery ID may not contain '.'.
	forbidsDot() bool
	// verify checks the signature (and timestamp) of a delivery whose ID
	// has been checked and returns what it verified. It returns only
	// preallocated errors and, returning by value, allocates nothing.
	verify(p *params, h http.Header, body []byte, id string) (verified, error)
	// sign sets the headers authenticating body as delivery id at now.
	sign(p *params, h http.Header, id string, body []byte, now time.Time)
}

// verified is what a scheme's verify established about a delivery.
type verified struct {
	mac [mac.Size]byte // the matching signature (HMAC-SHA256 schemes)
	ts  time.Time      // the signed timestamp (schemes that sign one)
}

// Header names of the schemes.
const (
	// HeaderWebhookSignature is the default signature header of [HMACSHA256]
	// (Cursor's agent webhooks).
	HeaderWebhookSignature = "X-Webhook-Signature"
	// HeaderWebhookID is the default delivery ID header of [HMACSHA256].
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
	// MaxSignatures caps the entries of a Standard Webhooks signature header.
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

// verifyOne reports, in constant time per comparison, whether any key's
// HMAC of the message written by write equals one of the candidate tags.
// Every candidate is compared under every key: there is no early exit.
func verifyOne(keys []*mac.Key, cands [][mac.Size]byte, write func(st *mac.State)) bool {
	matched := false
	for _, k := range keys {
		st := k.Begin()
		write(st)
		tag := st.Tag()
		for i := range cands {
			if equalTag(tag, &cands[i]) {
				matched = true
			}
		}
		k.End(st)
	}
	return matched
}

// equalTag compares two tags in constant time.
func equalTag(a, b *[mac.Size]byte) bool { return hmac.Equal(a[:], b[:]) }
