package redisstore

import (
	"context"
	"slices"
	"strconv"
	"testing"
	"time"
)

// The latency benchmarks beside pgstore's (docs/benchmarks.md, "pgstore"):
// one call at a time against the Redis at CTOKEN_REDIS_ADDR, with p50-ns
// and p99-ns per operation.

func reportQuantiles(b *testing.B, ds []time.Duration) {
	if len(ds) == 0 {
		return
	}
	slices.Sort(ds)
	b.ReportMetric(float64(ds[len(ds)/2].Nanoseconds()), "p50-ns")
	b.ReportMetric(float64(ds[len(ds)*99/100].Nanoseconds()), "p99-ns")
}

// BenchmarkClaimLatency measures first claims (one guarded script each)
// with per-claim quantiles.
func BenchmarkClaimLatency(b *testing.B) {
	s, _ := newTestStore(b)
	ctx := context.Background()
	until := time.Now().Add(time.Minute)
	var lat []time.Duration
	i := 0
	for b.Loop() {
		i++
		start := time.Now()
		if first, err := s.Claim(ctx, strconv.Itoa(i), until); err != nil || !first {
			b.Fatalf("first = %v, err = %v", first, err)
		}
		lat = append(lat, time.Since(start))
	}
	reportQuantiles(b, lat)
}

// BenchmarkLeaseAcquireConfirm is a webhook delivery's two store steps:
// AcquireLease of a fresh ID, then ConfirmLease (two scripts).
func BenchmarkLeaseAcquireConfirm(b *testing.B) {
	s, _ := newTestStore(b)
	ctx := context.Background()
	until := time.Now().Add(time.Minute)
	var lat []time.Duration
	i := 0
	for b.Loop() {
		i++
		id := strconv.Itoa(i)
		start := time.Now()
		l, err := s.AcquireLease(ctx, id, time.Minute)
		if err != nil || l.Token == "" {
			b.Fatal(l, err)
		}
		if err := s.ConfirmLease(ctx, id, l.Token, until); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
	}
	reportQuantiles(b, lat)
}
