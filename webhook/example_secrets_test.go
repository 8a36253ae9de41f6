package webhook_test

import (
	"fmt"
	"net/http"

	"github.com/ctoken/ctoken/observe"
	"github.com/ctoken/ctoken/webhook"
)

// Secrets never print.
func ExampleConfig_Format() {
	cfg := webhook.Config{Scheme: webhook.GitHub(), Secrets: []string{"It's a Secret to Everybody"}}
	fmt.Printf("%+v\n", cfg)
	// Output:
	// webhook.Config{Scheme: github, Secrets: [1 redacted], Namespace: "", SignatureHeader: "", IDHeader: "", Tolerance: 0s, MaxBody: 0, DedupWindow: 0s, Dedup: default, Lease: 0s}
}

// Rotating a verifier's secret while it runs, told by the observer which
// secret verified each delivery: the new one is added first, and the old
// one dropped once "previous 1" no longer appears.
func ExampleVerifier_SetSecrets() {
	const oldSecret, newSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "whsec_3q2+7wAAAAD+ZmxvYXRpbmctcG9pbnQh"
	report := observe.ObserverFunc(func(e observe.Event) {
		fmt.Println(e.Kind, e.Outcome, e.Key)
	})
	v, err := webhook.NewVerifier(webhook.Config{
		Scheme:   webhook.StandardWebhooks(),
		Secrets:  []string{oldSecret},
		Observer: report,
	})
	if err != nil {
		panic(err)
	}
	sender, err := webhook.NewSigner(webhook.Config{Scheme: webhook.StandardWebhooks(), Secrets: []string{oldSecret}})
	if err != nil {
		panic(err)
	}
	deliver := func(id string) {
		h := http.Header{}
		if err := sender.Sign(h, id, []byte(`{}`)); err != nil {
			panic(err)
		}
		v.Verify(h, []byte(`{}`)) // the observer prints the outcome
	}

	deliver("msg_1")
	if err := v.SetSecrets([]string{newSecret, oldSecret}); err != nil { // learn the new secret first
		panic(err)
	}
	deliver("msg_2") // the sender still signs with the old one
	if err := sender.SetSecrets([]string{newSecret}); err != nil {
		panic(err)
	}
	deliver("msg_3")
	fmt.Println(v.SetSecrets(nil))                            // refused: the secrets in effect stay
	if err := v.SetSecrets([]string{newSecret}); err != nil { // drained: drop the old one
		panic(err)
	}
	deliver("msg_4")
	// Output:
	// webhook verified primary
	// webhook verified previous 1
	// webhook verified primary
	// webhook: no secret configured: no secret
	// webhook verified primary
}
