package webhook

import (
	"net/http"
	"time"

	"github.com/ctoken/ctoken/internal/b64"
	"github.com/ctoken/ctoken/internal/mac"
	"github.com/ctoken/ctoken/observe"
)

// Header names of [Shopify].
const (
	// HeaderShopifyHmac is the signature header of [Shopify].
	HeaderShopifyHmac = "X-Shopify-Hmac-Sha256"
	// HeaderShopifyWebhookID is the delivery ID header of [Shopify], the
	// same on every retry of a delivery.
	HeaderShopifyWebhookID = "X-Shopify-Webhook-Id"
)

// shopify is Shopify's webhook scheme: the body MAC of [HMACSHA256] (and
// its replay claims) with the tag written in base64.
type shopify struct {
	*hmacSHA256
}

var schemeShopify = &shopify{&hmacSHA256{
	name:         "shopify",
	sigHeader:    HeaderShopifyHmac,
	idHeader:     HeaderShopifyWebhookID,
	fixedHeaders: true,
}}

// Shopify returns Shopify's webhook scheme
// (https://shopify.dev/docs/apps/build/webhooks/subscribe/https):
// [HeaderShopifyHmac] holds the standard base64 (padded) of
// HMAC-SHA256(secret, raw body) under the app's client secret, used as raw
// bytes, and [HeaderShopifyWebhookID] the delivery ID, the same on every
// retry. As under [HMACSHA256], neither the ID nor any time is signed, so
// replay protection rests on the replay store alone, claimed as under
// [HMACSHA256], and [Config.Tolerance] is refused. A signer signs with the
// first secret; a verifier accepts any. The header names are fixed.
func Shopify() Scheme { return schemeShopify }

func (s *shopify) verify(p *params, h http.Header, body []byte, _ string) (verified, error) {
	sig, ok := single(h, p.sigHeader)
	if !ok {
		return verified{}, errSigHeader
	}
	var got [1][mac.Size]byte
	if !parseBase64Tag(sig, &got[0]) {
		return verified{}, errSigMalformed
	}
	key := verifyOne(p.set.Load().keys, got[:], func(st *mac.State) { st.Write(body) })
	if key == observe.KeyNone {
		return verified{}, errSigMismatch
	}
	return verified{key: key}, nil
}

// parseBase64Tag decodes the canonical padded standard base64 of a 32-byte
// tag (44 characters) into dst without allocating.
func parseBase64Tag(s string, dst *[mac.Size]byte) bool {
	if len(s) != sigTextLen {
		return false
	}
	var text [sigTextLen]byte
	var raw [sigTextLen / 4 * 3]byte
	copy(text[:], s)
	if n, err := b64.Std.Decode(raw[:], text[:]); err != nil || n != mac.Size {
		return false
	}
	copy(dst[:], raw[:mac.Size])
	return true
}

func (s *shopify) sign(p *params, h http.Header, id string, body []byte, _ time.Time) error {
	h[p.idHeader] = []string{id}
	h[p.sigHeader] = []string{b64.Std.EncodeToString(p.set.Load().keys[0].Sum(nil, body))}
	return nil
}
