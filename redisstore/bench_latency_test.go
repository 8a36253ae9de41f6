package redisstore

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"
)

// The latency benchmarks beside pgstore's (docs/benchmarks.md, "pgstore"):
// one call at a time against the Redis at CTOKEN_REDIS_ADDR, with p50-ns
// and p99-ns per operation.

// latency runs step once per iteration on a fresh ID, timing each run.
func latency(b *testing.B, step func(ctx context.Context, s *Store, id string, until time.Time) error) {
	s, _ := newTestStore(b)
	ctx := context.Background()
	until := time.Now().Add(time.Minute)
	var lat []time.Duration
	i := 0
	for b.Loop() {
		i++
		start := time.Now()
		must(b, step(ctx, s, strconv.Itoa(i), until))
		lat = append(lat, time.Since(start))
	}
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds()), "p50-ns")
	b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds()), "p99-ns")
}

// BenchmarkClaimLatency measures first claims (one guarded script each)
// with per-claim quantiles.
func BenchmarkClaimLatency(b *testing.B) {
	latency(b, func(ctx context.Context, s *Store, id string, until time.Time) error {
		if first, err := s.Claim(ctx, id, until); err != nil || !first {
			return fmt.Errorf("first = %v, err = %v", first, err)
		}
		return nil
	})
}

// BenchmarkLeaseAcquireConfirm is a webhook delivery's two store steps:
// AcquireLease of a fresh ID, then ConfirmLease (two scripts).
func BenchmarkLeaseAcquireConfirm(b *testing.B) {
	latency(b, func(ctx context.Context, s *Store, id string, until time.Time) error {
		l, err := s.AcquireLease(ctx, id, time.Minute)
		if err != nil || l.Token == "" {
			return fmt.Errorf("AcquireLease = %+v, %v", l, err)
		}
		return s.ConfirmLease(ctx, id, l.Token, until)
	})
}
