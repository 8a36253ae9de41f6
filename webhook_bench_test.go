package ctoken

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

func BenchmarkMemoryReplayStoreClaim(b *testing.B) {
	// Steady state: every claim lives 1 ms of a clock that advances 1 µs per
	// claim, so about 1000 entries are live and one expires per claim.
	now := time.Unix(1_700_000_000, 0)
	s := &MemoryReplayStore{Now: func() time.Time { return now }}
	ctx := context.Background()
	i := 0
	for b.Loop() {
		now = now.Add(time.Microsecond)
		if _, err := s.Claim(ctx, strconv.Itoa(i), now.Add(time.Millisecond)); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

func BenchmarkOneTimeMintAndRedeem(b *testing.B) {
	// The clock advances a second per token, so the store holds about 600
	// live entries (one per token of the last ten minutes) and never fills.
	clk := newStepClock()
	o := newOneTime(b, OneTimeConfig{Now: clk.Now})
	ctx := context.Background()
	for b.Loop() {
		clk.Advance(time.Second)
		tok, err := o.Mint(runClaims)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := o.Redeem(ctx, tok, runClaims); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkWebhookVerify(b *testing.B) {
	body := []byte(strings.Repeat("x", 1024))
	for _, scheme := range []struct {
		name   string
		scheme WebhookScheme
	}{{"sha256", WebhookHMACSHA256}, {"standard", WebhookStandard}} {
		b.Run(scheme.name+"/1KiB", func(b *testing.B) {
			cfg := WebhookConfig{Scheme: scheme.scheme, Secrets: []string{stdSecret}}
			v := newVerifier(b, cfg)
			h := http.Header{}
			if err := newSigner(b, cfg).Sign(h, "evt-1", body); err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				if _, err := v.Verify(h, body); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
