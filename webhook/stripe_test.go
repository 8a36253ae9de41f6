package webhook

import (
	"errors"
	"net/http"
	"strings"
	"testing"
)

// TestStripe pins the Stripe scheme.
func TestStripe(t *testing.T) {
	// Empty items in a Stripe-Signature header (a leading, doubled or
	// trailing comma) are skipped like items of unknown keys.
	t.Run("skips empty header items", func(t *testing.T) {
		cfg := Config{Scheme: Stripe(), Secrets: []string{stripeSecret}, Now: newStepClock().Now}
		v := newVerifier(t, cfg)
		body := `{"id":"evt_1"}`
		sig := signed(t, newSigner(t, cfg), "evt_1", body).Get(HeaderStripeSignature)
		tItem, v1Item, ok := strings.Cut(sig, ",")
		if !ok {
			t.Fatalf("test premise: header %q", sig)
		}
		for _, hdr := range []string{
			"," + sig,
			tItem + ",," + v1Item,
			sig + ",",
			",," + tItem + ",,," + v1Item + ",,",
		} {
			h := http.Header{}
			h.Set(HeaderStripeSignature, hdr)
			if _, err := v.Verify(h, []byte(body)); err != nil {
				t.Fatalf("%q: %v", hdr, err)
			}
		}
	})

	// A Stripe-Signature header of exactly MaxSignatureHeaderBytes holding as
	// many well-formed v1 items as fit (the genuine one last) and then one
	// more, empty, v1 item is accepted: the header is not over the cap, every
	// well-formed item is compared, and the item past them is skipped.
	t.Run("header full of v1 items at the cap is accepted", func(t *testing.T) {
		cfg := Config{Scheme: Stripe(), Secrets: []string{stripeSecret}, Now: newStepClock().Now}
		v := newVerifier(t, cfg)
		body := `{"id":"evt_1"}`
		sig := signed(t, newSigner(t, cfg), "evt_1", body).Get(HeaderStripeSignature)
		tItem, v1Item, _ := strings.Cut(sig, ",")
		forged := ",v1=" + strings.Repeat("0", 2*32)
		hdr := tItem + strings.Repeat(forged, maxStripeV1-1) + "," + v1Item
		tail := ",v1=" + strings.Repeat("x", MaxSignatureHeaderBytes-len(hdr)-len(",v1="))
		hdr += tail
		if len(hdr) != MaxSignatureHeaderBytes || maxStripeV1 != 60 {
			t.Fatalf("test premise: %d bytes, maxStripeV1 %d", len(hdr), maxStripeV1)
		}
		h := http.Header{}
		h.Set(HeaderStripeSignature, hdr)
		if _, err := v.Verify(h, []byte(body)); err != nil {
			t.Fatalf("%d-byte header of %d v1 items and an empty one: %v", len(hdr), maxStripeV1, err)
		}
	})

	t.Run("sign refuses an ID the body does not carry", func(t *testing.T) {
		s := newSigner(t, Config{Scheme: Stripe(), Secrets: []string{stripeSecret}})
		for _, tc := range []struct{ name, id, body string }{
			{"another id", "evt_2", `{"id":"evt_1"}`},
			{"no id in the body", "evt_1", `{"object":"event"}`},
			{"body not JSON", "evt_1", `id=evt_1`},
			{"id twice in the body", "evt_1", `{"id":"evt_1","id":"evt_1"}`},
		} {
			h := http.Header{"Keep": {"me"}}
			if err := s.Sign(h, tc.id, []byte(tc.body)); !errors.Is(err, ErrMalformed) || Reason(err) != "id is not the id of the event in the body" {
				t.Fatalf("%s: Sign = %v", tc.name, err)
			}
			if len(h) != 1 {
				t.Fatalf("%s: Sign changed the header: %v", tc.name, h)
			}
		}
	})

	t.Run("signature header over cap refused", func(t *testing.T) {
		clk := newStepClock()
		cfg := Config{Scheme: Stripe(), Secrets: []string{stripeSecret}, Now: clk.Now}
		v := newVerifier(t, cfg)
		body := `{"id":"evt_1"}`
		h := signed(t, newSigner(t, cfg), "evt_1", body)
		sig := h.Get(HeaderStripeSignature)
		// Forged v1 items before the genuine one, up to the cap: all compared.
		junk := ",v1=" + strings.Repeat("0", 64)
		n := (MaxSignatureHeaderBytes - len(sig)) / len(junk)
		at := sig[:strings.Index(sig, ",")] + strings.Repeat(junk, n) + sig[strings.Index(sig, ","):]
		h.Set(HeaderStripeSignature, at)
		if _, err := v.Verify(h, []byte(body)); err != nil || n < MaxSignatures {
			t.Fatalf("%d forged v1 items then the genuine one (%d bytes): %v", n, len(at), err)
		}
		h.Set(HeaderStripeSignature, at+strings.Repeat(",", MaxSignatureHeaderBytes+1-len(at)))
		if _, err := v.Verify(h, []byte(body)); !errors.Is(err, ErrSignature) || Reason(err) != "signature header malformed" {
			t.Fatalf("header over the cap: %v", err)
		}
	})
}
