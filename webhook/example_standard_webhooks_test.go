package webhook_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/ctoken/ctoken/webhook"
)

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

// Signing with a Standard Webhooks Ed25519 (v1a) private key reproduces
// the Standard Webhooks Go library's published signature; receivers
// verify with the matching whpk_ public key.
func ExampleStandardWebhooksEd25519() {
	now := func() time.Time { return time.Unix(1614265330, 0) }
	s, err := webhook.NewSigner(webhook.Config{
		Scheme:  webhook.StandardWebhooksEd25519(),
		Secrets: []string{"whsk_VEVTVFNJR05JTkdLRVlET05PVFVTRVRISVNGT1JBTlk="},
		Now:     now,
	})
	if err != nil {
		panic(err)
	}
	h := http.Header{}
	if err := s.Sign(h, "msg_p5jXN8AQM9LWM0D4loKWxJek", []byte(`{"test": 2432232314}`)); err != nil {
		panic(err)
	}
	fmt.Println(h.Get(webhook.HeaderStandardSignature))

	v, err := webhook.NewVerifier(webhook.Config{
		Scheme:  webhook.StandardWebhooksEd25519(),
		Secrets: []string{"whpk_ZlN4eg7dSSqi0moX9hQUk3orrOouK3QVQSlJa248c/g="},
		Now:     now,
	})
	if err != nil {
		panic(err)
	}
	_, err = v.Verify(h, []byte(`{"test": 2432232314}`))
	fmt.Println(err)
	// Output:
	// v1a,tQ9V2XOqn7jL/DQenEFpqIugdBVtiMmER5mhSkXBNwM0mkATuDe6KYYUuxqtaiHeYGb7KaaBRdM5WqyeFiL8Ag==
	// <nil>
}
