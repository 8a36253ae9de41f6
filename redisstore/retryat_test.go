package redisstore

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ctoken/ctoken/replay"
)

// TestRetryAt pins that a fenced refusal carries the end of its fence, for a
// shard and for the key space.
func TestRetryAt(t *testing.T) {
	subtests(t, []subtest{
		{"fenced shard", fencedShardRefusalCarriesTheFenceEnd},
		{"fenced key space", keySpaceFencedRefusalCarriesTheFenceEnd},
	})
}

// A fenced shard's refusal says when the fence opens (replay.RetryAt): one
// key space lifetime away (lifetime.go). Every shard's marker is deleted
// on a real redis-server, so the next call of each shard finds the loss
// and fences it.
func fencedShardRefusalCarriesTheFenceEnd(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const horizon = 2 * time.Hour
	c := newServer(t).client()
	s := provisioned(t, c, Options{Prefix: "retry-at:", Horizon: horizon, Logger: quietLogger()})
	for _, m := range s.tags {
		must(t, c.Del(ctx, m).Err())
	}
	// Redis's clock and this one agree on loopback to well under a second.
	near := func(t *testing.T, at time.Time, want time.Time) {
		t.Helper()
		if d := at.Sub(want); d < -5*time.Second || d > 5*time.Second {
			t.Fatalf("RetryAt %v; want about %v (one key space lifetime from now)", at, want)
		}
	}
	t.Run("Claim", func(t *testing.T) {
		for _, id := range []string{"raised", "raised"} { // the fence raised, then kept
			// The fence lasts the key space's lifetime (lifetime.go): this
			// store's one-minute claims, with their headroom.
			want := time.Now().Add(s.lifetimeOf(time.Minute))
			err := wantRefused(t, s, id, time.Now().Add(time.Minute), ErrFenced)
			at, ok := replay.RetryAt(err)
			if !ok {
				t.Fatalf("RetryAt(%v) not known", err)
			}
			near(t, at, want)
		}
	})
	t.Run("not fenced: unknown", func(t *testing.T) {
		if _, ok := replay.RetryAt(refuse(ErrClockSkew, whySkew, nil)); ok {
			t.Fatal("RetryAt of a clock skew refusal is known")
		}
	})
	// A lease, the webhook middleware's first step, is shorter than the
	// fence the one-minute claims raised: the fence stays as it is. (The
	// middleware's 503, Retry-After and body from RetryAt: the webhook
	// package's TestMiddlewareStoreRefusalRetryAfterTellsWhenItEnds.)
	t.Run("AcquireLease", func(t *testing.T) {
		_, err := s.AcquireLease(ctx, "msg_fenced", time.Minute)
		at, ok := replay.RetryAt(err)
		if !errors.Is(err, ErrFenced) || !ok {
			t.Fatalf("AcquireLease = %v (RetryAt known: %v); want ErrFenced with its end", err, ok)
		}
		near(t, at, time.Now().Add(s.lifetimeOf(time.Minute)))
	})
}

// A Store made with New on a key space whose every shard is fenced (the
// state after a loss, while applications restart) refuses at the
// key-space check; that refusal must say when the fences end too, not
// leave the middlewares to answer Retry-After: RetryAfter (5 s) for a
// whole horizon.
func keySpaceFencedRefusalCarriesTheFenceEnd(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const horizon = 2 * time.Hour
	c := newServer(t).client()
	prefix := "retry-at-space:"
	s := provisioned(t, c, Options{Prefix: prefix, Horizon: horizon, Logger: quietLogger()})
	want := time.Now().Add(horizon)
	if !s.fenceAll(ctx, false, "review: every shard fenced") {
		t.Fatal("fenceAll failed")
	}
	s.Close()
	n := closing(t, mustNew(t, c, Options{Prefix: prefix, Horizon: horizon, Logger: quietLogger()}))
	err := wantRefused(t, n, "any", time.Now().Add(time.Minute), ErrFenced)
	at, ok := replay.RetryAt(err)
	if !ok {
		t.Fatalf("RetryAt(%v) not known; the fences end at about %v", err, want)
	}
	if d := at.Sub(want); d < -5*time.Second || d > 5*time.Second {
		t.Fatalf("RetryAt %v; want about %v", at, want)
	}
}
