package redisstore

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkClaim measures one first claim (a SET NX PXAT round trip) against
// the Redis at CTOKEN_REDIS_ADDR.
func BenchmarkClaim(b *testing.B) {
	s, _ := newTestStore(b)
	ctx := context.Background()
	until := time.Now().Add(time.Minute)
	i := 0
	for b.Loop() {
		i++
		if first, err := s.Claim(ctx, strconv.Itoa(i), until); err != nil || !first {
			b.Fatalf("first = %v, err = %v", first, err)
		}
	}
}

// BenchmarkClaimParallel measures claims from concurrent goroutines sharing
// one client pool.
func BenchmarkClaimParallel(b *testing.B) {
	s, _ := newTestStore(b)
	ctx := context.Background()
	until := time.Now().Add(time.Minute)
	var n atomic.Int64
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if first, err := s.Claim(ctx, strconv.FormatInt(n.Add(1), 10), until); err != nil || !first {
				b.Errorf("first = %v, err = %v", first, err)
				return
			}
		}
	})
}
