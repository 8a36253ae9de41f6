package webhook

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ctoken/ctoken/observe"
)

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

// The same holds for the schemes added for issue 12: a forged, malformed or
// stale delivery is refused without allocating. The one exception is a
// well-formed forged Ed25519 signature, whose verification by
// crypto/ed25519 allocates its failure error: one allocation per
// verification, so one here (one key, one entry).
func TestNewSchemesRejectWithoutAllocating(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are not meaningful under -race")
	}
	for _, obs := range allocObservers {
		for _, ss := range newSchemes() {
			clk := newStepClock()
			s, v := ss.observedPair(t, clk.Now, obs)
			good := signed(t, s, ss.id, ss.body)
			type rejection struct {
				name   string
				h      http.Header
				body   string
				want   error
				allocs float64
			}
			forgedAllocs := 0.0
			if ss.scheme == StandardWebhooksEd25519() {
				forgedAllocs = 1
			}
			malformed := good.Clone()
			malformed.Set(v.p.sigHeader, "v9,"+strings.Repeat("x", 40))
			if ss.scheme == Stripe() {
				malformed.Set(v.p.sigHeader, "t=1,v9="+strings.Repeat("x", 40))
			}
			cases := []rejection{
				{"forged", good, ss.body + " ", ErrSignature, forgedAllocs},
				{"malformed signature", malformed, ss.body, ErrSignature, 0},
				{"no signature", func() http.Header { h := good.Clone(); h.Del(v.p.sigHeader); return h }(), ss.body, ErrSignature, 0},
			}
			if ss.signsTime {
				clk.Advance(-time.Hour)
				stale := signed(t, s, ss.id, ss.body)
				clk.Advance(time.Hour)
				cases = append(cases, rejection{"stale", stale, ss.body, ErrTimestamp, 0})
			}
			for _, tc := range cases {
				if _, err := v.Verify(tc.h, []byte(tc.body)); !errors.Is(err, tc.want) {
					t.Fatalf("%v %s: %v, want %v", ss.scheme, tc.name, err, tc.want)
				}
				body := []byte(tc.body)
				if n := testing.AllocsPerRun(200, func() {
					if _, err := v.Verify(tc.h, body); err == nil {
						t.Fatal("accepted")
					}
				}); n != tc.allocs {
					t.Fatalf("%v, observer %v: refusing a %s delivery allocates %v times, want %v", ss.scheme, obs != nil, tc.name, n, tc.allocs)
				}
			}
		}
	}
}
