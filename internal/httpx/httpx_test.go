package httpx

import (
	"net/http"
	"testing"
	"time"
)

func TestRetryStatus(t *testing.T) {
	for code, want := range map[int]bool{
		200: false, 201: false, 302: false, 400: false, 404: false, 409: false, 422: false,
		408: true, 423: true, 425: true, 429: true, 500: true, 502: true, 503: true, 599: true,
	} {
		if got := RetryStatus(code); got != want {
			t.Errorf("RetryStatus(%d) = %v, want %v", code, got, want)
		}
	}
}

func TestRetryAfterSeconds(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0: "1", time.Millisecond: "1", time.Second: "1", 1001 * time.Millisecond: "2", time.Minute: "60",
	} {
		if got := RetryAfterSeconds(d); got != want {
			t.Errorf("RetryAfterSeconds(%v) = %q, want %q", d, got, want)
		}
	}
}

func TestFenceRetryAfter(t *testing.T) {
	now := time.Date(2026, 11, 25, 1, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name string
		end  time.Time
		want string
	}{
		{"a fence ending in 25 hours is capped at 30 s", now.Add(25 * time.Hour), "30"},
		{"a fence ending in 90 000 s is capped at 30 s", now.Add(90000 * time.Second), "30"},
		{"just over the cap is capped", now.Add(MaxFenceRetryAfter + time.Millisecond), "30"},
		{"at the cap", now.Add(MaxFenceRetryAfter), "30"},
		{"a fence ending in 12.2 s: its seconds, rounded up", now.Add(12200 * time.Millisecond), "13"},
		{"a fence ended: 1", now.Add(-time.Minute), "1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := FenceRetryAfter(tc.end, now); got != tc.want {
				t.Errorf("FenceRetryAfter = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestFenceEndIsUTCRoundedUp(t *testing.T) {
	paris := time.FixedZone("CET", 3600)
	for _, tc := range []struct {
		name string
		end  time.Time
		want string
	}{
		{"a whole second, in another zone", time.Date(2026, 11, 26, 2, 0, 0, 0, paris), "2026-11-26T01:00:00Z"},
		{"a fraction rounds up", time.Date(2026, 11, 26, 1, 0, 0, 1, time.UTC), "2026-11-26T01:00:01Z"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := FenceEnd(tc.end); got != tc.want {
				t.Errorf("FenceEnd = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestIsTimeoutHandler(t *testing.T) {
	h := http.NotFoundHandler()
	for _, tc := range []struct {
		name string
		h    http.Handler
		want bool
	}{
		{"a TimeoutHandler", http.TimeoutHandler(h, time.Second, ""), true},
		{"a handler", h, false},
		{"a TimeoutHandler behind another wrapper", http.StripPrefix("/", http.TimeoutHandler(h, time.Second, "")), false},
		{"nil", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := IsTimeoutHandler(tc.h); got != tc.want {
				t.Fatalf("IsTimeoutHandler = %v, want %v", got, tc.want)
			}
		})
	}
}
