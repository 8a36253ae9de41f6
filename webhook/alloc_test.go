package webhook

import (
	"errors"
	"net/http"
	"testing"
	"time"
)

// Refusing a forged or a stale delivery costs no allocation, under every
// scheme: the rejection errors are preallocated and parsing works in place.
func TestVerifyRejectsForgedAndStaleDeliveriesWithoutAllocating(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are not meaningful under -race")
	}
	clk := newStepClock()
	body := []byte(`{"event":"ping"}`)
	for _, scheme := range []Scheme{HMACSHA256(), GitHub(), StandardWebhooks()} {
		secret := hmacSecret
		if scheme == StandardWebhooks() {
			secret = stdSecret
		}
		cfg := Config{Scheme: scheme, Secrets: []string{secret, stdSecret2}, Now: clk.Now}
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
				t.Fatalf("%v: refusing a %s delivery allocates %v times", scheme, tc.name, n)
			}
		}
	}
}
