package ctoken

import (
	"errors"
	"testing"

	"github.com/ctoken/ctoken/webhook"
)

// Reason reads the module's one reason-carrying error (internal/reason), so
// it gives the same answer as webhook.Reason on a webhook error.
func TestReasonReadsWebhookErrors(t *testing.T) {
	_, err := webhook.NewVerifier(webhook.Config{})
	if !errors.Is(err, webhook.ErrConfig) {
		t.Fatalf("NewVerifier(zero Config) = %v, want webhook.ErrConfig", err)
	}
	if got, want := reasonText(err), webhook.Reason(err); got == "" || got != want {
		t.Fatalf("Reason = %q, webhook.Reason = %q; want the same non-empty reason", got, want)
	}
}

// A rejection with a cause (a replay store's error) matches both the
// rejection's sentinel and the cause, keeps the fixed reason, and carries
// the cause's text after it.
func TestReasonSurvivesAStoreFailure(t *testing.T) {
	clk := newStepClock()
	c := singleUseCodec(t, Signed, failingStore{}, clk, mustKeyring(t, fixedKey(20)))
	wire, err := c.Encode("x", "alice", "")
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Decode(wire, "alice", "")
	if err == nil || reasonText(err) != "replay store failed" || errors.Is(err, ErrStateReplayed) || errors.Is(err, ErrStateInvalid) {
		t.Fatalf("decode with a failing store = %v (reason %q)", err, reasonText(err))
	}
	if got, want := err.Error(), "ctoken: request state: replay store failed: store unreachable"; got != want {
		t.Fatalf("error text = %q, want %q", got, want)
	}
}
