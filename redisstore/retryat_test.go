package redisstore

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/ctoken/ctoken/replay"
	"github.com/ctoken/ctoken/webhook"
)

// TestRetryAt pins that a fenced refusal carries the end of its fence, for a
// shard and for the key space.
func TestRetryAt(t *testing.T) {
	subtests(t, []subtest{
		{"fenced shard", fencedShardRefusalCarriesTheFenceEnd},
		{"fenced key space", keySpaceFencedRefusalCarriesTheFenceEnd},
	})
}

// A fenced shard's refusal says when the fence opens (replay.RetryAt), and
// the webhook middleware in front of the store answers 503 with a body
// stating that instant (one key space lifetime away, lifetime.go) and a Retry-After of
// MaxFenceRetryAfter, not its configured RetryAfter. Every shard's marker is deleted on a real redis-server, so
// the next call of each shard finds the loss and fences it.
func fencedShardRefusalCarriesTheFenceEnd(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const horizon = 2 * time.Hour
	srv := newServer(t)
	c := srv.client()
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
			first, err := s.Claim(ctx, id, time.Now().Add(time.Minute))
			if first || !errors.Is(err, ErrFenced) {
				t.Fatalf("claim = %v, %v; want ErrFenced", first, err)
			}
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
	t.Run("webhook middleware", func(t *testing.T) {
		cfg := webhook.Config{Scheme: webhook.StandardWebhooks(), Secrets: []string{whSecret}, Replay: s, Namespace: "endpoint",
			DedupWindow: 30 * time.Minute, RetryAfter: 7 * time.Second}
		v, err := webhook.NewVerifier(cfg)
		must(t, err)
		signer, err := webhook.NewSigner(webhook.Config{Scheme: webhook.StandardWebhooks(), Secrets: []string{whSecret}})
		must(t, err)
		calls := 0
		mw := v.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { calls++ }))
		body := []byte(`{"type":"fenced"}`)
		r := httptest.NewRequest(http.MethodPost, "/hook", bytes.NewReader(body))
		must(t, signer.Sign(r.Header, "msg_fenced", body))
		rec := httptest.NewRecorder()
		mw.ServeHTTP(rec, r)
		if rec.Code != http.StatusServiceUnavailable || calls != 0 {
			t.Fatalf("status %d, handler calls %d; want 503, 0", rec.Code, calls)
		}
		secs, err := strconv.Atoi(rec.Header().Get("Retry-After"))
		if err != nil {
			t.Fatalf("Retry-After %q: %v", rec.Header().Get("Retry-After"), err)
		}
		if want := int(webhook.MaxFenceRetryAfter / time.Second); secs != want {
			t.Fatalf("Retry-After %d; want %d (MaxFenceRetryAfter: the fence ends in 2 h, an operator may reopen sooner), not RetryAfter's 7", secs, want)
		}
		end := regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ`).FindString(rec.Body.String())
		at, err := time.Parse(time.RFC3339, end)
		if err != nil {
			t.Fatalf("body %q; want the fence's end: %v", rec.Body, err)
		}
		// The middleware's first step is a lease, shorter than the fence
		// the one-minute claims raised: the fence stays as it is.
		near(t, at, time.Now().Add(s.lifetimeOf(time.Minute)))
		t.Logf("fenced shard: 503, Retry-After %d, body %q", secs, rec.Body)
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
	srv := newServer(t)
	c := srv.client()
	prefix := "retry-at-space:"
	s := provisioned(t, c, Options{Prefix: prefix, Horizon: horizon, Logger: quietLogger()})
	want := time.Now().Add(horizon)
	if !s.fenceAll(ctx, false, "review: every shard fenced") {
		t.Fatal("fenceAll failed")
	}
	s.Close()
	n := mustNew(t, c, Options{Prefix: prefix, Horizon: horizon, Logger: quietLogger()})
	defer n.Close()
	first, err := n.Claim(ctx, "any", time.Now().Add(time.Minute))
	if first || !errors.Is(err, ErrFenced) {
		t.Fatalf("claim = %v, %v; want ErrFenced", first, err)
	}
	at, ok := replay.RetryAt(err)
	if !ok {
		t.Fatalf("RetryAt(%v) not known; the fences end at about %v", err, want)
	}
	if d := at.Sub(want); d < -5*time.Second || d > 5*time.Second {
		t.Fatalf("RetryAt %v; want about %v", at, want)
	}
}
