package webhook

import (
	"encoding/base64"
	"errors"
	"net/http"
	"strings"
	"testing"
)

// A Shopify tag is the base64 of exactly 32 bytes: 44 characters holding 33
// bytes whose first 32 are the genuine MAC are refused.
func TestShopifyRefusesTagOfWrongLength(t *testing.T) {
	cfg := Config{Scheme: Shopify(), Secrets: []string{"shopify-secret"}}
	v, s := newVerifier(t, cfg), newSigner(t, cfg)
	body := []byte(`{"id":1}`)
	h := http.Header{}
	if err := s.Sign(h, "delivery-1", body); err != nil {
		t.Fatal(err)
	}
	if _, err := v.Verify(h, body); err != nil {
		t.Fatalf("genuine delivery refused: %v", err)
	}
	tag, err := base64.StdEncoding.DecodeString(h.Get(HeaderShopifyHmac))
	if err != nil {
		t.Fatal(err)
	}
	long := base64.StdEncoding.EncodeToString(append(tag, 0))
	if len(long) != len(h.Get(HeaderShopifyHmac)) {
		t.Fatalf("test premise: %d characters", len(long))
	}
	h.Set(HeaderShopifyHmac, long)
	if _, err := v.Verify(h, body); !errors.Is(err, ErrSignature) {
		t.Fatalf("33-byte tag: err = %v, want ErrSignature", err)
	}
}

// shopifyHeaders signs body as delivery id under scheme and returns the
// signature and the ID, as the signer writes them (the X- names).
func shopifyHeaders(t *testing.T, scheme Scheme, id, body string) (sig string) {
	t.Helper()
	h := signed(t, newSigner(t, Config{Scheme: scheme, Secrets: []string{shopifySecret}}), id, body)
	return h.Get(HeaderShopifyHmac)
}

func TestShopifyHeaderNamesAreCanonical(t *testing.T) {
	for _, name := range []string{HeaderShopifyHmac, HeaderShopifyWebhookID, HeaderShopifyEventID,
		HeaderShopifyEventsHmac, HeaderShopifyEventsWebhookID, HeaderShopifyEventsEventID} {
		if http.CanonicalHeaderKey(name) != name {
			t.Errorf("%q is not canonical: headers are looked up by their canonical key", name)
		}
	}
}

// TestShopifyAcceptsTheEventsHeaderNames: Shopify's Events deliveries send
// the signature and the delivery ID without the X- prefix; each header is
// accepted under either name, and under both when the values agree.
func TestShopifyAcceptsTheEventsHeaderNames(t *testing.T) {
	const id, body = "b54557e4-bdd9", `{"id":820982911946154508}`
	sig := shopifyHeaders(t, Shopify(), id, body)
	v := newVerifier(t, Config{Scheme: Shopify(), Secrets: []string{shopifySecret}})
	for _, tc := range []struct {
		name string
		h    http.Header
	}{
		{"X- names", http.Header{HeaderShopifyHmac: {sig}, HeaderShopifyWebhookID: {id}}},
		{"Events names", http.Header{HeaderShopifyEventsHmac: {sig}, HeaderShopifyEventsWebhookID: {id}}},
		{"Events signature, X- ID", http.Header{HeaderShopifyEventsHmac: {sig}, HeaderShopifyWebhookID: {id}}},
		{"X- signature, Events ID", http.Header{HeaderShopifyHmac: {sig}, HeaderShopifyEventsWebhookID: {id}}},
		{"both names, same values", http.Header{HeaderShopifyHmac: {sig}, HeaderShopifyEventsHmac: {sig},
			HeaderShopifyWebhookID: {id}, HeaderShopifyEventsWebhookID: {id}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := v.Verify(tc.h, []byte(body))
			if err != nil || d.ID != id {
				t.Fatalf("Verify: %v, ID %q; want %q", err, d.ID, id)
			}
		})
	}
}

