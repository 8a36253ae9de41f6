package webhook

import (
	"net/http"
	"time"

	"github.com/ctoken/ctoken/internal/b64"
	"github.com/ctoken/ctoken/internal/mac"
	"github.com/ctoken/ctoken/internal/reason"
	"github.com/ctoken/ctoken/observe"
)

// Header names of [Shopify] and [ShopifyByEvent]. Shopify's webhooks
// send the X- names; its Events deliveries send the same headers without
// the X- prefix. A verifier accepts either name of each header (see
// [Shopify]); a signer writes the X- names.
const (
	// HeaderShopifyHmac is the signature header of [Shopify].
	HeaderShopifyHmac = "X-Shopify-Hmac-Sha256"
	// HeaderShopifyWebhookID is the delivery ID header of [Shopify], the
	// same on every retry of a delivery.
	HeaderShopifyWebhookID = "X-Shopify-Webhook-Id"
	// HeaderShopifyEventID is the event ID header of [ShopifyByEvent]: the
	// same on every delivery of one event, to each of the app's
	// subscriptions to its topic.
	HeaderShopifyEventID = "X-Shopify-Event-Id"
	// HeaderShopifyEventsHmac is the signature header of Shopify's Events
	// deliveries, accepted in place of [HeaderShopifyHmac].
	HeaderShopifyEventsHmac = "Shopify-Hmac-Sha256"
	// HeaderShopifyEventsWebhookID is the delivery ID header of Shopify's
	// Events deliveries, accepted in place of [HeaderShopifyWebhookID].
	HeaderShopifyEventsWebhookID = "Shopify-Webhook-Id"
	// HeaderShopifyEventsEventID is the un-prefixed event ID header,
	// accepted in place of [HeaderShopifyEventID].
	HeaderShopifyEventsEventID = "Shopify-Event-Id"
)

// shopify is Shopify's webhook scheme: the body MAC of [HMACSHA256] (and
// its replay claims) with the tag written in base64. sigAlt and idAlt are
// the other names of the signature and ID headers.
type shopify struct {
	*hmacSHA256
	sigAlt, idAlt string
	// byEvent: the ID is the event ID, and the Dedup policy must use it.
	byEvent bool
}

var (
	schemeShopify = &shopify{hmacSHA256: &hmacSHA256{
		name:         "shopify",
		sigHeader:    HeaderShopifyHmac,
		idHeader:     HeaderShopifyWebhookID,
		fixedHeaders: true,
	}, sigAlt: HeaderShopifyEventsHmac, idAlt: HeaderShopifyEventsWebhookID}
	schemeShopifyByEvent = &shopify{hmacSHA256: &hmacSHA256{
		name:         "shopify-event",
		sigHeader:    HeaderShopifyHmac,
		idHeader:     HeaderShopifyEventID,
		fixedHeaders: true,
	}, sigAlt: HeaderShopifyEventsHmac, idAlt: HeaderShopifyEventsEventID, byEvent: true}
)

// errEventDedup refuses [ShopifyByEvent] under a policy that ignores the
// event ID.
var errEventDedup = reason.New(ErrConfig, "ShopifyByEvent needs Dedup set to DedupID or DedupIDAndSignature: the default (the body's signature) ignores the event ID")

// Shopify returns Shopify's webhook scheme
// (https://shopify.dev/docs/apps/build/webhooks/subscribe/https):
// [HeaderShopifyHmac] holds the standard base64 (padded) of
// HMAC-SHA256(secret, raw body) under the app's client secret, used as raw
// bytes, and [HeaderShopifyWebhookID] the delivery ID, the same on every
// retry. As under [HMACSHA256], neither the ID nor any time is signed, so
// replay protection rests on the replay store alone, claimed as under
// [HMACSHA256], and [Config.Tolerance] is refused. A signer signs with the
// first secret; a verifier accepts any. The header names are fixed.
//
// Shopify's Events deliveries
// (https://shopify.dev/docs/apps/build/events/verify-deliveries) carry the
// same signature and ID without the X- prefix: a verifier accepts
// [HeaderShopifyEventsHmac] for [HeaderShopifyHmac] and
// [HeaderShopifyEventsWebhookID] for [HeaderShopifyWebhookID]. A header
// sent under both names must carry the same single value under each;
// otherwise the delivery is refused as a repeated header is
// ([ErrSignature] for the signature, [ErrMalformed] for the ID).
// [Delivery.ID] is the ID under whichever name it came.
func Shopify() Scheme { return schemeShopify }

// ShopifyByEvent returns [Shopify] keyed by the event rather than the
// delivery: the ID is [HeaderShopifyEventID] (or
// [HeaderShopifyEventsEventID]), which Shopify sends unchanged on every
// delivery of one event, also to each of several subscriptions to the same
// topic, where each subscription's delivery has its own
// [HeaderShopifyWebhookID]. Shopify's duplicate guidance
// (https://shopify.dev/docs/apps/build/webhooks/ignore-duplicates) names
// this header. A [Verifier] requires [Config.Dedup] set to [DedupID] (one
// event is processed once, whichever subscription delivers it first) or
// [DedupIDAndSignature] (one event and one body); anything else is
// [ErrConfig], since the default policy would ignore the event ID. The
// event ID is not signed, so, as [DedupID] says, a captured delivery sent
// again under a fresh event ID is processed again. Signatures and secrets
// are those of [Shopify]; its name in metrics and logs is
// "shopify-event", and its deliveries never share store entries with
// [Shopify]'s.
func ShopifyByEvent() Scheme { return schemeShopifyByEvent }

// configure is [hmacSHA256.configure] plus the alternative header names
// and, for [ShopifyByEvent], the policy check.
func (s *shopify) configure(cfg *Config, p *params) error {
	if err := s.hmacSHA256.configure(cfg, p); err != nil {
		return err
	}
	if s.byEvent && !p.signer && cfg.Dedup != DedupID && cfg.Dedup != DedupIDAndSignature {
		return errEventDedup
	}
	p.sigAlt, p.idAlt = s.sigAlt, s.idAlt
	return nil
}

// either returns the one non-empty value of the header with canonical key
// name or, when alt is set, of its other name alt: a header present under
// one name is read as [single] reads it; present under both, each must
// hold one non-empty value and the two must be equal. Absent under both
// is refused.
func either(h http.Header, name, alt string) (string, bool) {
	if alt == "" || len(h[alt]) == 0 {
		return single(h, name)
	}
	if len(h[name]) == 0 {
		return single(h, alt)
	}
	v, ok := single(h, name)
	// w is "" when alt is repeated or empty: never equal to a value single
	// accepts.
	w, _ := single(h, alt)
	if !ok || v != w {
		return "", false
	}
	return v, true
}

func (s *shopify) verify(p *params, h http.Header, body []byte, _ string) (verified, error) {
	sig, ok := either(h, p.sigHeader, p.sigAlt)
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
