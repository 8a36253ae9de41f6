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

// HMACSHA256 returns the scheme of Cursor's agent webhooks: the header
// [HeaderWebhookSignature] holds "sha256=" and the hex HMAC-SHA256 of the
// raw body under the secret, and [HeaderWebhookID] the delivery ID;
// [Config.SignatureHeader] and [Config.IDHeader] rename the headers for
// other senders of the same format. Secrets are used as raw bytes.
//
// Neither the ID nor any time is signed, so replay protection rests on the
// replay store alone (see [Config.DedupWindow]), and [Config.Tolerance] is
// refused. A signer signs with the first secret; a verifier accepts any.
func HMACSHA256() Scheme { return schemeHMACSHA256 }

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
	if len(s) != len(sha256Prefix)+2*mac.Size || s[:len(sha256Prefix)] != sha256Prefix {
		return false
	}
	s = s[len(sha256Prefix):]
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

func (s *hmacSHA256) sign(p *params, h http.Header, id string, body []byte, _ time.Time) error {
	h[p.idHeader] = []string{id}
	h[p.sigHeader] = []string{sha256Prefix + hex.EncodeToString(p.set.Load().keys[0].Sum(nil, body))}
	return nil
}