// TestShopifyRefusesAmbiguousHeaderNames: a header under both names with
// values that differ, or repeated or empty under either, is refused as a
// repeated header is; a header under neither name is missing.
func TestShopifyRefusesAmbiguousHeaderNames(t *testing.T) {
	const id, body = "b54557e4-bdd9", `{"id":820982911946154508}`
	sig := shopifyHeaders(t, Shopify(), id, body)
	other := shopifyHeaders(t, Shopify(), id, body+" ")
	v := newVerifier(t, Config{Scheme: Shopify(), Secrets: []string{shopifySecret}})
	for _, tc := range []struct {
		name string
		h    http.Header
		want error
	}{
		{"signatures differ", http.Header{HeaderShopifyHmac: {sig}, HeaderShopifyEventsHmac: {other}, HeaderShopifyWebhookID: {id}}, errSigHeader},
		{"signatures differ, other order", http.Header{HeaderShopifyHmac: {other}, HeaderShopifyEventsHmac: {sig}, HeaderShopifyWebhookID: {id}}, errSigHeader},
		{"X- signature repeated", http.Header{HeaderShopifyHmac: {sig, sig}, HeaderShopifyEventsHmac: {sig}, HeaderShopifyWebhookID: {id}}, errSigHeader},
		{"Events signature repeated", http.Header{HeaderShopifyHmac: {sig}, HeaderShopifyEventsHmac: {sig, sig}, HeaderShopifyWebhookID: {id}}, errSigHeader},
		{"Events signature repeated alone", http.Header{HeaderShopifyEventsHmac: {sig, sig}, HeaderShopifyWebhookID: {id}}, errSigHeader},
		{"X- signature empty", http.Header{HeaderShopifyHmac: {""}, HeaderShopifyEventsHmac: {sig}, HeaderShopifyWebhookID: {id}}, errSigHeader},
		{"Events signature empty", http.Header{HeaderShopifyHmac: {sig}, HeaderShopifyEventsHmac: {""}, HeaderShopifyWebhookID: {id}}, errSigHeader},
		{"no signature", http.Header{HeaderShopifyWebhookID: {id}}, errSigHeader},
		{"IDs differ", http.Header{HeaderShopifyHmac: {sig}, HeaderShopifyWebhookID: {id}, HeaderShopifyEventsWebhookID: {id + "x"}}, errIDHeader},
		{"Events ID repeated", http.Header{HeaderShopifyHmac: {sig}, HeaderShopifyWebhookID: {id}, HeaderShopifyEventsWebhookID: {id, id}}, errIDHeader},
		{"no ID", http.Header{HeaderShopifyHmac: {sig}}, errIDHeader},
		{"Events signature of another body", http.Header{HeaderShopifyEventsHmac: {other}, HeaderShopifyEventsWebhookID: {id}}, errSigMismatch},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := v.Verify(tc.h, []byte(body))
			if err != tc.want || d != (Delivery{}) {
				t.Fatalf("Verify: %v, %+v; want %v and no delivery", err, d, tc.want)
			}
		})
	}
}

// TestEitherHeaderName pins either's rules directly, including the one
// name of every other scheme (alt empty).
func TestEitherHeaderName(t *testing.T) {
	const a, b = "A-Name", "B-Name"
	for _, tc := range []struct {
		name string
		h    http.Header
		alt  string
		want string
		ok   bool
	}{
		{"no alt: the name", http.Header{a: {"1"}, b: {"2"}}, "", "1", true},
		{"no alt: missing", http.Header{b: {"2"}}, "", "", false},
		{"name only", http.Header{a: {"1"}}, b, "1", true},
		{"alt only", http.Header{b: {"2"}}, b, "2", true},
		{"both equal", http.Header{a: {"3"}, b: {"3"}}, b, "3", true},
		{"both differ", http.Header{a: {"1"}, b: {"2"}}, b, "", false},
		{"name repeated", http.Header{a: {"3", "3"}, b: {"3"}}, b, "", false},
		{"alt repeated", http.Header{a: {"3"}, b: {"3", "3"}}, b, "", false},
		{"alt empty value", http.Header{a: {"3"}, b: {""}}, b, "", false},
		{"name empty value", http.Header{a: {""}, b: {"3"}}, b, "", false},
		{"both empty values", http.Header{a: {""}, b: {""}}, b, "", false},
		{"both repeated", http.Header{a: {"3", "3"}, b: {"3", "3"}}, b, "", false},
		{"alt empty list", http.Header{a: {"3"}, b: {}}, b, "3", true},
		{"name empty list", http.Header{a: {}, b: {"2"}}, b, "2", true},
		{"neither", http.Header{}, b, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := either(tc.h, a, tc.alt)
			if got != tc.want || ok != tc.ok {
				t.Fatalf("either = %q, %v; want %q, %v", got, ok, tc.want, tc.ok)
			}
		})
	}
}

