package ctoken_test

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/ctoken/ctoken"
)

// GitHub's published example: the signature of "Hello, World!" under the
// secret "It's a Secret to Everybody".
func ExampleSignWebhookSHA256() {
	fmt.Println(ctoken.SignWebhookSHA256([]byte("It's a Secret to Everybody"), []byte("Hello, World!")))
	// Output: sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17
}

// Verifying a GitHub delivery: the same scheme as Cursor's, with GitHub's
// header names.
func ExampleWebhookVerifier_Verify() {
	v, err := ctoken.NewWebhookVerifier(ctoken.WebhookConfig{
		Secrets:         []string{"It's a Secret to Everybody"},
		SignatureHeader: "X-Hub-Signature-256",
		IDHeader:        "X-GitHub-Delivery",
	})
	if err != nil {
		panic(err)
	}
	h := http.Header{}
	h.Set("X-GitHub-Delivery", "72d3162e-cc78-11e3-81ab-4c9367dc0958")
	h.Set("X-Hub-Signature-256", "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17")

	d, err := v.Verify(h, []byte("Hello, World!"))
	fmt.Println(d.ID, err)
	_, err = v.Verify(h, []byte("Hello, World?"))
	fmt.Println(errors.Is(err, ctoken.ErrWebhookSignature), ctoken.Reason(err))
	// Output:
	// 72d3162e-cc78-11e3-81ab-4c9367dc0958 <nil>
	// true signature mismatch
}

// The Standard Webhooks reference vector.
func ExampleSignStandardWebhook() {
	// A whsec_ secret is standard base64 after the prefix.
	secret, err := base64.StdEncoding.DecodeString(strings.TrimPrefix("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "whsec_"))
	if err != nil {
		panic(err)
	}
	fmt.Println(ctoken.SignStandardWebhook(secret, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, []byte(`{"test": 2432232314}`)))
	// Output: v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=
}

// A receiver for Standard Webhooks deliveries: the middleware admits each
// authentic delivery once, and the handler reads the body as usual.
func ExampleWebhookVerifier_Middleware() {
	cfg := ctoken.WebhookConfig{
		Scheme:  ctoken.WebhookStandard,
		Secrets: []string{"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"},
	}
	verifier, err := ctoken.NewWebhookVerifier(cfg)
	if err != nil {
		panic(err)
	}
	handler := verifier.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		d, _ := ctoken.WebhookDeliveryFrom(r.Context())
		fmt.Printf("handled %s: %s\n", d.ID, body)
	}))

	// The sending side.
	signer, err := ctoken.NewWebhookSigner(cfg)
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
	fmt.Println(send(`{"run":"done"}`, func(r *http.Request) { r.Header.Del("webhook-signature") }))
	fmt.Println(send(`{"run":"done"}`, func(r *http.Request) { r.Header.Del("webhook-id") }))
	// Output:
	// handled msg_1: {"run":"done"}
	// 200
	// 200
	// 401
	// 400
}

// A one-time bootstrap token: minted for one agent run, exchanged once.
func ExampleOneTimeIssuer() {
	keys, err := ctoken.NewKeyring(ctoken.RandomKey())
	if err != nil {
		panic(err)
	}
	tokens, err := ctoken.NewOneTimeIssuer(ctoken.OneTimeConfig{Keys: keys})
	if err != nil {
		panic(err)
	}
	claims := map[string]string{"agent": "agt_42", "company": "co_7", "run": "run_1"}
	tok, err := tokens.Mint(claims)
	if err != nil {
		panic(err)
	}

	ctx := context.Background()
	err = tokens.Redeem(ctx, tok, map[string]string{"agent": "agt_42", "company": "co_7", "run": "run_2"})
	fmt.Println(errors.Is(err, ctoken.ErrOneTimeClaims))
	fmt.Println(tokens.Redeem(ctx, tok, claims))
	err = tokens.Redeem(ctx, tok, claims)
	fmt.Println(errors.Is(err, ctoken.ErrOneTimeRedeemed))
	// Output:
	// true
	// <nil>
	// true
}

// A bounded replay store refuses new IDs when full instead of forgetting
// live ones.
func ExampleMemoryReplayStore() {
	store := ctoken.NewMemoryReplayStore(2)
	ctx, until := context.Background(), time.Now().Add(time.Minute)
	for _, id := range []string{"a", "a", "b", "c"} {
		first, err := store.Claim(ctx, id, until)
		fmt.Println(id, first, err)
	}
	// Output:
	// a true <nil>
	// a false <nil>
	// b true <nil>
	// c false ctoken: replay store full
}

// Single-use request state: with a replay store configured, a state is
// accepted once; a replayed copy is refused.
func ExampleRequestStateCodec_DecodeContext() {
	keys, err := ctoken.NewKeyring(ctoken.RandomKey()) // one process; a fleet shares its keys
	if err != nil {
		panic(err)
	}
	codec, err := ctoken.NewRequestStateCodec(ctoken.RequestStateSecurity{
		Keys:   keys,
		Mode:   ctoken.Encrypted,
		Replay: ctoken.NewMemoryReplayStore(0),
	})
	if err != nil {
		panic(err)
	}
	wire, err := codec.Encode(`{"step":2}`, "alice", "")
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	fmt.Println(codec.DecodeContext(ctx, wire, "alice", ""))
	_, err = codec.DecodeContext(ctx, wire, "alice", "")
	fmt.Println(errors.Is(err, ctoken.ErrStateReplayed))
	// Output:
	// {"step":2} <nil>
	// true
}
