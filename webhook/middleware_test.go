package webhook

import (
	"net/http"
	"testing"
	"time"

	"github.com/ctoken/ctoken/replay"
)

// TestMiddlewareSendsRetryAfterWithEvery503: a store failure gets
// Config.RetryAfter in whole seconds rounded up (DefaultRetryAfter when
// zero), a copy of a delivery in progress the seconds its lease may still
// run; no other refusal carries the header.
func TestMiddlewareSendsRetryAfterWithEvery503(t *testing.T) {
	clk := newStepClock()
	for _, tc := range []struct {
		name       string
		retryAfter time.Duration
		want       string
	}{
		{"default", 0, "10"},
		{"a second", time.Second, "1"},
		{"rounded up", 1500 * time.Millisecond, "2"},
		{"under a second", time.Nanosecond, "1"},
		{"MaxRetryAfter", MaxRetryAfter, "3600"},
	} {
		t.Run("store down, "+tc.name, func(t *testing.T) {
			cfg := Config{Scheme: HMACSHA256(), Secrets: []string{hmacSecret}, Replay: failingStore{}, Namespace: "endpoint",
				RetryAfter: tc.retryAfter, Now: clk.Now}
			next := &recordingHandler{}
			rec := deliver(newVerifier(t, cfg).Middleware(next), signed(t, newSigner(t, cfg), "evt", "b"), "b")
			if rec.Code != http.StatusServiceUnavailable || rec.Header().Values("Retry-After")[0] != tc.want ||
				len(rec.Header().Values("Retry-After")) != 1 || next.calls.Load() != 0 {
				t.Fatalf("status %d, Retry-After %q, handler calls %d; want 503, %q, 0",
					rec.Code, rec.Header().Values("Retry-After"), next.calls.Load(), tc.want)
			}
		})
	}
	t.Run("store full", func(t *testing.T) {
		full := replay.NewMemoryStore(1)
		cfg := Config{Scheme: HMACSHA256(), Secrets: []string{hmacSecret}, Replay: full, Namespace: "endpoint", RetryAfter: 7 * time.Second, Now: clk.Now}
		mw := newVerifier(t, cfg).Middleware(&recordingHandler{})
		s := newSigner(t, cfg)
		deliver(mw, signed(t, s, "first", "a"), "a")
		rec := deliver(mw, signed(t, s, "second", "c"), "c")
		if rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") != "7" {
			t.Fatalf("status %d, Retry-After %q; want 503, 7", rec.Code, rec.Header().Get("Retry-After"))
		}
	})
	t.Run("in progress: the lease, not RetryAfter", func(t *testing.T) {
		cfg := Config{Scheme: HMACSHA256(), Secrets: []string{hmacSecret}, Lease: 42 * time.Second, RetryAfter: 7 * time.Second, Now: clk.Now}
		v := newVerifier(t, cfg)
		h := signed(t, newSigner(t, cfg), "evt", "b")
		d, err := v.Verify(h, []byte("b"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := v.Acquire(t.Context(), d); err != nil {
			t.Fatal(err)
		}
		rec := deliver(v.Middleware(&recordingHandler{}), h, "b")
		if rec.Code != http.StatusServiceUnavailable || rec.Header().Values("Retry-After")[0] != "42" || len(rec.Header().Values("Retry-After")) != 1 {
			t.Fatalf("status %d, Retry-After %q; want 503, [42]", rec.Code, rec.Header().Values("Retry-After"))
		}
	})
	t.Run("no header on other refusals", func(t *testing.T) {
		cfg := Config{Scheme: HMACSHA256(), Secrets: []string{hmacSecret}, RetryAfter: 7 * time.Second, Now: clk.Now}
		mw := newVerifier(t, cfg).Middleware(&recordingHandler{})
		for name, h := range map[string]http.Header{
			"forged":     {HeaderWebhookSignature: {"sha256=" + string(make([]byte, 64))}, HeaderWebhookID: {"evt"}},
			"no ID":      {HeaderWebhookSignature: {signSHA256([]byte(hmacSecret), []byte("b"))}},
			"no headers": {},
		} {
			if rec := deliver(mw, h, "b"); rec.Code == http.StatusServiceUnavailable || rec.Header().Get("Retry-After") != "" {
				t.Errorf("%s: status %d, Retry-After %q", name, rec.Code, rec.Header().Get("Retry-After"))
			}
		}
		var zero *Verifier
		if rec := deliver(zero.Middleware(&recordingHandler{}), http.Header{}, "b"); rec.Code != http.StatusInternalServerError || rec.Header().Get("Retry-After") != "" {
			t.Errorf("zero Verifier: status %d, Retry-After %q", rec.Code, rec.Header().Get("Retry-After"))
		}
	})
}