// TestShopifyByEventProcessesOneEventOnceAcrossSubscriptions: one event
// delivered to two subscriptions (each delivery its own webhook ID, the
// bodies differing) runs the handler once under DedupID; another event
// runs it again. Under Shopify's default policy both deliveries run.
func TestShopifyByEventProcessesOneEventOnceAcrossSubscriptions(t *testing.T) {
	deliveries := []struct{ webhookID, eventID, body string }{
		{"wh-sub-1", "evt-1", `{"id":1,"fields":"all"}`},
		{"wh-sub-2", "evt-1", `{"id":1}`},
		{"wh-sub-1", "evt-2", `{"id":2}`},
	}
	for _, tc := range []struct {
		name  string
		cfg   Config
		calls int32
		dups  []string
	}{
		{"ShopifyByEvent, DedupID", Config{Scheme: ShopifyByEvent(), Dedup: DedupID}, 2, []string{"evt-1"}},
		{"ShopifyByEvent, DedupIDAndSignature", Config{Scheme: ShopifyByEvent(), Dedup: DedupIDAndSignature}, 3, nil},
		{"Shopify, default", Config{Scheme: Shopify()}, 3, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var dups []string
			tc.cfg.Secrets = []string{shopifySecret}
			tc.cfg.OnDuplicate = func(_ *http.Request, d Delivery) { dups = append(dups, d.ID) }
			next := &recordingHandler{}
			mw := newVerifier(t, tc.cfg).Middleware(next)
			for _, d := range deliveries {
				h := http.Header{
					HeaderShopifyEventsHmac:      {shopifyHeaders(t, Shopify(), d.webhookID, d.body)},
					HeaderShopifyEventsWebhookID: {d.webhookID},
					HeaderShopifyEventID:         {d.eventID},
				}
				if rec := deliver(mw, h, d.body); rec.Code != http.StatusOK {
					t.Fatalf("%s/%s: status %d", d.webhookID, d.eventID, rec.Code)
				}
			}
			if next.calls.Load() != tc.calls || strings.Join(dups, ",") != strings.Join(tc.dups, ",") {
				t.Fatalf("handler ran %d times (want %d), duplicates %q (want %q)", next.calls.Load(), tc.calls, dups, tc.dups)
			}
		})
	}
}

// TestShopifyByEventReadsTheEventIDUnderEitherName checks the delivery's ID
// is the event ID, not the webhook ID, under both names.
func TestShopifyByEventReadsTheEventIDUnderEitherName(t *testing.T) {
	const body = `{"id":7}`
	v := newVerifier(t, Config{Scheme: ShopifyByEvent(), Secrets: []string{shopifySecret}, Dedup: DedupID})
	sig := shopifyHeaders(t, ShopifyByEvent(), "evt-7", body)
	for _, name := range []string{HeaderShopifyEventID, HeaderShopifyEventsEventID} {
		t.Run(name, func(t *testing.T) {
			h := http.Header{HeaderShopifyHmac: {sig}, HeaderShopifyWebhookID: {"wh-1"}, name: {"evt-7"}}
			if d, err := v.Verify(h, []byte(body)); err != nil || d.ID != "evt-7" {
				t.Fatalf("Verify: %v, ID %q; want evt-7", err, d.ID)
			}
		})
	}
	h := http.Header{HeaderShopifyHmac: {sig}, HeaderShopifyWebhookID: {"evt-7"}}
	if _, err := v.Verify(h, []byte(body)); err != errIDHeader {
		t.Fatalf("only a webhook ID: %v, want %v", err, errIDHeader)
	}
}

// TestShopifyByEventRefusesAPolicyThatIgnoresTheEventID: the verifier needs
// DedupID or DedupIDAndSignature; a signer takes no policy and writes the
// event ID under the X- name.
func TestShopifyByEventRefusesAPolicyThatIgnoresTheEventID(t *testing.T) {
	for _, tc := range []struct {
		dedup Dedup
		want  error
	}{
		{DedupDefault, errEventDedup},
		{DedupSignature, errEventDedup},
		{DedupID, nil},
		{DedupIDAndSignature, nil},
	} {
		t.Run(tc.dedup.String(), func(t *testing.T) {
			_, err := NewVerifier(Config{Scheme: ShopifyByEvent(), Secrets: []string{shopifySecret}, Dedup: tc.dedup})
			if err != tc.want {
				t.Fatalf("NewVerifier: %v, want %v", err, tc.want)
			}
			if err != nil && !errors.Is(err, ErrConfig) {
				t.Fatalf("%v does not match ErrConfig", err)
			}
			if _, err := NewVerifier(Config{Scheme: Shopify(), Secrets: []string{shopifySecret}, Dedup: tc.dedup}); err != nil {
				t.Fatalf("Shopify takes every policy: %v", err)
			}
		})
	}
	h := signed(t, newSigner(t, Config{Scheme: ShopifyByEvent(), Secrets: []string{shopifySecret}}), "evt-9", "{}")
	if h.Get(HeaderShopifyEventID) != "evt-9" || h.Get(HeaderShopifyHmac) == "" || len(h) != 2 {
		t.Fatalf("signer wrote %v", h)
	}
	if _, err := NewVerifier(Config{Scheme: ShopifyByEvent(), Secrets: []string{shopifySecret}, Dedup: DedupID, IDHeader: "X-Other"}); err != errHeadersUnused {
		t.Fatalf("IDHeader under ShopifyByEvent: %v, want %v", err, errHeadersUnused)
	}
	if ShopifyByEvent().String() != "shopify-event" || Shopify().String() != "shopify" {
		t.Fatalf("names %q, %q", ShopifyByEvent(), Shopify())
	}
}
