package webhook_test

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/ctoken/ctoken/observe"
	"github.com/ctoken/ctoken/webhook"
)

// Verifying GitHub's published example delivery.
func ExampleVerifier_Verify() {
	v, err := webhook.NewVerifier(webhook.Config{
		Scheme:  webhook.GitHub(),
		Secrets: []string{"It's a Secret to Everybody"},
	})
	if err != nil {
		panic(err)
	}
	h := http.Header{}
	h.Set(webhook.HeaderGitHubDelivery, "72d3162e-cc78-11e3-81ab-4c9367dc0958")
	h.Set(webhook.HeaderGitHubSignature, "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17")

	d, err := v.Verify(h, []byte("Hello, World!"))
	fmt.Println(d.ID, err)
	_, err = v.Verify(h, []byte("Hello, World?"))
	fmt.Println(errors.Is(err, webhook.ErrSignature), webhook.Reason(err))
	// Output:
	// 72d3162e-cc78-11e3-81ab-4c9367dc0958 <nil>
	// true signature mismatch
}

// Signing the Standard Webhooks published example.
func ExampleSigner_Sign() {
	s, err := webhook.NewSigner(webhook.Config{
		Scheme:  webhook.StandardWebhooks(),
		Secrets: []string{"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"},
		Now:     func() time.Time { return time.Unix(1614265330, 0) },
	})
	if err != nil {
		panic(err)
	}
	h := http.Header{}
	if err := s.Sign(h, "msg_p5jXN8AQM9LWM0D4loKWxJek", []byte(`{"test": 2432232314}`)); err != nil {
		panic(err)
	}
	fmt.Println(h.Get(webhook.HeaderStandardTimestamp))
	fmt.Println(h.Get(webhook.HeaderStandardSignature))
	// Output:
	// 1614265330
	// v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=
}

// A receiver for Standard Webhooks deliveries: the middleware admits each
// authentic delivery once, and the handler reads the body as usual.
func ExampleVerifier_Middleware() {
	secret := "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	verifier, err := webhook.NewVerifier(webhook.Config{Scheme: webhook.StandardWebhooks(), Secrets: []string{secret}})
	if err != nil {
		panic(err)
	}
	handler := verifier.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		d, _ := webhook.DeliveryFrom(r.Context())
		fmt.Printf("handled %s: %s\n", d.ID, body)
	}))

	// The sending side.
	signer, err := webhook.NewSigner(webhook.Config{Scheme: webhook.StandardWebhooks(), Secrets: []string{secret}})
	if err != nil {
		panic(err)
	}
	send := func(body string, edit func(*http.Request)) int {
		req := httptest.NewRequest(http.MethodPost, "/hooks", strings.NewReader(body))
		if err := signer.Sign(req.Header, "msg_1", []byte(body)); err != nil {
			panic(err)
		}
		if edit != nil {
			edit(req)
		}
		rec := httptest.NewRecorder()
		handler.ServeHTTP(rec, req)
		return rec.Code
	}
	fmt.Println(send(`{"run":"done"}`, nil))
	fmt.Println(send(`{"run":"done"}`, nil)) // a retry: acknowledged, not handled again
	fmt.Println(send(`{"run":"done"}`, func(r *http.Request) { r.Header.Del(webhook.HeaderStandardSignature) }))
	fmt.Println(send(`{"run":"done"}`, func(r *http.Request) { r.Header.Del(webhook.HeaderStandardID) }))
	// Output:
	// handled msg_1: {"run":"done"}
	// 200
	// 200
	// 401
	// 400
}

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

// Verifying a Cursor agent webhook: the vector of
// testdata/vectors/webhook.json, signed with the secret
// "cursor-webhook-secret-0123".
func ExampleCursor() {
	v, err := webhook.NewVerifier(webhook.Config{
		Scheme:  webhook.Cursor(),
		Secrets: []string{"cursor-webhook-secret-0123"}, // in a server: os.Getenv("CURSOR_WEBHOOK_SECRET")
	})
	if err != nil {
		panic(err)
	}
	body := []byte(`{"event":"statusChange","status":"FINISHED"}`)
	h := http.Header{}
	h.Set(webhook.HeaderWebhookID, "evt_1")
	h.Set(webhook.HeaderWebhookSignature, "sha256=f262341f2101e8fc125ce6cfe90fafaf61b9abeccebfe093fc7ef7e50625a392")

	d, err := v.Verify(h, body)
	fmt.Println(d.ID, err)
	// In a server: mux.Handle("POST /hooks/cursor", v.Middleware(handler))
	// Output:
	// evt_1 <nil>
}
