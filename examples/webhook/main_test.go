package main

import (
	"strings"
	"testing"
)

func TestWebhookDemoShowsEveryOutcome(t *testing.T) {
	t.Setenv("WEBHOOK_SECRET", "")
	var out strings.Builder
	if err := run(&out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	for _, want := range []string{
		`handler processed msg_001: {"event":"statusChange","id":"bc-1","status":"FINISHED"}`,
		"sender got 204 No Content",
		"sender got 200 OK",
		"receiver refused: signature mismatch",
		"receiver refused: timestamp too old",
		"sender got 401 Unauthorized",
		"receiver acknowledged msg_001 as already processed",
		"receiver refused: delivery in progress under a live lease",
		"sender got 503 Service Unavailable, Retry-After 60s",
		"handler processed msg_004: ",
		"receiver acknowledged msg_004 as already processed",
		"handler failed on msg_005 (attempt 1)",
		"sender got 500 Internal Server Error",
		"handler processed msg_005: ",
		"handler processed each of 3 deliveries once: done",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q\n%s", want, out.String())
		}
	}
}

func TestWebhookDemoRefusesMalformedSecret(t *testing.T) {
	t.Setenv("WEBHOOK_SECRET", "whsec_not base64")
	var out strings.Builder
	if err := run(&out); err == nil {
		t.Fatal("malformed WEBHOOK_SECRET accepted")
	}
}
