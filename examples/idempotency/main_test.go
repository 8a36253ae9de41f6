package main

import (
	"strings"
	"testing"
)

func TestIdempotencyDemoChargesEachPaymentOnce(t *testing.T) {
	var out strings.Builder
	if err := run(&out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	for _, want := range []string{
		"client: attempt 1 timed out; retrying with the same key",
		"got 409 Conflict, Retry-After 5s: the first attempt is still running",
		"got 201 Created (Idempotent-Replayed: true)",
		"client: attempt 1 got 422 Unprocessable Entity",
		"server: charging order-2 failed: card network unavailable",
		"client: attempt 1 got 503 Service Unavailable; retrying with the same key",
		"client: attempt 2 got 201 Created: ",
		"bank charged each of 2 payments exactly once: done",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q\n%s", want, out.String())
		}
	}
	if n := strings.Count(out.String(), "server: charged order-1"); n != 1 {
		t.Errorf("order-1 charged %d times\n%s", n, out.String())
	}
}
