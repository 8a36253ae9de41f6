package ctoken

import (
	"context"
	"testing"
	"time"
)

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
