package webhook

import (
	"encoding/base64"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ctoken/ctoken/observe"
)

func TestWebhookVerifyReturnsNothingOfARefusedDelivery(t *testing.T) {
	for _, scheme := range []Scheme{HMACSHA256(), StandardWebhooks()} {
		secret := "It's a Secret to Everybody"
		if scheme == StandardWebhooks() {
			secret = "whsec_" + base64.StdEncoding.EncodeToString([]byte("0123456789abcdef01234567"))
		}
		v, err := NewVerifier(Config{Scheme: scheme, Secrets: []string{secret}})
		if err != nil {
			t.Fatal(err)
		}
		h := http.Header{}
		h.Set("X-Webhook-ID", "delivery-1")
		h.Set("X-Webhook-Signature", "sha256="+strings.Repeat("0", 64))
		h.Set("webhook-id", "delivery-1")
		h.Set("webhook-timestamp", "1700000000")
		h.Set("webhook-signature", "v1,"+base64.StdEncoding.EncodeToString(make([]byte, 32)))
		d, err := v.Verify(h, []byte("body"))
		if !errors.Is(err, ErrSignature) {
			t.Fatalf("scheme %v: error %v, want ErrSignature", scheme, err)
		}
		if d != (Delivery{}) {
			t.Fatalf("scheme %v: refused delivery returned %+v", scheme, d)
		}
	}
}

// IDs of 256 bytes are accepted and 257 refused; every printable ASCII
// character but space is allowed ('~' and '!' at the edges), DEL and
// controls are not.
func TestDeliveryIDLimits(t *testing.T) {
	clk := newStepClock()
	for _, scheme := range []Scheme{HMACSHA256(), StandardWebhooks()} {
		secret := hmacSecret
		if scheme == StandardWebhooks() {
			secret = stdSecret
		}
		cfg := Config{Scheme: scheme, Secrets: []string{secret}, Now: clk.Now}
		v := newVerifier(t, cfg)
		s := newSigner(t, cfg)
		for _, id := range []string{strings.Repeat("a", MaxIDBytes), "evt~1", "!", "~"} {
			if _, err := v.Verify(signed(t, s, id, "x"), []byte("x")); err != nil {
				t.Fatalf("%v: id %q: %v", scheme, id, err)
			}
		}
		for _, id := range []string{strings.Repeat("a", MaxIDBytes+1), "evt\x7f", "evt\x00", "a b", "\t"} {
			h := signed(t, s, "evt-1", "x")
			h.Set(v.p.idHeader, id)
			if _, err := v.Verify(h, []byte("x")); !errors.Is(err, ErrMalformed) {
				t.Fatalf("%v: id %q: %v, want ErrMalformed", scheme, id, err)
			}
			if err := s.Sign(http.Header{}, id, nil); !errors.Is(err, ErrMalformed) {
				t.Fatalf("%v: Sign(id %q) = %v, want ErrMalformed", scheme, id, err)
			}
		}
	}
}

// allocObservers are the observers the allocation tests run under: none,
// and one that does nothing. Neither may add an allocation.
var allocObservers = []observe.Observer{nil, observe.ObserverFunc(func(observe.Event) {})}

// Refusing a forged or a stale delivery costs no allocation, under every
// scheme, with no observer and with one: the rejection errors are
// preallocated, parsing works in place, and an event is a value.
func TestVerifyRejectsForgedAndStaleDeliveriesWithoutAllocating(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are not meaningful under -race")
	}
	clk := newStepClock()
	body := []byte(`{"event":"ping"}`)
	for _, obs := range allocObservers {
		for _, scheme := range []Scheme{HMACSHA256(), GitHub(), StandardWebhooks()} {
			secret := hmacSecret
			if scheme == StandardWebhooks() {
				secret = stdSecret
			}
			cfg := Config{Scheme: scheme, Secrets: []string{secret, stdSecret2}, Now: clk.Now, Observer: obs}
			v := newVerifier(t, cfg)
			good := signed(t, newSigner(t, cfg), "evt-1", string(body))

			forged := good.Clone()
			forgedBody := []byte(`{"event":"pong"}`)
			cases := []struct {
				name string
				h    http.Header
				body []byte
				want error
			}{{"forged", forged, forgedBody, ErrSignature}}
			if scheme == StandardWebhooks() {
				clk.Advance(-time.Hour)
				stale := signed(t, newSigner(t, cfg), "evt-2", string(body))
				clk.Advance(time.Hour)
				cases = append(cases, struct {
					name string
					h    http.Header
					body []byte
					want error
				}{"stale", stale, body, ErrTimestamp})
			}
			for _, tc := range cases {
				if _, err := v.Verify(tc.h, tc.body); !errors.Is(err, tc.want) {
					t.Fatalf("%v %s: %v, want %v", scheme, tc.name, err, tc.want)
				}
				if n := testing.AllocsPerRun(200, func() {
					if _, err := v.Verify(tc.h, tc.body); err == nil {
						t.Fatal("accepted")
					}
				}); n != 0 {
					t.Fatalf("%v, observer %v: refusing a %s delivery allocates %v times", scheme, obs != nil, tc.name, n)
				}
			}
		}
	}
}
