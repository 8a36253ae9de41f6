package webhook_test

import (
	"fmt"
	"net/http"

	"github.com/ctoken/ctoken/webhook"
)

// Verifying a Shopify delivery: the app's client secret signs the raw
// body, and X-Shopify-Webhook-Id, the same on every retry, names the
// delivery. Neither the ID nor a time is signed, so replay protection is
// the middleware's store (see ExampleVerifier_Middleware). The delivery
// here is signed by a Signer, as a test of a receiver would do.
func ExampleShopify() {
	cfg := webhook.Config{
		Scheme:  webhook.Shopify(),
		Secrets: []string{"shpss_example_client_secret"}, // a fixed test secret
	}
	s, err := webhook.NewSigner(cfg)
	if err != nil {
		panic(err)
	}
	body := []byte(`{"id":820982911946154508,"email":"jon@example.com"}`)
	h := http.Header{}
	if err := s.Sign(h, "b54557e4-bdd9-4b37-8a5f-bf7d70bcd043", body); err != nil {
		panic(err)
	}
	fmt.Println(h.Get(webhook.HeaderShopifyHmac))

	v, err := webhook.NewVerifier(cfg)
	if err != nil {
		panic(err)
	}
	d, err := v.Verify(h, body)
	fmt.Println(d.ID, err)
	// Output:
	// MWgENI9oq+A9tVM9gQDq1BRSoAkL7M1QVTxUh+kt6kg=
	// b54557e4-bdd9-4b37-8a5f-bf7d70bcd043 <nil>
}
