package webhook

import (
	"encoding/hex"
	"net/http"
	"strings"
	"time"

	"github.com/ctoken/ctoken/internal/mac"
	"github.com/ctoken/ctoken/observe"
)

// hmacSHA256 is the scheme of Cursor's agent webhooks and of GitHub: a
// header "sha256=<hex>" holding HMAC-SHA256(secret, raw body), and a
// delivery ID in a second header.
type hmacSHA256 struct {
	name                string
	sigHeader, idHeader string
	fixedHeaders        bool
}

var (
	schemeHMACSHA256 = &hmacSHA256{name: "hmac-sha256", sigHeader: HeaderWebhookSignature, idHeader: HeaderWebhookID}
	schemeCursor     = &hmacSHA256{name: "cursor", sigHeader: HeaderWebhookSignature, idHeader: HeaderWebhookID, fixedHeaders: true}
	schemeGitHub     = &hmacSHA256{name: "github", sigHeader: HeaderGitHubSignature, idHeader: HeaderGitHubDelivery, fixedHeaders: true}
)

var (
	_ Scheme = (*hmacSHA256)(nil)
	_ Scheme = (*standard)(nil)
	_ Scheme = (*standardEd25519)(nil)
	_ Scheme = (*stripe)(nil)
	_ Scheme = (*slack)(nil)
	_ Scheme = (*shopify)(nil)
)

// HMACSHA256 returns the generic scheme Cursor's agent webhooks use (see
// [Cursor]): the header [HeaderWebhookSignature] holds "sha256=" and the
// hex HMAC-SHA256 of the raw body under the secret (hex of either case),
// and [HeaderWebhookID] the delivery ID; [Config.SignatureHeader] and
// [Config.IDHeader] rename the headers for other senders of the same
// format. Secrets are used as raw bytes.
//
// Neither the ID nor any time is signed, so replay protection rests on the
// replay store alone (see [Config.Dedup] and [Config.DedupWindow]), and
// [Config.Tolerance] is refused. A signer signs with the first secret; a
// verifier accepts any.
func HMACSHA256() Scheme { return schemeHMACSHA256 }

// Cursor returns the scheme of Cursor's agent webhooks: [HMACSHA256] under
// Cursor's fixed headers, [HeaderWebhookSignature] ("sha256=<hex>") and
// [HeaderWebhookID] (the delivery ID, which [Delivery.ID] reports);
// [Config.SignatureHeader] and [Config.IDHeader] are refused. It verifies
// and signs exactly as HMACSHA256 does; only its name ("cursor", in
// metrics and logs) and its fixed headers differ.
//
// The X-Webhook-ID header is not signed. So by default ([DedupDefault],
// which is [DedupSignature] here) a Verifier's middleware treats copies
// with the same body as one delivery within [Config.DedupWindow]: a retry
// that resends the body is acknowledged without running the handler
// again, and so is a captured body replayed under a new X-Webhook-ID.
// [DedupID] treats copies with the same X-Webhook-ID as one instead, which
// lets a captured body through again under a fresh ID.
func Cursor() Scheme { return schemeCursor }

// GitHub returns GitHub's webhook scheme: [HMACSHA256] under the fixed
// headers [HeaderGitHubSignature] and [HeaderGitHubDelivery].
func GitHub() Scheme { return schemeGitHub }

func (s *hmacSHA256) String() string { return s.name }

func (s *hmacSHA256) parseSecret(secret string) ([]byte, error) {
	if secret == "" {
		return nil, errSecretEmpty
	}
	return []byte(secret), nil
}

func (s *hmacSHA256) loadKeys(ks *keySet, secrets []string, _ bool) error {
	return loadHMACKeys(ks, secrets, s.parseSecret)
}

func (s *hmacSHA256) configure(cfg *Config, p *params) error {
	if cfg.Tolerance != 0 {
		return errToleranceUnused
	}
	p.sigHeader, p.idHeader = s.sigHeader, s.idHeader
	if cfg.SignatureHeader != "" || cfg.IDHeader != "" {
		if s.fixedHeaders {
			return errHeadersUnused
		}
		if cfg.SignatureHeader != "" {
			p.sigHeader = cfg.SignatureHeader
		}
		if cfg.IDHeader != "" {
			p.idHeader = cfg.IDHeader
		}
	}
	if !validHeaderName(p.sigHeader) || !validHeaderName(p.idHeader) ||
		strings.EqualFold(p.sigHeader, p.idHeader) {
		return errHeaderInvalid
	}
	return nil
}

func (s *hmacSHA256) forbidsDot() bool { return false }

const sha256Prefix = "sha256="

func (s *hmacSHA256) verify(p *params, h http.Header, body []byte, _ string) (verified, error) {
	sig, ok := single(h, p.sigHeader)
	if !ok {
		return verified{}, errSigHeader
	}
	var got [1][mac.Size]byte
	if !parseSHA256Signature(sig, &got[0]) {
		return verified{}, errSigMalformed
	}
	key := verifyOne(p.set.Load().keys, got[:], func(st *mac.State) { st.Write(body) })
	if key == observe.KeyNone {
		return verified{}, errSigMismatch
	}
	return verified{key: key}, nil
}

// parseSHA256Signature parses "sha256=<64 hex digits>" (hex in either case)
// into dst without allocating.
func parseSHA256Signature(s string, dst *[mac.Size]byte) bool {
	return len(s) == len(sha256Prefix)+2*mac.Size && s[:len(sha256Prefix)] == sha256Prefix &&
		parseHexTag(s[len(sha256Prefix):], dst)
}

func (s *hmacSHA256) sign(p *params, h http.Header, id string, body []byte, _ time.Time) error {
	h[p.idHeader] = []string{id}
	h[p.sigHeader] = []string{sha256Prefix + hex.EncodeToString(p.set.Load().keys[0].Sum(nil, body))}
	return nil
}
