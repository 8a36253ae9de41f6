package webhook

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestWebhookSHA256(t *testing.T) {
	t.Run("accepts any configured secret", func(t *testing.T) {
		oldSigner := newSigner(t, Config{Scheme: HMACSHA256(), Secrets: []string{"old secret, 16+ bytes"}})
		h := http.Header{}
		if err := oldSigner.Sign(h, "d1", []byte("body")); err != nil {
			t.Fatal(err)
		}
		v := newVerifier(t, Config{Scheme: HMACSHA256(), Secrets: []string{"new secret, 16+ bytes", "old secret, 16+ bytes"}})
		if _, err := v.Verify(h, []byte("body")); err != nil {
			t.Fatalf("delivery signed with the previous secret: %v", err)
		}
	})

	t.Run("verifier rejects", func(t *testing.T) {
		v := newVerifier(t, Config{Scheme: HMACSHA256(), Secrets: []string{githubSecret}, MaxBody: 64})
		good := func() http.Header {
			h := http.Header{}
			h.Set("X-Webhook-ID", "delivery-1")
			h.Set("X-Webhook-Signature", githubSig)
			return h
		}
		tests := []struct {
			name   string
			edit   func(http.Header)
			body   string
			want   error
			reason string
		}{
			{"tampered body", nil, "Hello, World?", ErrSignature, "signature mismatch"},
			{"wrong secret", func(h http.Header) {
				h.Set("X-Webhook-Signature", signSHA256([]byte("another secret, 16+ bytes"), []byte(githubBody)))
			}, githubBody, ErrSignature, "signature mismatch"},
			{"missing signature", func(h http.Header) { h.Del("X-Webhook-Signature") }, githubBody, ErrSignature, "signature header missing or repeated"},
			{"empty signature", func(h http.Header) { h.Set("X-Webhook-Signature", "") }, githubBody, ErrSignature, "signature header missing or repeated"},
			{"repeated signature", func(h http.Header) { h.Add("X-Webhook-Signature", githubSig) }, githubBody, ErrSignature, "signature header missing or repeated"},
			{"bare hex", func(h http.Header) { h.Set("X-Webhook-Signature", githubSig[len("sha256="):]) }, githubBody, ErrSignature, "signature header malformed"},
			{"sha1 prefix", func(h http.Header) { h.Set("X-Webhook-Signature", "sha1="+githubSig[len("sha256="):]) }, githubBody, ErrSignature, "signature header malformed"},
			{"upper-case prefix", func(h http.Header) { h.Set("X-Webhook-Signature", "SHA256="+githubSig[len("sha256="):]) }, githubBody, ErrSignature, "signature header malformed"},
			{"truncated hex", func(h http.Header) { h.Set("X-Webhook-Signature", githubSig[:len(githubSig)-2]) }, githubBody, ErrSignature, "signature header malformed"},
			{"non-hex", func(h http.Header) { h.Set("X-Webhook-Signature", githubSig[:len(githubSig)-1]+"g") }, githubBody, ErrSignature, "signature header malformed"},
			{"missing id", func(h http.Header) { h.Del("X-Webhook-ID") }, githubBody, ErrMalformed, "delivery id header missing or repeated"},
			{"repeated id", func(h http.Header) { h.Add("X-Webhook-ID", "delivery-2") }, githubBody, ErrMalformed, "delivery id header missing or repeated"},
			{"id too long", func(h http.Header) { h.Set("X-Webhook-ID", strings.Repeat("a", 257)) }, githubBody, ErrMalformed, "delivery id empty or too long"},
			{"id with space", func(h http.Header) { h.Set("X-Webhook-ID", "a b") }, githubBody, ErrMalformed, "delivery id has a forbidden character"},
			{"id with non-ASCII", func(h http.Header) { h.Set("X-Webhook-ID", "é") }, githubBody, ErrMalformed, "delivery id has a forbidden character"},
			{"body over cap", nil, strings.Repeat("x", 65), ErrTooLarge, "body over cap"},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				h := good()
				if tc.edit != nil {
					tc.edit(h)
				}
				_, err := v.Verify(h, []byte(tc.body))
				if !errors.Is(err, tc.want) {
					t.Fatalf("err = %v, want %v", err, tc.want)
				}
				if got := Reason(err); got != tc.reason {
					t.Fatalf("Reason = %q, want %q", got, tc.reason)
				}
			})
		}
	})
}

// Cursor() is HMACSHA256() under Cursor's fixed headers: either verifies
// what the other signs, with the X-Webhook-ID as the delivery ID, and only
// the name differs.
func TestCursorIsHMACSHA256UnderFixedHeaders(t *testing.T) {
	if Cursor().String() != "cursor" || HMACSHA256().String() != "hmac-sha256" {
		t.Fatalf("names %q, %q", Cursor(), HMACSHA256())
	}
	clk := newStepClock()
	body := `{"event":"statusChange","status":"FINISHED"}`
	for _, pair := range [][2]Scheme{{Cursor(), HMACSHA256()}, {HMACSHA256(), Cursor()}} {
		s := newSigner(t, Config{Scheme: pair[0], Secrets: []string{hmacSecret}, Now: clk.Now})
		v := newVerifier(t, Config{Scheme: pair[1], Secrets: []string{hmacSecret}, Now: clk.Now})
		h := signed(t, s, "evt_cursor_1", body)
		if len(h) != 2 || h.Get(HeaderWebhookID) != "evt_cursor_1" || !strings.HasPrefix(h.Get(HeaderWebhookSignature), "sha256=") {
			t.Fatalf("%v signed %v", pair[0], h)
		}
		if d, err := v.Verify(h, []byte(body)); err != nil || d.ID != "evt_cursor_1" {
			t.Fatalf("%v signs, %v verifies: %+v, %v", pair[0], pair[1], d, err)
		}
	}
	for _, cfg := range []Config{
		{Scheme: Cursor(), Secrets: []string{hmacSecret}, SignatureHeader: "X-Sig"},
		{Scheme: Cursor(), Secrets: []string{hmacSecret}, IDHeader: "X-ID"},
		{Scheme: Cursor(), Secrets: []string{hmacSecret}, Tolerance: time.Minute},
	} {
		if _, err := NewVerifier(cfg); !errors.Is(err, ErrConfig) {
			t.Errorf("%+v: %v, want ErrConfig", cfg, err)
		}
	}
}
