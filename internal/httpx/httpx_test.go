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
