package webhook

import (
	"net/http"
	"strings"
	"testing"

	"github.com/ctoken/ctoken/observe"
)

func BenchmarkVerify(b *testing.B) {
	body := []byte(strings.Repeat("x", 1024))
	for _, tc := range []struct {
		name   string
		scheme Scheme
		secret string
	}{{"sha256", HMACSHA256(), hmacSecret}, {"standard", StandardWebhooks(), stdSecret}} {
		cfg := Config{Scheme: tc.scheme, Secrets: []string{tc.secret}}
		v := newVerifier(b, cfg)
		h := http.Header{}
		if err := newSigner(b, cfg).Sign(h, "evt-1", body); err != nil {
			b.Fatal(err)
		}
		forged := []byte(strings.Repeat("y", 1024))
		b.Run(tc.name+"/1KiB", func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := v.Verify(h, body); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(tc.name+"/1KiB-forged", func(b *testing.B) {
			b.SetBytes(int64(len(forged)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := v.Verify(h, forged); err == nil {
					b.Fatal("accepted")
				}
			}
		})
	}
}

// BenchmarkVerifyNewSchemes measures Verify for the schemes added for
// issue 12 on a small JSON delivery, accepted and forged. Stripe and
// Slack read the delivery ID from the accepted body, which allocates.
func BenchmarkVerifyNewSchemes(b *testing.B) {
	for _, ss := range newSchemes() {
		s, v := ss.pair(b, nil)
		h := http.Header{}
		if err := s.Sign(h, ss.id, []byte(ss.body)); err != nil {
			b.Fatal(err)
		}
		body, forged := []byte(ss.body), []byte(ss.body+" ")
		b.Run(ss.scheme.String(), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := v.Verify(h, body); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(ss.scheme.String()+"-forged", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := v.Verify(h, forged); err == nil {
					b.Fatal("accepted")
				}
			}
		})
	}
}

// BenchmarkVerifyObserved is BenchmarkVerify's standard/1KiB case with a
// no-op Observer, against which the nil-observer case measures the hook.
func BenchmarkVerifyObserved(b *testing.B) {
	body := []byte(strings.Repeat("x", 1024))
	cfg := Config{Scheme: StandardWebhooks(), Secrets: []string{stdSecret}}
	h := http.Header{}
	if err := newSigner(b, cfg).Sign(h, "evt-1", body); err != nil {
		b.Fatal(err)
	}
	cfg.Observer = observe.ObserverFunc(func(observe.Event) {})
	v := newVerifier(b, cfg)
	b.Run("standard/1KiB", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		b.ReportAllocs()
		for b.Loop() {
			if _, err := v.Verify(h, body); err != nil {
				b.Fatal(err)
			}
		}
	})
}
