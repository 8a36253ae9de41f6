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
		"handler processed 1 of 4 deliveries: done",
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
