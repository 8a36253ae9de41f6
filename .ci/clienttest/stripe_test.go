package clienttest

import (
	"context"
	"fmt"
	"net/http"
	"testing"

	"github.com/stripe/stripe-go/v85"
)

// stripeAPI is an api with Stripe's POST /v1/customers: it answers 200
// with a Stripe-shaped customer whose id is unique per run.
func stripeAPI(t *testing.T) *api {
	return newAPI(t, func(a *api) {
		a.handle("POST /v1/customers", func(w http.ResponseWriter, r *http.Request) {
			if err := r.ParseForm(); err != nil {
				http.Error(w, "bad form", http.StatusBadRequest)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"id":"cus_%d","object":"customer","email":%q}`, a.runs.Load(), r.PostForm.Get("email"))
		})
	})
}

// stripeClient is stripe-go's own client pointed at a, retrying network
// failures retries times.
func stripeClient(a *api, retries int64) *stripe.Client {
	return stripe.NewClient("sk_test_alice", stripe.WithBackends(stripe.NewBackendsWithConfig(&stripe.BackendConfig{
		URL:               stripe.String(a.srv.URL),
		HTTPClient:        a.srv.Client(),
		MaxNetworkRetries: stripe.Int64(retries),
		EnableTelemetry:   stripe.Bool(false),
		LeveledLogger:     &stripe.LeveledLogger{Level: stripe.LevelNull},
	})))
}

func TestStripeGoClientGetsTheReplay(t *testing.T) {
	ctx := context.Background()
	t.Run("the same key twice: 200, then the first customer replayed, one run", func(t *testing.T) {
		a := stripeAPI(t)
		sc := stripeClient(a, 0)
		const key = "8e03978e-40d5-43e8-bc93-6894a57f9324"
		params := func() *stripe.CustomerCreateParams {
			p := &stripe.CustomerCreateParams{Email: stripe.String("jenny@example.com")}
			p.IdempotencyKey = stripe.String(key)
			return p
		}
		first, err := sc.V1Customers.Create(ctx, params())
		if err != nil {
			t.Fatal(err)
		}
		if got := a.last(); len(got.key) != 1 || got.key[0] != key || got.status != http.StatusOK || got.replayed != "" {
			t.Fatalf("first request as received: %+v, want the bare key once and 200", got)
		}
		second, err := sc.V1Customers.Create(ctx, params())
		if err != nil {
			t.Fatal(err)
		}
		if second.ID != first.ID || second.Object != "customer" || second.Email != "jenny@example.com" {
			t.Fatalf("second customer %q %q %q, want the first, %q", second.ID, second.Object, second.Email, first.ID)
		}
		if h := second.LastResponse.Header.Get("Idempotent-Replayed"); h != "true" || a.last().replayed != "true" {
			t.Fatalf("Idempotent-Replayed %q (server side %q), want true", h, a.last().replayed)
		}
		if a.runs.Load() != 1 {
			t.Fatalf("handler ran %d times", a.runs.Load())
		}
	})
	t.Run("a key stripe-go generates survives its retry of a lost response: the retry is replayed", func(t *testing.T) {
		a := stripeAPI(t)
		sc := stripeClient(a, 2)
		a.dropNext.Store(true)
		c, err := sc.V1Customers.Create(ctx, &stripe.CustomerCreateParams{Email: stripe.String("jenny@example.com")})
		if err != nil {
			t.Fatal(err)
		}
		reqs := a.requests()
		if len(reqs) != 2 || len(reqs[0].key) != 1 || len(reqs[1].key) != 1 || reqs[0].key[0] != reqs[1].key[0] {
			t.Fatalf("requests %+v, want two with one generated key", reqs)
		}
		if reqs[0].status != http.StatusOK || reqs[1].replayed != "true" || c.LastResponse.Header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("first %d, retry replayed %q / %q", reqs[0].status, reqs[1].replayed, c.LastResponse.Header.Get("Idempotent-Replayed"))
		}
		if a.runs.Load() != 1 || c.ID != "cus_1" {
			t.Fatalf("handler ran %d times; customer %q", a.runs.Load(), c.ID)
		}
	})
}

// TestStripeGoRetriesTheMiddlewaresRefusals pins how stripe-go treats the
// middleware's refusals (problem+json bodies, not Stripe's error objects):
// it retries every answer whose body is not a Stripe error, 4xx included,
// up to MaxNetworkRetries, so a changed body under a used key is sent
// 1 + MaxNetworkRetries times. Each is refused again (422) and the handler
// ran once: wasted requests, never a second effect (docs/idempotency.md).
func TestStripeGoRetriesTheMiddlewaresRefusals(t *testing.T) {
	ctx := context.Background()
	a := stripeAPI(t)
	const retries = 2
	sc := stripeClient(a, retries)
	const key = "5b0c3c8e-3f7e-4d0a-9d55-3c1f3c0f8a11"
	create := func(email string) error {
		p := &stripe.CustomerCreateParams{Email: stripe.String(email)}
		p.IdempotencyKey = stripe.String(key)
		_, err := sc.V1Customers.Create(ctx, p)
		return err
	}
	if err := create("jenny@example.com"); err != nil {
		t.Fatal(err)
	}
	err := create("mallory@example.com") // the same key, another body
	if err == nil {
		t.Fatal("a changed body under a used key was accepted")
	}
	reqs := a.requests()
	if len(reqs) != 2+retries {
		t.Fatalf("%d requests; want the first and 1+%d of the changed body", len(reqs), retries)
	}
	for i, r := range reqs[1:] {
		if r.status != http.StatusUnprocessableEntity {
			t.Fatalf("attempt %d of the changed body: %d; want 422", i+1, r.status)
		}
	}
	if a.runs.Load() != 1 {
		t.Fatalf("handler ran %d times; want once", a.runs.Load())
	}
}

func TestStripeGoBareKeyAndAQuotedKeyAreOneKey(t *testing.T) {
	ctx := context.Background()
	const key = "1763962740123456789_AbC-d_"
	create := func(sc *stripe.Client) (*stripe.Customer, error) {
		p := &stripe.CustomerCreateParams{Email: stripe.String("jenny@example.com")}
		p.IdempotencyKey = stripe.String(key)
		return sc.V1Customers.Create(ctx, p)
	}
	t.Run("stripe-go first (bare), then a quoted raw request: replayed", func(t *testing.T) {
		a := stripeAPI(t)
		first, err := create(stripeClient(a, 0))
		if err != nil {
			t.Fatal(err)
		}
		sent := a.last()
		resp, body := a.raw(http.MethodPost, "/v1/customers", "sk_test_alice", `"`+key+`"`, sent.contentType, sent.body)
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Idempotent-Replayed") != "true" || string(body) != string(first.LastResponse.RawJSON) {
			t.Fatalf("quoted retry: %d %q %s", resp.StatusCode, resp.Header.Get("Idempotent-Replayed"), body)
		}
		if a.runs.Load() != 1 {
			t.Fatalf("handler ran %d times", a.runs.Load())
		}
	})
	t.Run("a quoted raw request first, then stripe-go (bare): replayed", func(t *testing.T) {
		// The form stripe-go sends, learnt from a call under another key.
		probe := stripeAPI(t)
		p := &stripe.CustomerCreateParams{Email: stripe.String("jenny@example.com")}
		p.IdempotencyKey = stripe.String("probe")
		if _, err := stripeClient(probe, 0).V1Customers.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
		form := probe.last()

		a := stripeAPI(t)
		resp, body := a.raw(http.MethodPost, "/v1/customers", "sk_test_alice", `"`+key+`"`, form.contentType, form.body)
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Idempotent-Replayed") != "" {
			t.Fatalf("quoted first: %d %q", resp.StatusCode, resp.Header.Get("Idempotent-Replayed"))
		}
		c, err := create(stripeClient(a, 0))
		if err != nil {
			t.Fatal(err)
		}
		if c.LastResponse.Header.Get("Idempotent-Replayed") != "true" || string(c.LastResponse.RawJSON) != string(body) || a.runs.Load() != 1 {
			t.Fatalf("stripe-go retry: replayed %q body %s, runs %d", c.LastResponse.Header.Get("Idempotent-Replayed"), c.LastResponse.RawJSON, a.runs.Load())
		}
	})
	t.Run("another caller with the same key is another key", func(t *testing.T) {
		a := stripeAPI(t)
		if _, err := create(stripeClient(a, 0)); err != nil {
			t.Fatal(err)
		}
		sent := a.last()
		resp, _ := a.raw(http.MethodPost, "/v1/customers", "sk_test_bob", key, sent.contentType, sent.body)
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Idempotent-Replayed") != "" || a.runs.Load() != 2 {
			t.Fatalf("bob: %d replayed %q runs %d", resp.StatusCode, resp.Header.Get("Idempotent-Replayed"), a.runs.Load())
		}
	})
}
